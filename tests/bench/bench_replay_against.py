"""Benchmark: this checkout's replay against another checkout's, on the same graphs. Not a test:
it prints one line.

    .venv/bin/python tests/bench/bench_replay_against.py FOLDER OTHER [--repeats 5]

Builds FOLDER's report once (report.json and the kept path made anew), keeps every call of the
replay it makes (the variants, the gains, the ideal trace's), then replays them all with this
checkout's ``replay`` and with OTHER's (a checkout of another commit, e.g. a ``git worktree``),
in turn, and prints the least time of each over the repeats: on a shared machine the least is
what moves least. Each graph's events are ordered into waves before the timing, once, as a
report does; the line says what that took. The two replays' ends are checked equal, bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the toolkit importable
from jobs.commands import report  # noqa: E402
from profiling.analysis.across_ranks.critical_path import gains, ideal_trace, what_if  # noqa: E402
from profiling.analysis.across_ranks.critical_path.replay import replay  # noqa: E402


def _calls(folder: Path) -> list[tuple[Any, ...]]:
    """Every replay the report of ``folder`` makes: (graph, variants, stage_of, timed)."""
    calls: list[tuple[Any, ...]] = []

    def kept(graph: Any, variants: Any, stage_of: Any = None, *, timed: bool = False) -> Any:
        calls.append((graph, variants, stage_of, timed))
        return replay(graph, variants, stage_of, timed=timed)

    for module in (what_if, gains, ideal_trace):
        module.replay = kept  # type: ignore[attr-defined]
    for made in ("report.json", "critical_path.msgpack"):
        (folder / "meta" / made).unlink(missing_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):
        report.main([str(folder)])
    return calls


def _other(checkout: Path) -> Any:
    """The other checkout's replay module, loaded beside this one's."""
    path = checkout / "profiling" / "analysis" / "across_ranks" / "critical_path" / "replay.py"
    spec = importlib.util.spec_from_file_location("other_replay", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules["other_replay"] = module
    spec.loader.exec_module(module)
    return module.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a job folder whose report replays")
    parser.add_argument("other", type=Path, help="a checkout of another commit")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    calls = _calls(args.folder)
    other = _other(args.other)
    started = time.perf_counter()
    for graph in {id(call[0]): call[0] for call in calls}.values():
        graph.__dict__.pop("waves", None)
        _ = graph.waves
    ordering = time.perf_counter() - started
    for graph, variants, stage_of, timed in calls:
        mine, theirs = (
            replay(graph, variants, stage_of, timed=timed),
            other(graph, variants, stage_of, timed=timed),
        )
        assert not isinstance(mine, str) and np.array_equal(mine.ends, theirs.ends), graph.step

    def timed_run(function: Any) -> float:
        began = time.perf_counter()
        for graph, variants, stage_of, timed in calls:
            function(graph, variants, stage_of, timed=timed)
        return time.perf_counter() - began

    here, there = [], []
    for _ in range(args.repeats):
        here.append(timed_run(replay))
        there.append(timed_run(other))
    print(
        f"{args.folder.name}: {len(calls)} replays, least of {args.repeats}: this checkout {min(here):.3f} s "
        f"(its waves, once a graph: {ordering:.3f} s), {args.other} {min(there):.3f} s; the same ends"
    )


if __name__ == "__main__":
    main()
