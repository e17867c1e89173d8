"""The cross-rank report: exact numbers on small synthetic traces, then on a real job folder."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
from pathlib import Path

import pytest

from jobs.commands.report import main
from profiling.analysis.per_trace.breakdown import analyse
from profiling.analysis.reading.trace_events import from_document
from profiling.folder.layout import JobFolder, analysis_record, meta_of
from profiling.report.build import ReportError, build_report
from profiling.report.settings import ReportSettings
from profiling.schema import model
from tests import trace_variants as tv
from tests.common import import_hta
from tests.synthetic import BASE_NS, cpu_job, write_job, write_trace, x


def cpu_trace(rank: int = 0) -> dict:
    """One step: zero_grad 0-5, forward 5-40, backward 40-70, all-reduce 50-85, optimizer 85-95."""
    return {
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"},
        "host_name": f"host{rank}",
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": 2, "args": {"name": "gloo"}},
            x("ProfilerStep#5", 0, 100, cat="user_annotation"),
            x("Optimizer.zero_grad#SGD.zero_grad", 0, 5, cat="user_annotation"),
            x("aten::zero_", 1, 3),
            x("DistributedDataParallel.forward", 5, 30, cat="user_annotation"),
            x("aten::conv2d", 6, 24),
            x("aten::mse_loss", 35, 5),
            x("autograd::engine::evaluate_function: ConvolutionBackward0", 40, 30),
            x("gloo:all_reduce", 50, 35, tid=2),
            x("Optimizer.step#SGD.step", 85, 10, cat="user_annotation"),
            {"ph": "s", "id": 7, "pid": 100, "tid": 1, "ts": 40, "cat": "fwdbwd", "name": "fwdbwd"},
        ],
    }


def test_cpu_step_breakdown() -> None:
    (step,) = analyse(from_document(cpu_trace())).steps
    assert step.step == 5 and step.duration_us == 100 and step.gpu is None
    assert step.parts_us == {"forward": 35, "backward": 30, "optimizer": 15, "communication": 15, "other": 5}
    assert step.accounted_us == 100


def test_gpu_step_breakdown_from_kernels() -> None:
    def launch(corr: int, ts: float, tid: int = 1) -> dict:
        return x("cudaLaunchKernel", ts, 1, tid=tid, cat="cuda_runtime", correlation=corr)

    def kernel(name: str, corr: int, ts: float, dur: float, cat: str = "kernel") -> dict:
        return x(name, ts, dur, tid=7, pid=0, cat=cat, correlation=corr)

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
            launch(6, 56),
            kernel("Memcpy DtoD (Device -> Device)", 6, 91, 1, cat="gpu_memcpy"),
            x("Optimizer.step#SGD.step", 85, 10, cat="user_annotation"),
            launch(4, 90),
            kernel("sgd_kernel", 4, 92, 4),
            kernel("launched_before_the_trace", 99, 30, 5),  # its launch is not in the trace
            x("ProfilerStep#4", 100, 60, cat="user_annotation"),
            launch(5, 150),
            kernel("next_step_kernel", 5, 150, 10),
        ],
    }
    first, second = analyse(from_document(trace)).steps
    # GPU span of step 3: its first kernel (20) to step 4's first (150)
    assert (first.gpu.start_us, first.gpu.duration_us) == (20, 130)
    # compute 20-40, 60-80, 92-96; NCCL 70-90 of which 80-90 exposed; memcpy 91-92; idle the rest
    assert first.parts_us == {"compute": 44, "communication": 10, "memory": 1, "other": 0, "idle": 75}
    assert first.gpu.busy_us == 55 and first.gpu.communication_overlapped_us == 10
    assert first.gpu.compute_by_phase_us == {"forward": 20, "backward": 20, "optimizer": 4}
    assert first.collectives_us == 20 and first.gpu.activities == 5
    assert (second.gpu.duration_us, second.parts_us["compute"], second.parts_us["idle"]) == (10, 10, 0)
    assert sum(first.parts_us.values()) == first.accounted_us == 130


def test_straggler_named_with_its_evidence_and_clocks_aligned(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {1: 30.0}), 8)
    report = build_report(tmp_path, ReportSettings(merged_json=True))
    verdict = report.straggler
    assert (verdict.verdict, verdict.rank) == ("straggler", 1)
    assert verdict.last_arrivals == {0: 0, 1: 8} and verdict.steps_held_back == {0: 0, 1: 8}
    assert verdict.p_value == pytest.approx(2 * 0.5**8)
    assert "rank 1 arrived last at 8 of 8 collectives, 30.00 ms" not in verdict.text  # µs, not ms
    assert verdict.text.startswith("straggler: rank 1 arrived last at 8 of 8 collectives, 0.03 ms after")
    # rank 1's ts count from a base 1 ms later, and its clock is 7 µs ahead: every all-reduce
    # ends together once 1000 - 7 µs are added
    clock = report.ranks[1].clock
    assert clock.method == "matched collectives" and clock.pairs == 8
    assert clock.shift_us == pytest.approx(1000 - 7.0)
    assert clock.residual_us == pytest.approx(0.0)

    meta = meta_of(tmp_path)
    assert model.checked((meta / "report.json").read_bytes()) == report
    markdown = (meta / "report.md").read_text()
    assert "**Straggler: rank 1 arrived last at 8 of 8 collectives" in markdown
    assert "| 1 | matched collectives | 993.0 | 8 | 0.0 |" in markdown
    assert (meta / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with gzip.open(meta / "merged_trace.json.gz") as handle:
        merged = json.load(handle)
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "rank 0 (host0)", 1: "rank 1 (host1)"}
    ends = {}
    for e in merged["traceEvents"]:
        if e.get("name") == "gloo:all_reduce":
            ends.setdefault(e["pid"], []).append(e["ts"] + e["dur"])
    assert ends[1] == pytest.approx(ends[0])  # aligned on the all-reduces' ends
    flows = [e for e in merged["traceEvents"] if e.get("ph") == "s"]
    assert merged["baseTimeNanoseconds"] == BASE_NS and not flows


def test_a_warm_report_keeps_the_picture_of_the_same_data_and_draws_a_changed_one(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {1: 30.0}), 8)
    first = build_report(tmp_path, ReportSettings(merged_trace=False))
    picture = meta_of(tmp_path) / "report.png"
    drawn = picture.stat().st_mtime_ns
    again = build_report(tmp_path, ReportSettings(merged_trace=False))  # every record fresh, the same figures
    assert again.drawn == first.drawn and set(first.drawn) == {"report.png"}
    assert picture.stat().st_mtime_ns == drawn
    write_job(tmp_path, cpu_job(8, lambda step: {0: 30.0}), 8)  # another straggler
    changed = build_report(tmp_path, ReportSettings(merged_trace=False))
    assert changed.drawn != first.drawn and picture.stat().st_mtime_ns != drawn
    picture.unlink()
    build_report(tmp_path, ReportSettings(merged_trace=False))  # the same data, but no picture: drawn again
    assert picture.exists()


def test_the_warm_report_after_a_cold_one_keeps_its_gpu_picture(tmp_path: Path) -> None:
    """A cold report's numbers come from its readers, a warm one's from the records on disk:
    the same numbers, held otherwise (numpy scalars, tuples), draw the same picture."""
    base = tv.load("nccl_data.json.gz")
    traces = [tv.as_rank(base, rank, 2, shift_us=rank * 37.0) for rank in range(2)]
    folder = tv.write(tmp_path / "gpu", traces)
    cold = build_report(folder, ReportSettings(merged_trace=False, jobs=2))  # read by worker processes
    picture = meta_of(folder) / "report.png"
    drawn = picture.stat().st_mtime_ns
    warm = build_report(folder, ReportSettings(merged_trace=False, jobs=2))
    assert warm.reading.from_records == 2 and warm.drawn == cold.drawn
    assert picture.stat().st_mtime_ns == drawn


def test_no_significant_straggler_when_the_late_rank_changes(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(8, lambda step: {step % 2: 30.0}), 8)  # rank 0, then 1, then 0...
    verdict = build_report(tmp_path, ReportSettings(merged_trace=False, plot=False)).straggler
    assert verdict.verdict == "none" and verdict.rank is None
    assert verdict.steps_held_back == {0: 4, 1: 4}
    assert verdict.text.startswith("no significant straggler: the most often late, rank ")


def test_too_few_steps_to_tell(tmp_path: Path) -> None:
    write_job(tmp_path, cpu_job(3, lambda step: {1: 30.0}), 3)
    verdict = build_report(tmp_path, ReportSettings(merged_trace=False, plot=False)).straggler
    assert (verdict.verdict, verdict.rank, verdict.candidate) == ("undetermined", None, 1)
    assert verdict.text.startswith(
        "straggler undetermined: 3 step(s) recorded, 8 needed with 2 ranks (--active)"
    )


def test_report_refuses_an_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"holds no trace \(\*\.json"):
        build_report(tmp_path)
    assert main([str(tmp_path)]) == 2


def test_report_refuses_a_renamed_trace(tmp_path: Path) -> None:
    write_trace(tmp_path, cpu_trace(0), "rank4_iter5_5.json")
    with pytest.raises(ReportError, match="distributedInfo.rank=0; its name says 4"):
        build_report(tmp_path)


def test_report_of_a_real_job(real_job: Path, tmp_path: Path) -> None:
    report = model.checked((meta_of(real_job) / "report.json").read_bytes())
    assert [r.rank for r in report.ranks] == [0, 1]
    # two processes of one machine: one clock, not estimated
    assert report.ranks[1].clock.method == "one host" and report.ranks[1].clock.uncertainty_us == 0
    for rank in report.ranks:
        assert rank.steps == [15, 16, 17]
        breakdown = rank.breakdown_ms
        assert sum(breakdown.values()) == pytest.approx(rank.step_time_ms.mean, rel=1e-6)
        assert breakdown["forward"] > 0 and breakdown["backward"] > 0 and breakdown["optimizer"] > 0
        assert rank.communication_total_ms > 0  # gloo all-reduces were seen
    # rank 0 wrote the Perfetto archive; the merged JSON on request
    assert report.archive.traces[0] == "rank0_iter15_17.json.gz" and report.merged_trace is None
    build_report(real_job, ReportSettings(out=tmp_path / "json", plot=False, merged_json=True))
    with gzip.open(tmp_path / "json" / "merged_trace.json.gz") as handle:
        merged = json.load(handle)
    steps = [e for e in merged["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted({e["pid"] for e in steps}) == [0, 1] and len(steps) == 6
    # with clocks aligned, the same step starts within a few ms on both ranks
    start = {(e["pid"], e["name"]): e["ts"] for e in steps}
    assert abs(start[(0, "ProfilerStep#16")] - start[(1, "ProfilerStep#16")]) < 20_000


def test_a_jobs_flops_per_step_are_torchs_count_of_one_training_step(real_job: Path) -> None:
    torch, torchvision = pytest.importorskip("torch"), pytest.importorskip("torchvision")
    flop_counter = pytest.importorskip("torch.utils.flop_counter")
    model_ = torchvision.models.resnet18()  # the job's: batch 10 at 32², fp32 (SMALL_JOB)
    inputs, target = torch.randn(10, 3, 32, 32), torch.randn(10, 1000)
    with flop_counter.FlopCounterMode(display=False) as counter:
        torch.nn.functional.mse_loss(model_(inputs), target).backward()
    report = model.checked((meta_of(real_job) / "report.json").read_bytes())
    for rank in report.ranks:
        assert rank.flops is not None and rank.flops.dtype == "fp32"
        assert rank.flops.per_step == pytest.approx(counter.get_total_flops(), rel=0.05)
        assert rank.flops.mfu is None and "no GPU in the trace" in (rank.flops.mfu_missing or "")
        memory = rank.memory  # profile_memory is on: the CPU allocator's instants, every step
        assert memory is not None and memory.device == "cpu" and memory.peak_step in rank.steps
        assert memory.peak_allocated_bytes > 1 << 20 and all(memory.steps_peak_bytes)
    assert "## Memory and efficiency" in (meta_of(real_job) / "report.md").read_text()


def test_hta_loads_the_job_folder_as_is(real_job: Path) -> None:
    hta = import_hta()
    # the job's logs and meta/ are folders beside the traces: HTA does not descend into them
    assert JobFolder.at(real_job).logs.is_dir() and JobFolder.at(real_job).meta.is_dir()
    # By default HTA drops the last step of a trace as possibly incomplete; ours are complete.
    analyzer = hta.TraceAnalysis(trace_dir=str(real_job), include_last_profiler_step=True)
    assert sorted(analyzer.t.traces) == [0, 1]
    report = model.checked((meta_of(real_job) / "report.json").read_bytes())
    names = {index: name for name, index in analyzer.t.symbol_table.sym_index.items()}
    for rank in report.ranks:
        frame = analyzer.t.get_trace(rank.rank)
        steps = frame[frame.name.map(lambda index: names[index].startswith("ProfilerStep#"))]
        hta_ms = {
            int(names[row.name_id].split("#")[1]): row.dur / 1e3
            for row in steps.rename(columns={"name": "name_id"}).itertuples()
        }
        assert sorted(hta_ms) == rank.steps == [15, 16, 17]
        for step, ours in zip(rank.steps, rank.step_ms, strict=True):
            assert ours == pytest.approx(hta_ms[step], rel=0.01)


def test_report_command_line(real_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([str(real_job), "--out", str(out), "--no-merged-trace", "--no-plot", "--no-html"]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == [
        "clocks.json", "critical_path.msgpack", "ideal_trace.json.gz",
        "report.json", "report.md", "summary.json",
    ]  # fmt: skip


def test_worker_processes_give_the_same_report(tmp_path: Path) -> None:
    write_job(tmp_path / "traces", cpu_job(8, lambda step: {3: 25.0 + step}, ranks=4), 8)
    serial = build_report(
        tmp_path / "traces", ReportSettings(out=tmp_path / "serial", plot=False, jobs=1, merged_json=True)
    )
    shutil.rmtree(analysis_record(tmp_path / "traces" / "x").parent)  # read every trace again
    parallel = build_report(
        tmp_path / "traces", ReportSettings(out=tmp_path / "parallel", plot=False, jobs=2, merged_json=True)
    )
    assert serial.reading.read_here == parallel.reading.read_here != []
    for rank in serial.ranks + parallel.ranks:
        assert {who.split(" (pid")[0] for who in rank.analysed_by.values()} == {
            f"a report worker on {socket.gethostname()}"
        }
        rank.analysed_by = {}  # which worker read which trace: the one difference allowed
    for key in ("ranks", "straggler", "step_time_spread_ms", "communication_wait_ms"):
        assert getattr(serial, key) == getattr(parallel, key)
    assert parallel.straggler.rank == 3
    with (
        gzip.open(tmp_path / "serial" / "merged_trace.json.gz") as a,
        gzip.open(tmp_path / "parallel" / "merged_trace.json.gz") as b,
    ):
        assert json.load(a) == json.load(b)


def test_merged_trace_one_lane_per_rank_and_distinct_flow_ids(tmp_path: Path) -> None:
    for rank in (0, 1):
        trace = cpu_trace(rank)
        trace["traceEvents"].append(x("kernel", 20, 5, tid=7, pid=0, cat="kernel"))  # a GPU lane
        write_trace(tmp_path, trace, f"rank{rank}_iter5_5.json")
    build_report(tmp_path, ReportSettings(plot=False, merged_json=True))
    with gzip.open(meta_of(tmp_path) / "merged_trace.json.gz") as handle:
        events = json.load(handle)["traceEvents"]
    assert {e["args"]["name"] for e in events if e.get("name") == "process_name"} == {
        "rank 0 (host0)",
        "rank 1 (host1)",
    }
    for rank in (0, 1):
        mine = [e for e in events if e["pid"] == rank]
        step = next(e for e in mine if e["name"] == "ProfilerStep#5")
        assert step["tid"] == 1  # the profiled process keeps its thread ids
        kernel = next(e for e in mine if e["name"] == "kernel")
        assert kernel["tid"] >= 1 << 32  # another process's lane, apart from the CPU threads
    flow_ids = [e["id"] for e in events if e.get("ph") == "s"]
    assert len(flow_ids) == 2 and len(set(flow_ids)) == 2
