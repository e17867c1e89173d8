"""What the shape of a dense trace costs the reader: one trace of the dense benchmark folder
(``bench_report.py --dense-only``: 2091 alike all-reduces, no sequence numbers) written as
other producers and settings write it, each read and analysed as the report's workers do.

- ``dense``: the benchmark's own file, compact JSON (``json.dumps``);
- ``kineto layout``: the same events laid out as torch's exporter writes them (an event over
  several lines, its args indented);
- ``gzipped``: the compact file as ``--gzip-traces`` (or a ``.pt.trace.json.gz``) keeps it;
- ``issuing operators``: each all-reduce kernel with the three CPU operators torch 2.0-2.3
  records around its launch (``c10d::allreduce_``, ``record_param_comms``, ``nccl:all_reduce``);
- ``no shapes``: the args cut to ids, as a trace recorded without ``record_shapes``: the same
  events in fewer bytes.

Each is timed in this process (CPU time of :func:`analyse_trace`, the best of ``--rounds``,
the shapes interleaved), and printed with its bytes and events: what a second of reading buys
in each shape, so that a folder that reads slower than its size says can be placed.

    .venv/bin/python tests/bench/bench_shapes.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiling.analysis.per_trace.record import analyse_trace  # noqa: E402
from profiling.folder.traces import list_traces  # noqa: E402
from tests import trace_variants  # noqa: E402
from tests.bench.bench_report import DENSE_EVERY, load  # noqa: E402


def shapes(folder: Path) -> dict[str, tuple[Path, int]]:
    """Each shape's trace, written under ``folder``, and its events; by name."""
    source = trace_variants.repeated_steps(load("trace_diff_test.json.gz"), 2)
    dense = trace_variants.as_rank(trace_variants.dense_allreduces(source, every=DENSE_EVERY), 0, 1)
    issuing = trace_variants.with_issuing_operators(dense)
    texts = {
        "dense": (json.dumps(dense).encode(), dense),
        "kineto layout": (trace_variants.kineto_layout(dense), dense),
        "issuing operators": (json.dumps(issuing).encode(), issuing),
        "no shapes": (json.dumps(trace_variants.without_shapes(dense)).encode(), dense),
    }
    written = {}
    for index, (name, (text, document)) in enumerate(texts.items()):
        (folder / str(index)).mkdir()
        path = folder / str(index) / "rank0_iter1_2.json"
        path.write_bytes(text)
        written[name] = (path, len(document["traceEvents"]))
        if name == "dense":
            (folder / "gz").mkdir()
            with gzip.open(folder / "gz" / "rank0_iter1_2.json.gz", "wb", compresslevel=6) as sink:
                sink.write(text)
            written["gzipped"] = (folder / "gz" / "rank0_iter1_2.json.gz", written[name][1])
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shapes-"))
    try:
        paths = shapes(work)
        sources = {name: list_traces(path.parent)[0].source for name, (path, _) in paths.items()}
        best = dict.fromkeys(paths, float("inf"))
        for _ in range(args.rounds):  # interleaved: each shape sees the same machine
            for name, source in sources.items():
                started = time.thread_time()
                analyse_trace(source, "the benchmark")
                best[name] = min(best[name], time.thread_time() - started)
        print(f"{'shape':20}{'MB':>8}{'events':>10}{'CPU s':>8}{'µs/event':>10}{'MB/s':>8}{'× dense':>9}")
        for name, (path, events) in paths.items():
            size = len(gzip.decompress(path.read_bytes())) if path.suffix == ".gz" else path.stat().st_size
            seconds = best[name]
            print(
                f"{name:20}{size / 1e6:8.1f}{events:10d}{seconds:8.3f}{seconds / events * 1e6:10.2f}"
                f"{size / 1e6 / seconds:8.0f}{seconds / best['dense']:9.2f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
