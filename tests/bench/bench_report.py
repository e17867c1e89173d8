"""Benchmark: our cross-rank report against HTA, its memory, and its scaling.

    .venv/bin/python tests/bench/bench_report.py [--repeats 1] [--scale 16 64 256] [--skip-cpu]

Every measured program runs in a fresh process; its wall time, CPU time and peak RSS (of it and
its workers together) are printed. Not a test: it prints tables and asserts nothing. *Cold*: no
trace has an analysis record yet (every trace read); *warm*: every record is fresh.

1. GPU job folder: 8 ranks, each a real GPU trace from the fixtures (``trace_diff_test``,
   its 6 steps twice over) with its rank rewritten and its clock moved, about 450 MiB of
   JSON. HTA 0.5: ``TraceAnalysis`` + ``get_temporal_breakdown`` + ``get_comm_comp_overlap``;
   ours: the full report, cold (json, md, png, the Perfetto archive). Interleaved,
   ``--repeats`` times; then ours warm. The same folder made dense and old
   (:func:`tests.trace_variants.dense_allreduces`): every 10th compute kernel an all-reduce of
   one kind, no sequence numbers or sizes, 2091 per trace (58 MB), clocks 1.7 ms apart per rank;
   with the seconds our report spent aligning the clocks per rank pair.
2. CPU job folder: a real 8-rank job run here (submitit's local executor, every rank
   profiled for 5 steps); HTA loads it (its temporal breakdown needs GPU kernels).
3. One 1 GiB trace (the GPU trace's steps repeated): our report's peak memory.
4. Scaling: 16, 64 and 256 copies of one real GPU trace (``nccl_data``), our report only, cold
   and warm: seconds, MiB/s of JSON per core against the floor below, for the whole report
   and for reading the traces alone (each reader's wall seconds and CPU seconds, from the
   records), the archive's seconds.
5. The floor under those rates, on one core, in the same run: msgspec decoding a trace's
   events as the report's reader does, and nothing else; one trace read and analysed against
   its decoding, in one process with nothing beside it; and the fixed cost: our report on a
   folder of two tiny traces (start, workers, plot).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from profiling.folder.layout import JobFolder, analysis_record, meta_of  # noqa: E402
from profiling.folder.traces import list_traces  # noqa: E402
from tests import trace_variants  # noqa: E402
from tests.common import REPO, SMALL_WORKLOAD, submitted_job_id  # noqa: E402
from tests.trace_variants import repeated_steps  # noqa: E402

DATA = REPO / "tests" / "data" / "gpu_traces"
DENSE_EVERY = 10  # every 10th compute kernel an all-reduce: 2091 per trace of 58 MB
PACKAGES = ("jobs", "workload", "profiling", "slurm")  # setup.cfg's
OURS = (
    "import sys\nfrom pathlib import Path\nfrom profiling.report.build import build_report\n"
    "build_report(Path(sys.argv[1]))"
)
HTA = (
    "import sys, logging; logging.disable(logging.WARNING)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "analyzer = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)\n"
    "for method in ('get_temporal_breakdown', 'get_comm_comp_overlap'):\n"
    "    try:\n"
    "        getattr(analyzer, method)(visualize=False)\n"
    "    except Exception as error:\n"
    "        print(method, 'failed:', type(error).__name__, error, file=sys.stderr)\n"
)


def tree_rss_mib(root: int) -> float:
    """The resident memory of a process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)  # field 4: ppid
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss in pages
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / 2**20


class Run(NamedTuple):
    seconds: float
    peak_mib: float  # resident memory of the process tree
    cpu_s: float  # user and system CPU of the process tree


def timed(code: str, *args: str) -> Run:
    """One run of ``python -c code args``.

    Memory is sampled from /proc every 50 ms over the program and its workers together (a
    process's own peak RSS would count what it shared with this one before it exec'd).
    """
    cpu_before = _children_cpu_s()
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,  # unread: a pipe read only at the end would block a talkative program
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, tree_rss_mib(process.pid))
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    _, stderr = process.communicate()
    if process.returncode:
        raise RuntimeError(stderr)
    for line in stderr.splitlines():
        if "failed:" in line:
            print("   ", line[:160])
    return Run(seconds, peak, _children_cpu_s() - cpu_before)


def _children_cpu_s() -> float:
    """User and system CPU of every child ended so far, theirs included (they wait for theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load(name: str) -> dict[str, Any]:
    with gzip.open(DATA / name) as handle:
        return json.load(handle)


def as_rank(trace: dict[str, Any], rank: int, world_size: int, clock_us: float) -> bytes:
    return json.dumps(trace_variants.as_rank(trace, rank, world_size, clock_us)).encode()


def gpu_folder(folder: Path, ranks: int, source: dict[str, Any], clock_us: float = 37.0) -> int:
    """``ranks`` copies of ``source``, each claiming its rank, clocks ``clock_us`` apart per
    rank; returns JSON bytes."""
    folder.mkdir(parents=True)
    steps = sorted(
        int(e["name"][13:])
        for e in source["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    total = 0
    for rank in range(ranks):
        data = as_rank(source, rank, ranks, clock_us=rank * clock_us)
        (folder / f"rank{rank}_iter{steps[0]}_{steps[-1]}.json").write_bytes(data)
        total += len(data)
    return total


def print_alignment(report: dict[str, Any], clock_us: float) -> None:
    """What the report's alignment found against the truth (rank r moved by r x ``clock_us``)."""
    pairs = len(report["ranks"]) - 1
    collectives = report["ranks"][0]["clock"]["pairs"]
    errors = [abs(r["clock"]["shift_us"] + r["rank"] * clock_us) for r in report["ranks"]]
    methods = sorted({r["clock"]["method"] for r in report["ranks"][1:]})
    print(
        f"alignment: {report['alignment_seconds'] / pairs:.3f} s per rank pair ({collectives} collectives "
        f"each, one core), {', '.join(methods)}, largest error {max(errors):.2f} µs; "
        f"straggler: {report['straggler']['text'][:90]}"
    )


def cpu_folder(root: Path, ranks: int, active: int) -> Path:
    command = [
        sys.executable, str(REPO / "submit.py"), "--cluster", "local", "--gpus", str(ranks),
        "--profile-ranks", "all", "--steps", str(10 + 5 + active), "--active", str(active),
        *SMALL_WORKLOAD, "--no-report", "--wait", "--traces-root", str(root),
    ]  # fmt: skip
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    return JobFolder(root, submitted_job_id(out.stdout)).path


def cold(folder: Path) -> Run:
    """Our report with no analysis record beside the traces."""
    shutil.rmtree(meta_of(folder), ignore_errors=True)
    return timed(OURS, str(folder))


def versus_hta(label: str, folder: Path, repeats: int) -> dict[str, Any]:
    """Both programs on ``folder``, interleaved, then ours warm; returns our last cold report.json
    (the warm one takes the clocks the cold one kept: its alignment takes no time)."""
    size = sum(p.stat().st_size for p in folder.glob("rank*.json"))
    print(f"\n{label}: {len(list(folder.glob('rank*.json')))} traces, {size / 2**20:.0f} MiB of JSON")
    ours, hta = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine
        ours.append(cold(folder))
        hta.append(timed(HTA, str(folder)))
    report = json.loads((meta_of(folder) / "report.json").read_text())
    warm = timed(OURS, str(folder))
    ours_s, hta_s = statistics.median(r.seconds for r in ours), statistics.median(r.seconds for r in hta)
    ours_mib, hta_mib = max(r.peak_mib for r in ours), max(r.peak_mib for r in hta)
    ours_cpu, hta_cpu = statistics.median(r.cpu_s for r in ours), statistics.median(r.cpu_s for r in hta)
    print(f"{'':34}{'seconds':>10}{'peak MiB':>10}{'CPU s':>10}")
    print(f"{'ours, cold (full report, archive)':34}{ours_s:10.2f}{ours_mib:10.0f}{ours_cpu:10.1f}")
    print(f"{'ours, warm':34}{warm.seconds:10.2f}{warm.peak_mib:10.0f}{warm.cpu_s:10.1f}")
    print(f"{'HTA load + breakdown + overlap':34}{hta_s:10.2f}{hta_mib:10.0f}{hta_cpu:10.1f}")
    print(
        f"HTA / ours cold: {hta_s / ours_s:.1f}x time, ours' peak {ours_mib / hta_mib:.2f} of HTA's; "
        f"ours warm / cold: {warm.seconds / ours_s:.2f}; "
        f"archive {report['archive']['seconds']:.2f} s ({report['archive']['bytes'] / 2**20:.0f} MiB)"
    )
    return report


def decode_seconds(path: Path) -> float:
    """CPU seconds of decoding ``path``'s events as the report's reader does, and nothing else:
    what no reading of the trace can beat."""
    from profiling.analysis.reading.json_stream import TraceStream
    from profiling.analysis.reading.trace_events import ReadEvent

    started = time.thread_time()
    for _ in TraceStream(path, ReadEvent).chunks():
        pass
    return time.thread_time() - started


def floor(path: Path) -> float:
    """MiB per CPU second of :func:`decode_seconds`."""
    return path.stat().st_size / 2**20 / decode_seconds(path)


def one_trace(path: Path, rounds: int = 15) -> tuple[float, float]:
    """``(read and analysed, decoded)``: CPU seconds of one trace, each the best of ``rounds``,
    interleaved, in this process alone: the reader's cost over the floor's, nothing beside it."""
    from profiling.analysis.per_trace.record import analyse_trace

    [trace] = list_traces(path.parent)
    whole, decode = [], []
    for _ in range(rounds):
        started = time.thread_time()
        analyse_trace(trace.source, "the benchmark")
        whole.append(time.thread_time() - started)
        decode.append(decode_seconds(path))
    return min(whole), min(decode)


def reading_rate(folder: Path) -> tuple[float, float]:
    """MiB/s of the map alone: the traces' bytes over the seconds their readers spent on them
    (from the analysis records), so without the start, combine and plot: ``(wall, cpu)``, by
    each reader's wall time (which counts what ran beside it on the same cores) and by its
    CPU time (its cost on one core)."""
    records = [json.loads(analysis_record(trace.path).read_text()) for trace in list_traces(folder)]
    size = sum(r["size"] for r in records) / 2**20
    return size / sum(r["seconds"] for r in records), size / sum(r["cpu_seconds"] for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--scale", type=int, nargs="*", default=[16, 64, 256])
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--dense-only", action="store_true", help="the dense case against HTA, alone")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    # HTA runs from the bytecode pip compiled when it was installed; an editable install of
    # this project has none where PYTHONDONTWRITEBYTECODE is set (as on this project's
    # machines), and each run compiled its modules again (0.15 s): compiled once, as HTA's
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=REPO, check=True)
    cores = len(os.sched_getaffinity(0))
    try:
        print(f"machine: {cores} cpus, python {sys.version.split()[0]}")
        source = repeated_steps(load("trace_diff_test.json.gz"), 2)
        if not args.skip_hta:
            if not args.dense_only:
                gpu_folder(work / "gpu", 8, source)
                versus_hta("GPU job folder (trace_diff_test x 8 ranks)", work / "gpu", args.repeats)
                shutil.rmtree(work / "gpu")
            dense = trace_variants.dense_allreduces(source, every=DENSE_EVERY)
            gpu_folder(work / "dense", 8, dense, clock_us=1700.0)
            report = versus_hta(
                "Dense all-reduces, no sequence numbers (8 ranks)", work / "dense", args.repeats
            )
            print_alignment(report, clock_us=1700.0)
            shutil.rmtree(work / "dense")
            if args.dense_only:
                return
            if not args.skip_cpu:
                versus_hta("CPU job folder (a real 8-rank job)", cpu_folder(work / "cpu", 8, 5), args.repeats)

        big = work / "big"
        big.mkdir()
        repeats = max(1, round(2**30 / len(json.dumps(source))))
        (big / "rank0_iter1_2.json").write_bytes(as_rank(repeated_steps(source, repeats), 0, 1, 0.0))
        size = (big / "rank0_iter1_2.json").stat().st_size
        seconds, peak, _ = timed(OURS, str(big))
        print(f"\none trace of {size / 2**30:.2f} GiB: our report {seconds:.1f} s, peak {peak:.0f} MiB")
        shutil.rmtree(big)

        gpu_folder(work / "floor", 1, nccl := load("nccl_data.json.gz"))
        decode = statistics.median(floor(next((work / "floor").glob("rank*.json"))) for _ in range(3))
        print(f"\nfloor, one core: decoding a copy of nccl_data's events {decode:.0f} MiB/s")
        whole_s, decode_s = one_trace(next((work / "floor").glob("rank*.json")))
        print(
            f"one trace read and analysed / decoded, CPU: {whole_s * 1e3:.1f} / {decode_s * 1e3:.1f} ms "
            f"= {whole_s / decode_s:.2f}, {decode_s / whole_s:.0%} of the floor"
        )
        print(f"scaling (copies of nccl_data, {cores} cores):")
        print(f"{'ranks':>6}{'MiB':>8}{'cold s':>9}{'MiB/s/core':>12}{'of floor':>10}{'reading':>9}"
              f"{'of floor':>10}{'CPU':>7}{'of floor':>10}{'peak MiB':>10}{'warm s':>9}"
              f"{'archive s':>11}")  # fmt: skip
        for ranks in args.scale:
            folder = work / f"scale{ranks}"
            raw = gpu_folder(folder, ranks, nccl)
            first = cold(folder)
            warm = timed(OURS, str(folder))
            report = json.loads((meta_of(folder) / "report.json").read_text())
            rate = raw / 2**20 / first.seconds / cores
            reading, reading_cpu = reading_rate(folder)
            print(
                f"{ranks:6}{raw / 2**20:8.0f}{first.seconds:9.2f}{rate:12.1f}{rate / decode:10.0%}"
                f"{reading:9.1f}{reading / decode:10.0%}{reading_cpu:7.0f}{reading_cpu / decode:10.0%}"
                f"{first.peak_mib:10.0f}{warm.seconds:9.2f}{report['archive']['seconds']:11.2f}"
            )
            shutil.rmtree(folder)

        gpu_folder(work / "tiny", 2, load("amd_mi250_minitoy.json.gz"))
        seconds, _, cpu = cold(work / "tiny")
        print(f"fixed cost: our report on two traces of 220 events: {seconds:.2f} s, {cpu:.1f} s of CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
