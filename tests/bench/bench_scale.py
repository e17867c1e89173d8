"""Benchmark: the job's end and the tools at thousands of ranks, on simulated job folders.

    .venv/bin/python tests/bench/bench_scale.py [--ranks 256 1024 4096] [--steps 100000] [--root DIR]
        [--layout pp=8,dp=64,tp=8]

Each job folder is laid out by :mod:`tests.bench.simulate_job` (step logs of ``--steps`` steps,
a trace and its analysis record per rank, the manifest; one node slow mid-run). Each tool runs
in a fresh process, its wall time and the peak memory of its process tree printed
(:func:`tests.bench.bench_report.timed`):

- ``report``: the whole report from every rank's record (json, md, png, run.png, the archive);
- ``list --ranks``: ``python -m jobs.commands.list ROOT --ranks JOB``, the live table of every rank;
- the run map alone: the step logs read and combined, slow ranks and slow nodes found;
- the archive's choice of ranks: what it reads of report.json
  (:func:`profiling.folder.report_json.read_archive_fields`), then
  :func:`profiling.archive.default_ranks`;

and the sizes: what rank 0 gathers at the job's end (every rank's manifest record, pickled as
``gather_object`` sends it), the manifest, report.json, report.md and report.html. Not a test: it asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from profiling.analysis.per_trace import record as records  # noqa: E402
from profiling.folder.layout import JobFolder  # noqa: E402
from profiling.folder.step_log import MAGIC as STEP_LOG_MAGIC  # noqa: E402
from slurm.common.mesh import parse_layout  # noqa: E402
from tests.bench.bench_report import timed  # noqa: E402

RUN_MAP = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "started = time.perf_counter()\n"
    "from profiling.analysis.run import run_logs, run_map\n"
    "from profiling.analysis.run.slow_nodes import slow_nodes\n"
    "run, _ = run_logs.read_run(Path(sys.argv[1]))\n"
    "found, nodes = run_map.segments(run), slow_nodes(run)\n"
    "print(len(found), [n.node for n in nodes], round(time.perf_counter() - started, 2))\n"
)
REPORT = "import sys\nfrom jobs.commands.report import main\nsys.exit(main(sys.argv[1:]))\n"
LIST_RANKS = "import sys\nfrom jobs.commands.list import main\nsys.exit(main(sys.argv[1:]))\n"
ARCHIVE_CHOICE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "started = time.perf_counter()\n"
    "from profiling.archive import default_ranks\n"
    "from profiling.folder.report_json import read_archive_fields\n"
    "ranks = default_ranks(read_archive_fields(Path(sys.argv[1])))\n"
    "print(len(ranks), round(time.perf_counter() - started, 3))\n"
)


def simulated(root: Path, ranks: int, steps: int, layout: str | None = None) -> Path:
    """The simulated job, made again where its records are of an older analysis (every trace
    is a link to rank 0's, which the report would read again for each rank and skip) or its
    step logs of an older format (they would be read without their memory); ``layout``: a job of
    many groups (``simulate_job.py --layout``)."""
    dims = parse_layout(layout) if layout else ()
    name = str(ranks) + "".join(f"-{dim}{size}" for dim, size in dims)
    folder = root / name
    record = folder / "meta" / "analysis" / "rank1_iter4_6.json.gz.analysis.json"  # rank 0 reads true
    stale = not record.exists() or json.loads(record.read_bytes())["version"] != records.ANALYSIS_VERSION
    log = JobFolder(root, name).step_log(0)
    stale = stale or not log.exists() or log.read_bytes()[: len(STEP_LOG_MAGIC)] != STEP_LOG_MAGIC
    if stale or not (folder / "meta" / "manifest.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
        simulator = REPO / "tests" / "bench" / "simulate_job.py"
        command = [sys.executable, str(simulator), str(root), "--ranks", str(ranks), "--steps", str(steps)]
        command += ["--layout", layout] if layout else []
        subprocess.run(command, check=True, timeout=3600)
    return folder


def sizes(folder: Path) -> dict[str, float]:
    meta = folder / "meta"
    manifest = json.loads((meta / "manifest.json").read_text())
    gathered = sum(len(pickle.dumps(record)) for record in manifest["ranks"])
    return {
        "gathered MiB": gathered / 2**20,
        "manifest MiB": (meta / "manifest.json").stat().st_size / 2**20,
        "report.json MiB": (meta / "report.json").stat().st_size / 2**20,
        "report.md KiB": (meta / "report.md").stat().st_size / 2**10,
        "report.html MB": (meta / "report.html").stat().st_size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--root", type=Path, default=Path("/tmp/simulated-jobs"))
    parser.add_argument("--layout", help="a job of many groups: pp=8,dp=64,tp=8 (one --ranks, their product)")
    args = parser.parse_args()
    rows = []
    for ranks in args.ranks:
        folder = simulated(args.root, ranks, args.steps, args.layout)
        for made in (
            "report.json",
            "report.png",
            "run.png",
            "critical_path.msgpack",
        ):  # the job's end draws them anew
            (folder / "meta" / made).unlink(missing_ok=True)
        report = timed(REPORT, str(folder))
        listed = timed(LIST_RANKS, str(args.root), "--ranks", folder.name, "--json")
        run = timed(RUN_MAP, str(folder))
        choice = timed(ARCHIVE_CHOICE, str(folder / "meta" / "report.json"))
        rows.append((ranks, report, listed, run, choice, sizes(folder)))
        print(f"{ranks} ranks done", flush=True)
    heads = ("report s", "MiB", "list s", "run map s", "MiB", "choice s")
    print(f"\n{'ranks':>6} " + " ".join(f"{h:>9}" for h in heads) + "  sizes")
    for ranks, report, listed, run, choice, size in rows:
        figures = (report.seconds, report.peak_mib, listed.seconds, run.seconds, run.peak_mib, choice.seconds)
        print(
            f"{ranks:6} "
            + " ".join(f"{f:9.2f}" for f in figures)
            + "  "
            + ", ".join(f"{key} {value:.1f}" for key, value in size.items())
        )


if __name__ == "__main__":
    main()
