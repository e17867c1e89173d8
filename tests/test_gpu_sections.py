"""Kernels and collective bandwidth: exact on traces built with known sizes and durations, the
bytes the real traces record, and kernel totals as HTA's ``get_gpu_kernel_breakdown`` gives them."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

import msgspec
import pytest

from profiling.analysis.per_trace.bandwidth import DTYPE_BYTES, bus_factor, summarise_collectives
from profiling.analysis.per_trace.kernels import kernel_family
from profiling.analysis.per_trace.record import analyse_trace
from profiling.analysis.reading.collectives import Collective
from profiling.folder.traces import TraceSource
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema.model import KernelDifference
from profiling.schema.model_ranks import KernelRow, Kernels, RankReport
from tests import trace_variants as variants
from tests.common import import_hta
from tests.synthetic_report import rank_report

DATA = Path(__file__).parent / "data" / "gpu_traces"


def kernel(
    kind: str, nelems_in: int, nelems_out: int, dtype: str, ranks: int, start: float, dur: float
) -> Collective:
    args = {"Collective name": kind, "In msg nelems": nelems_in, "Out msg nelems": nelems_out, "dtype": dtype,
            "Group size": ranks}  # fmt: skip
    return Collective(f"ncclDevKernel_{kind}", start, start + dur, 7, True, tuple(args.items()))


@pytest.mark.parametrize(
    ("kind", "nelems_in", "nelems_out", "dtype", "ranks", "factor"),
    [
        ("allreduce", 2**28, 2**28, "Float", 8, 2 * 7 / 8),
        ("allgather", 2**25, 2**28, "BFloat16", 8, 7 / 8),  # S: the gathered output
        ("reduce_scatter", 2**28, 2**25, "Half", 8, 7 / 8),  # S: the input
        ("all_to_all", 2**20, 2**20, "Float", 4, 3 / 4),
        ("broadcast", 2**20, 2**20, "Long", 16, 1.0),
    ],
)
def test_bus_bandwidth_as_nccl_tests_defines_it(
    kind: str, nelems_in: int, nelems_out: int, dtype: str, ranks: int, factor: float
) -> None:
    durations = [1000.0, 2000.0, 4000.0]  # µs: p50 2000
    [row] = summarise_collectives(
        [kernel(kind, nelems_in, nelems_out, dtype, ranks, 10_000.0 * i, d) for i, d in enumerate(durations)]
    )
    size = max(nelems_in, nelems_out) * DTYPE_BYTES[dtype]
    assert (row.kind, row.bytes, row.group_size, row.count) == (kind, size, ranks, 3)
    assert (row.p50_us, row.max_us) == (2000.0, 4000.0)
    assert row.algbw_gbps == pytest.approx(size / 2000e-6 / 1e9, rel=1e-12)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * factor, rel=1e-12)
    assert bus_factor(kind, ranks) == pytest.approx(factor)


def test_without_sizes_only_durations() -> None:
    bare = Collective("ncclKernel_AllReduce_RING_LL_Sum_float(...)", 0.0, 50.0, 7, True, ())
    [row] = summarise_collectives([bare])
    assert (row.kind, row.bytes, row.busbw_gbps, row.p50_us) == ("AllReduce", None, None, 50.0)


def test_the_bytes_are_what_the_real_trace_records(tmp_path: Path) -> None:
    shutil.copy(DATA / "nccl_data.json.gz", tmp_path)
    record = analyse_trace(TraceSource(tmp_path, "nccl_data.json.gz"), "test")
    with gzip.open(DATA / "nccl_data.json.gz") as handle:
        events = json.load(handle)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    recorded = {
        (e["args"]["Collective name"], e["args"]["In msg nelems"] * DTYPE_BYTES[e["args"]["dtype"]])
        for e in kernels
    }
    assert {(row.kind, row.bytes) for row in record.collectives} == recorded
    assert sum(row.count for row in record.collectives) == len(kernels)
    assert all(row.group_size == 2 for row in record.collectives)


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy/memset"),
        ("ampere_sgemm_32x128_nt", "gemm/conv"),
        ("sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "gemm/conv"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
            "elementwise",
        ),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", "reduction"),
        ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>", "elementwise"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>", "gemm/conv"),
        ("some_custom_kernel", "other"),
    ],
)
def test_kernel_families(name: str, family: str) -> None:
    assert kernel_family(name) == family


@pytest.fixture(scope="module")
def hta_kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    trace_analysis = import_hta()
    folder = tmp_path_factory.mktemp("hta")
    shutil.copy(DATA / "trace_filter_sampled_rank-0.json.gz", folder)
    logging.disable(logging.WARNING)
    try:
        analyzer = trace_analysis.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
        _, kernels = analyzer.get_gpu_kernel_breakdown(
            visualize=False, num_kernels=10_000, duration_ratio=1.0, include_memory_kernels=True
        )
    finally:
        logging.disable(logging.NOTSET)
    return dict(zip(kernels["name"], kernels["sum (us)"], strict=True))


def test_kernel_totals_match_htas_breakdown(hta_kernels: dict[str, float], tmp_path: Path) -> None:
    """On an integer-µs trace (HTA 0.5 truncates fractions of a µs: a trace with them loses up to
    a µs per kernel there, not here)."""
    shutil.copy(DATA / "trace_filter_sampled_rank-0.json.gz", tmp_path)
    record = analyse_trace(TraceSource(tmp_path, "trace_filter_sampled_rank-0.json.gz"), "test")
    ours = {row.name: row.total_us for row in record.kernels.top}
    compared = [name for name in ours if name in hta_kernels]
    assert len(compared) >= min(len(ours), 10)
    for name in compared:
        assert ours[name] == pytest.approx(hta_kernels[name], rel=1e-3), name


def test_report_sections_in_the_order_a_gpu_user_reads_them(tmp_path: Path) -> None:
    real = variants.load("nccl_data.json.gz")
    variants.write(tmp_path, [variants.as_rank(real, rank, 2, shift_us=100.0 * rank) for rank in range(2)])
    report = build_report(tmp_path, ReportSettings(plot=False, merged_trace=False, link_gbps=400.0))
    rank = report.ranks[0]
    assert rank.kernels.top[0].family == "communication" and rank.collectives[0].kind == "allreduce"
    assert report.collectives_across[0].ranks == 2
    assert all(row.below_link for row in report.collectives_across if row.busbw_gbps)  # far below 200
    markdown = (tmp_path / "meta" / "report.md").read_text()
    order = [
        "## Step time",
        "## Where a step's time goes",
        "## Kernels",
        "## Collectives",
        "## Clock alignment",
    ]
    positions = [markdown.index(heading) for heading in order]
    assert positions == sorted(positions), positions
    assert "⚠: bus bandwidth below 50% of the link's 400 GB/s (--link-gbps)." in markdown
    assert report.kernels_across is None  # two copies of one trace: no rank is slower


def test_the_kernels_that_differ_between_the_fastest_and_the_slowest_rank() -> None:
    from profiling.analysis.across_ranks.gpu_sections import kernels_across

    def rank(number: int, step_ms: float, gemm_us: float) -> RankReport:
        top = [kernel("gemm", "gemm/conv", gemm_us), kernel("add", "elementwise", 10.0)]
        made = rank_report(number, [1], [step_ms], {"compute": step_ms})
        return msgspec.structs.replace(
            made, kernels=Kernels(total_us=0, per_step_us=0, by_family_us={}, top=top)
        )

    def kernel(name: str, family: str, per_step_us: float) -> KernelRow:
        return KernelRow(
            name=name, family=family, count=1, total_us=per_step_us, per_step_us=per_step_us,
            mean_us=per_step_us, p50_us=per_step_us, p99_us=per_step_us,
        )  # fmt: skip

    across = kernels_across([rank(0, 10.0, 100.0), rank(1, 12.0, 300.0), rank(2, 11.0, 200.0)])
    assert (across.fastest_rank, across.slowest_rank) == (0, 1)
    assert across.kernels == [
        KernelDifference(
            name="gemm", family="gemm/conv", fastest_us=100.0, slowest_us=300.0, difference_us=200.0
        )
    ]  # the kernels that do not differ are left out


def test_time_in_a_collective_splits_into_waiting_for_the_last_rank_and_transferring() -> None:
    from profiling.analysis.across_ranks.waiting import split_waiting

    # collective "a": ranks arrive at 0, 40, 100 and all leave at 130; "b": all arrive at 200
    # and leave at 250; rank 2 is not in "c", so "c" is not compared; rank 3 has no clock
    spans = {
        0: {"a": (0.0, 130.0), "b": (200.0, 250.0), "c": (300.0, 310.0)},
        1: {"a": (40.0, 130.0), "b": (200.0, 250.0), "c": (300.0, 310.0)},
        2: {"a": (100.0, 130.0), "b": (200.0, 251.0)},
        3: None,
    }
    split = split_waiting(spans)
    assert set(split) == {0, 1, 2}
    assert (split[0].wait_us, split[0].transfer_us, split[0].collectives) == (100.0, 80.0, 2)
    assert (split[1].wait_us, split[1].transfer_us) == (60.0, 80.0)
    assert (split[2].wait_us, split[2].transfer_us, split[2].last_arrivals) == (0.0, 81.0, 1)
    assert split[0].last_arrivals == split[1].last_arrivals == 0  # all arrived together in b
    assert split[0].waiting_share == pytest.approx(100 / 180)
    assert split_waiting({0: spans[0], 3: None}) == {}  # one rank compared: nothing to wait for
