"""Reports made up to the model's types, for the pictures' and renderers' tests: every field a
picture does not draw has a plain value."""

from __future__ import annotations

import statistics

from profiling.analysis.per_trace.kernels import FAMILIES
from profiling.schema import model
from profiling.schema.model_ranks import Clock, Kernels, RankReport, StepTime

PARTS = ("compute", "communication", "memory", "other", "idle")


def rank_report(
    rank: int, steps: list[int], step_ms: list[float], breakdown_ms: dict[str, float]
) -> RankReport:
    clock = Clock(
        method="reference", shift_us=0.0, pairs=0, residual_us=None, max_residual_us=None,
        paired_share=None, uncertainty_us=0.0, note="",
    )  # fmt: skip
    return RankReport(
        rank=rank, host=f"node{rank // 8 + 1}", device="cpu", trace_files=[], steps=steps, step_ms=step_ms,
        step_time_ms=StepTime(mean=statistics.fmean(step_ms), min=min(step_ms), max=max(step_ms)),
        breakdown_ms=breakdown_ms, breakdown_steps_ms={}, accounted_ms=sum(breakdown_ms.values()),
        compute_ms=breakdown_ms.get("compute", 0.0), communication_total_ms=0.0, gpu=None, kernels=None,
        collectives=[], clock=clock, trace_clocks=[], analysed_by={}, warnings=[], collective_wait=None,
    )  # fmt: skip


def straggler(rank: int, text: str) -> model.Straggler:
    return model.Straggler(
        verdict="straggler", rank=rank, text=text, ranks_compared=[], ranks_without_paired_clock=[],
        collectives=60, steps=12, step_noise_ms=3.51, threshold_ms=1.0, clock_uncertainty_us=0.0,
        min_lateness_us=0.0, compute_ms={},
    )  # fmt: skip


def synthetic_report(ranks: int, steps: int = 12, slow: int = 7) -> model.Report:
    """``ranks`` ranks at 100 ms a step; rank ``slow`` 40 ms slower from the 7th step, idle 15 ms more."""
    text = (
        f"straggler: rank {slow} arrived last at 40 of 60 collectives, 41.5 ms after the next rank on "
        "average, and held the others back in 11 of 12 steps (p = 8.8e-06; 150.00 ms per step against a "
        "step-to-step noise of 3.51 ms); its compute per step is 51.00 ms, +2.0% against the median rank"
    )
    reading = model.Reading(traces=ranks, from_records=0, read_here=[], analysed_by=[], seconds=0.0)
    return model.Report(
        folder="synthetic",
        generated_at="2026-12-03T00:00:00Z",
        ranks=[
            rank_report(
                r,
                list(range(100, 100 + steps)),
                [100.0 + (40.0 if r == slow and s > 5 else 0.0) for s in range(steps)],
                {p: 20.0 + (15.0 if r == slow and p == "idle" else 0.0) for p in PARTS},
            )
            for r in range(ranks)
        ],
        straggler=straggler(slow, text),
        reading=reading,
    )


def with_gpu_figures(report: model.Report, slow: int = 7) -> model.Report:
    """Each rank's kernels by family (rank ``slow`` 1.5x in gemm/conv), and 12 collectives."""
    for r in report.ranks:
        per_step = {
            f: 1000.0 * (i + 1) * (1.5 if r.rank == slow and f == "gemm/conv" else 1.0)
            for i, f in enumerate(FAMILIES)
        }
        by_family = {f: v * len(r.steps) for f, v in per_step.items()}
        total = sum(by_family.values())
        r.kernels = Kernels(total_us=total, per_step_us=total / len(r.steps), by_family_us=by_family, top=[])
    report.collectives_across = [
        model.CollectiveAcross(
            kind="allreduce",
            bytes=2**20 * (k + 1),
            group_size=len(report.ranks),
            ranks=len(report.ranks),
            count=10,
            p50_us=100.0,
            p90_us=100.0,
            max_us=100.0,
            busbw_gbps=50.0 + k,
            slowest_rank=0,
            slowest_busbw_gbps=40.0,
            below_link=False,
        )  # fmt: skip
        for k in range(12)
    ]
    report.link_gbps = 100.0
    return report
