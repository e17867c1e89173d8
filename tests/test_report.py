"""The cross-rank report: exact numbers on small synthetic traces, then on a real job folder."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from profiling.analysis import analyse
from profiling.job_folder import meta_of
from profiling.report import ReportError, build_report, main
from tests.common import SMALL_JOB, run_submit, submitted_job_id

BASE_NS = 1_790_000_000_000_000_000


def x(
    name: str, ts: float, dur: float, tid: Any = 1, cat: str = "cpu_op", pid: Any = 100, **args: Any
) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def cpu_trace(rank: int = 0, offset: float = 0.0, base_ns: int = BASE_NS, slow: float = 0.0) -> dict:
    """One step: zero_grad 0-5, forward 5-40, backward 40-70, all-reduce 50-85, optimizer 85-95."""
    o = offset
    return {
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"},
        "host_name": f"host{rank}",
        "baseTimeNanoseconds": base_ns,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": 2, "args": {"name": "gloo"}},
            x("ProfilerStep#5", o + 0, 100 + slow, cat="user_annotation"),
            x("Optimizer.zero_grad#SGD.zero_grad", o + 0, 5, cat="user_annotation"),
            x("aten::zero_", o + 1, 3),
            x("DistributedDataParallel.forward", o + 5, 30, cat="user_annotation"),
            x("aten::conv2d", o + 6, 24),
            x("aten::mse_loss", o + 35, 5),
            x("autograd::engine::evaluate_function: ConvolutionBackward0", o + 40, 30 + slow),
            x("gloo:all_reduce", o + 50, 35 + slow, tid=2),
            x("Optimizer.step#SGD.step", o + 85 + slow, 10, cat="user_annotation"),
            {"ph": "s", "id": 7, "pid": 100, "tid": 1, "ts": o + 40, "cat": "fwdbwd", "name": "fwdbwd"},
        ],
    }


def test_cpu_step_breakdown() -> None:
    (step,) = analyse(cpu_trace()).steps
    assert step.step == 5 and step.duration_us == 100 and step.gpu_busy_us is None
    assert step.phases_us == {"forward": 35, "backward": 30, "optimizer": 15, "communication": 15, "other": 5}


def test_gpu_step_breakdown_from_kernels() -> None:
    def launch(corr: int, ts: float, tid: int = 1) -> dict:
        return x("cudaLaunchKernel", ts, 1, tid=tid, cat="cuda_runtime", correlation=corr)

    def kernel(name: str, corr: int, ts: float, dur: float) -> dict:
        return x(name, ts, dur, tid=7, pid=0, cat="kernel", correlation=corr)

    trace = {
        "distributedInfo": {"rank": 0, "world_size": 1},
        "traceEvents": [
            x("ProfilerStep#3", 0, 100, cat="user_annotation"),
            launch(1, 10),
            kernel("sgemm", 1, 20, 20),
            x("autograd::engine::evaluate_function: ConvolutionBackward0", 45, 15, tid=3),
            launch(2, 50, tid=3),
            kernel("conv_bwd", 2, 60, 20),
            launch(3, 55),
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 3, 70, 20),
            x("Optimizer.step#SGD.step", 85, 10, cat="user_annotation"),
            launch(4, 90),
            kernel("sgd_kernel", 4, 92, 4),
            launch(5, 150),
            kernel("next_step_kernel", 5, 150, 10),  # launched by the next step
        ],
    }
    (step,) = analyse(trace).steps
    assert step.gpu_busy_us == 54
    assert step.phases_us == {"forward": 20, "backward": 20, "communication": 10, "optimizer": 4, "other": 46}


def write_trace(folder: Path, trace: dict, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(folder / name, "wt") as handle:
        json.dump(trace, handle)


def test_report_finds_straggler_and_merges_with_aligned_clocks(tmp_path: Path) -> None:
    # rank 1 computes 20 us longer; its clock's base is 1 ms later and its host clock 7 us ahead
    write_trace(tmp_path, cpu_trace(0), "rank0_iter5_5.json")
    write_trace(
        tmp_path,
        cpu_trace(1, offset=-1000 + 7, base_ns=BASE_NS + 1_000_000, slow=20),
        "rank1_iter5_5.json.gz",
    )
    report = build_report(tmp_path)

    r0, r1 = report["ranks"]
    assert (r0["compute_ms"], r1["compute_ms"]) == (pytest.approx(0.080), pytest.approx(0.100))
    assert report["straggler"]["rank"] == 1
    assert report["straggler"]["over_median_pct"] == pytest.approx(100 * (0.100 - 0.090) / 0.090)
    assert report["step_time_spread_ms"]["max_minus_min"] == pytest.approx(0.020)
    assert report["communication_wait_ms"] == {"0": pytest.approx(0.015), "1": pytest.approx(0.015)}
    assert r1["trace_files"] == ["rank1_iter5_5.json.gz"]

    meta = meta_of(tmp_path)
    assert json.loads((meta / "report.json").read_text()) == json.loads(json.dumps(report))
    assert "Straggler: rank 1" in (meta / "report.md").read_text()
    assert (meta / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with gzip.open(meta / "merged_trace.json.gz") as handle:
        merged = json.load(handle)
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0 (host0)", 1: "rank 1 (host1)"}
    ends = {e["pid"]: e["ts"] + e["dur"] for e in merged["traceEvents"] if e.get("name") == "gloo:all_reduce"}
    assert ends[0] == pytest.approx(85) and ends[1] == pytest.approx(85)  # aligned on the all-reduce's end
    steps = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e.get("name") == "ProfilerStep#5"}
    assert steps[1] == pytest.approx(-20)  # rank 1 entered the all-reduce's step 20 us "earlier"
    flows = [e["id"] for e in merged["traceEvents"] if e.get("ph") == "s"]
    assert len(set(flows)) == 2
    assert merged["baseTimeNanoseconds"] == BASE_NS


def test_report_refuses_an_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="holds no rank<r>_iter<a>_<b>.json"):
        build_report(tmp_path)
    assert main([str(tmp_path)]) == 2


def test_report_refuses_a_renamed_trace(tmp_path: Path) -> None:
    write_trace(tmp_path, cpu_trace(0), "rank4_iter5_5.json")
    with pytest.raises(ReportError, match="distributedInfo.rank=0; its name says 4"):
        build_report(tmp_path)


@pytest.fixture(scope="module")
def real_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-rank local job, every rank profiled, gzipped traces, with its report."""
    root = tmp_path_factory.mktemp("traces")
    result = run_submit(
        "--cluster",
        "local",
        "--gpus",
        "2",
        "--profile-ranks",
        "all",
        "--gzip-traces",
        "--traces-root",
        str(root),
        "--wait",
        *SMALL_JOB,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "report in " in result.stdout
    return root / submitted_job_id(result.stdout)


def test_report_of_a_real_job(real_job: Path) -> None:
    report = json.loads((meta_of(real_job) / "report.json").read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank in report["ranks"]:
        assert rank["steps"] == [15, 16, 17]
        breakdown = rank["breakdown_ms"]
        assert sum(breakdown.values()) == pytest.approx(rank["step_time_ms"]["mean"], rel=1e-6)
        assert breakdown["forward"] > 0 and breakdown["backward"] > 0 and breakdown["optimizer"] > 0
        assert rank["communication_total_ms"] > 0  # gloo all-reduces were seen
    with gzip.open(meta_of(real_job) / "merged_trace.json.gz") as handle:
        merged = json.load(handle)
    steps = [e for e in merged["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted({e["pid"] for e in steps}) == [0, 1] and len(steps) == 6
    # with clocks aligned, the same step starts within a few ms on both ranks
    start = {(e["pid"], e["name"]): e["ts"] for e in steps}
    assert abs(start[(0, "ProfilerStep#16")] - start[(1, "ProfilerStep#16")]) < 20_000


def test_hta_loads_the_job_folder_as_is(real_job: Path) -> None:
    hta = pytest.importorskip(
        "hta.trace_analysis", reason="HTA is an optional test dependency (pip install '.[hta]')"
    )
    # By default HTA drops the last step of a trace as possibly incomplete; ours are complete.
    analyzer = hta.TraceAnalysis(trace_dir=str(real_job), include_last_profiler_step=True)
    assert sorted(analyzer.t.traces) == [0, 1]
    report = json.loads((meta_of(real_job) / "report.json").read_text())
    names = {index: name for name, index in analyzer.t.symbol_table.sym_index.items()}
    for rank in report["ranks"]:
        frame = analyzer.t.get_trace(rank["rank"])
        steps = frame[frame["name"].map(lambda index: names[index].startswith("ProfilerStep#"))]
        hta_ms = {
            int(names[row.name_id].split("#")[1]): row.dur / 1e3
            for row in steps.rename(columns={"name": "name_id"}).itertuples()
        }
        assert sorted(hta_ms) == rank["steps"] == [15, 16, 17]
        for step, ours in zip(rank["steps"], rank["step_ms"], strict=True):
            assert ours == pytest.approx(hta_ms[step], rel=0.01)


def test_report_command_line(real_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([str(real_job), "--out", str(out), "--no-merged-trace", "--no-plot"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]


def test_worker_processes_give_the_same_report(tmp_path: Path) -> None:
    for rank in range(4):
        write_trace(
            tmp_path / "traces", cpu_trace(rank, offset=rank * 3, slow=rank * 5), f"rank{rank}_iter5_5.json"
        )
    serial = build_report(tmp_path / "traces", tmp_path / "serial", plot=False, jobs=1)
    parallel = build_report(tmp_path / "traces", tmp_path / "parallel", plot=False, jobs=2)
    for key in ("ranks", "straggler", "step_time_spread_ms", "communication_wait_ms"):
        assert serial[key] == parallel[key]
    assert parallel["straggler"]["rank"] == 3
    with (
        gzip.open(tmp_path / "serial" / "merged_trace.json.gz") as a,
        gzip.open(tmp_path / "parallel" / "merged_trace.json.gz") as b,
    ):
        assert json.load(a) == json.load(b)
