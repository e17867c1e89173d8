"""The FLOPs the report counts from a trace's shapes, against torch's own count
(``torch.utils.flop_counter.FlopCounterMode``) of the same ops, run under both."""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils import flop_counter

from profiling.analysis.per_trace.efficiency import rank_flops
from profiling.analysis.per_trace.peaks import peak_of
from profiling.analysis.reading.op_flops import op_flops
from profiling.analysis.reading.trace_events import read as read_trace
from profiling.folder.layout import meta_of
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings


def counted_both_ways(work: Callable[[], None], tmp_path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """``work``'s FLOPs by op: (ours, from its profiler trace; FlopCounterMode's)."""
    with flop_counter.FlopCounterMode(display=False) as counter:
        work()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
    ) as profile:
        work()
    path = tmp_path / "rank0_iter1_1.json"
    profile.export_chrome_trace(str(path))
    ours: collections.Counter[str] = collections.Counter()
    for op in read_trace(path).counted_ops:
        ours[op.name] += op.flops
    theirs = {
        str(op).replace(".", "::", 1): count for op, count in counter.get_flop_counts()["Global"].items()
    }
    return dict(ours), {name: count for name, count in theirs.items() if count}


def test_matmuls_forward_and_backward_count_as_torch_counts_them(tmp_path: Path) -> None:
    a = torch.randn(24, 40, requires_grad=True)
    b = torch.randn(40, 56, requires_grad=True)
    batched = torch.randn(3, 24, 40, requires_grad=True)
    layer = torch.nn.Linear(56, 12)

    def work() -> None:
        out = layer(a @ b) + torch.addmm(torch.zeros(24, 56), a, b).sum()
        out = out.sum() + torch.bmm(batched, b.expand(3, 40, 56)).sum() + torch.matmul(batched, b).sum()
        out = out + torch.baddbmm(torch.zeros(3, 24, 56), batched, b.expand(3, 40, 56)).sum()
        out.backward()

    ours, theirs = counted_both_ways(work, tmp_path)
    assert ours == theirs
    assert set(ours) >= {"aten::mm", "aten::addmm", "aten::bmm"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.Conv2d(8, 16, 7, stride=2, padding=3),
        lambda: torch.nn.Conv2d(8, 16, 3, stride=1, padding=2, dilation=2, groups=4),
        lambda: torch.nn.Conv1d(8, 4, 5, stride=3),
        lambda: torch.nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1),
    ],
    ids=["strided", "dilated-grouped", "1d", "transposed"],
)
@pytest.mark.parametrize("input_grad", [True, False], ids=["input-grad", "no-input-grad"])
def test_convolutions_forward_and_each_backward_count_as_torch_counts_them(
    make: Callable[[], torch.nn.Module], input_grad: bool, tmp_path: Path
) -> None:
    conv = make()
    dims = 1 if isinstance(conv, torch.nn.Conv1d) else 2
    x = torch.randn(2, 8, *([19] * dims), requires_grad=input_grad)

    def work() -> None:
        conv(x).square().sum().backward()

    ours, theirs = counted_both_ways(work, tmp_path)
    assert ours == theirs
    assert ours["aten::convolution_backward"] > 0


@pytest.mark.parametrize("heads_q, heads_kv, s_q, s_k", [(4, 4, 16, 16), (8, 2, 32, 64)])
def test_attention_counts_as_torchs_formulas(heads_q: int, heads_kv: int, s_q: int, s_k: int) -> None:
    q, k, v = [3, heads_q, s_q, 32], [3, heads_kv, s_k, 32], [3, heads_kv, s_k, 48]
    grad_out = [3, heads_q, s_q, 48]
    name = "aten::_scaled_dot_product_flash_attention"
    assert op_flops(name, [q, k, v], None) == flop_counter.sdpa_flop_count(q, k, v)
    backward = op_flops(name + "_backward", [grad_out, q, k, v], None)
    assert backward == flop_counter.sdpa_backward_flop_count(grad_out, q, k, v)


def test_shapes_of_another_form_are_not_counted() -> None:
    with pytest.raises((TypeError, IndexError)):
        op_flops("aten::mm", [[3]], None)
    assert op_flops("aten::relu", [[3, 4]], None) is None


def test_the_peak_is_found_by_the_device_name_and_mfu_says_why_it_is_missing() -> None:
    assert peak_of("NVIDIA H100 80GB HBM3").tflops["bf16"] == pytest.approx(989.4)  # type: ignore[union-attr]
    assert peak_of("Tesla V100-SXM2-16GB").device == "V100"  # type: ignore[union-attr]
    assert peak_of("AMD Instinct MI300X").device == "MI300X"  # type: ignore[union-attr]
    assert peak_of("AMD Radeon Graphics") is None and peak_of(None) is None
    assert rank_flops([], []) == (None, [])


GPU_TRACES = Path(__file__).parent / "data" / "gpu_traces"


def test_a_real_gpu_trace_with_shapes_gets_its_flops_tflops_and_mfu(tmp_path: Path) -> None:
    (tmp_path / "v100").mkdir()
    (tmp_path / "v100" / "trace.json.gz").write_bytes((GPU_TRACES / "trace_diff_test.json.gz").read_bytes())
    report = build_report(tmp_path / "v100", ReportSettings(plot=False, merged_trace=False))
    flops = report.ranks[0].flops
    assert flops is not None
    assert (flops.device_name, flops.dtype, flops.peak_tflops) == ("Tesla V100-SXM2-16GB", "fp32", 15.7)
    assert flops.mfu == pytest.approx(flops.tflops_per_s / 15.7) and flops.mfu_missing is None
    assert [op.name for op in flops.ops] == ["aten::mm", "aten::addmm"]
    assert sum(op.gflops_per_step for op in flops.ops) == pytest.approx(flops.per_step / 1e9)
    # stable: read again, the same count; a peak given replaces the table's
    given = build_report(
        tmp_path / "v100",
        ReportSettings(out=tmp_path / "out", plot=False, merged_trace=False, peak_tflops=100.0),
    )
    again = given.ranks[0].flops
    assert again is not None and again.steps == flops.steps
    assert (again.peak_source, again.mfu) == ("--peak-tflops", pytest.approx(flops.tflops_per_s / 100))


def test_a_trace_without_shapes_says_no_flops_were_counted(tmp_path: Path) -> None:
    (tmp_path / "trace.json.gz").write_bytes((GPU_TRACES / "nccl_data.json.gz").read_bytes())
    report = build_report(tmp_path, ReportSettings(plot=False, merged_trace=False))
    assert report.ranks[0].flops is None
    markdown = (meta_of(tmp_path) / "report.md").read_text()
    assert (
        "No FLOPs counted: the traces hold no matmul, convolution or attention op with its shapes" in markdown
    )
