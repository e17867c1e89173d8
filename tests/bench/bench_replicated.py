"""Benchmark: our report against HTA on a dense folder made from one real trace, replicated as
issue 60 describes: ``--ranks`` copies, copy r claiming rank r (``distributedInfo.rank``) with
its clock moved by r x ``--clock-ms``, everything else as the trace has it (an old torch's
collectives carry no ``Seq``: the report aligns and pairs them by order). Interleaved cold runs
of both, then ours warm, as ``bench_report.py`` runs its folders; not a test.

    .venv/bin/python tests/bench/bench_replicated.py --hta PATH [--repeats 2]
    .venv/bin/python tests/bench/bench_replicated.py --trace FILE.json.gz [--ranks 8] [--clock-ms 1.7]

``--hta``: a clone of HTA's repository (https://github.com/facebookresearch/HolisticTraceAnalysis),
a work tree or a bare git directory; its ``tests/data/df_index_resolver/df_index_resolver.json.gz``
(about 2020 alike NCCL all-reduces a rank, 5 steps, 45 MB of JSON) is the trace. ``--trace``:
any other Kineto trace, replicated the same way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from tests.bench.bench_report import PACKAGES, gpu_folder, versus_hta  # noqa: E402
from tests.common import REPO  # noqa: E402

HTA_TRACE = "tests/data/df_index_resolver/df_index_resolver.json.gz"


def hta_trace(repository: Path) -> bytes:
    """The gzipped trace from HTA's repository: its work tree, else its git objects."""
    checked_out = repository / HTA_TRACE
    if checked_out.exists():
        return checked_out.read_bytes()
    shown = subprocess.run(
        ["git", "--git-dir", str(repository), "show", f"HEAD:{HTA_TRACE}"], capture_output=True, check=False
    )
    if shown.returncode:
        sys.exit(f"--hta {repository}: no {HTA_TRACE} in its work tree or its git objects")
    return shown.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hta", type=Path, help="HTA's repository: its df_index_resolver trace")
    source.add_argument("--trace", type=Path, help="a Kineto trace (.json or .json.gz) to replicate")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--clock-ms", type=float, default=1.7, help="rank r's clock moved by r x this")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    raw = hta_trace(args.hta) if args.hta else args.trace.read_bytes()
    document: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    # HTA runs from the bytecode pip compiled; ours compiled once too (bench_report.py says why)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=REPO, check=True)
    work = Path(tempfile.mkdtemp(prefix="bench-replicated-"))
    try:
        name = "df_index_resolver" if args.hta else args.trace.name
        gpu_folder(work / "folder", args.ranks, document, clock_us=args.clock_ms * 1e3)
        versus_hta(
            f"{name} x {args.ranks} ranks, clocks {args.clock_ms} ms apart", work / "folder", args.repeats
        )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
