"""The reduce of the report: every trace's record -> one summary of the job (``report.json``).

Clocks first: every trace is aligned against the first rank's trace of the same window
(:mod:`profiling.analysis.alignment`); then, per rank, the means of what the records measured
per step (:mod:`profiling.analysis.breakdown` defines every figure; nothing is measured here),
and the straggler verdict over the aligned arrivals (:mod:`profiling.analysis.straggler`).
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from profiling.analysis import alignment
from profiling.analysis.alignment import Alignment
from profiling.analysis.record import TraceRecord
from profiling.analysis.straggler import find_straggler
from profiling.analysis.waiting import WaitSplit, split_waiting
from profiling.folder.traces import TraceFile
from profiling.report import gpu_sections
from slurm.basics import utc_now


@dataclasses.dataclass(frozen=True)
class Aligned:
    """One trace's record, and how its clock was put on the first rank's."""

    trace: TraceFile
    record: TraceRecord
    clock: Alignment


def align_ranks(
    traces: Sequence[TraceFile], records: Sequence[TraceRecord], nodes: Mapping[int, str] | None = None
) -> dict[int, list[Aligned]]:
    """Every trace's clock against the first rank's trace of the same window; by rank, then window.

    ``nodes``: each rank's node, where known (the manifest of the toolkit's jobs; else the host a
    trace names). The ranks of one node share its clock: those of the first rank's node are on
    it exactly (their base times give the shift), and each other node is measured once, by its
    first rank, its other ranks taking the same correction.
    """
    first_rank = traces[0].rank
    node_of = {
        t.rank: (nodes or {}).get(t.rank) or r.host or None for t, r in zip(traces, records, strict=True)
    }
    reference = {t.first_step: r for t, r in zip(traces, records, strict=True) if t.rank == first_rank}
    steps = [s.duration_us for r in reference.values() for s in r.steps]
    step_us = statistics.median(steps) if steps else None
    per_rank: dict[int, list[Aligned]] = {}
    measured: dict[tuple[str, int], Alignment] = {}  # a node's first rank's, by (node, window)
    for trace, record in zip(traces, records, strict=True):
        theirs = reference.get(trace.first_step)
        node = node_of[trace.rank]
        if trace.rank == first_rank:
            clock = alignment.reference_alignment(len(record.instances))
        elif theirs is None:
            why = "the first rank did not record this window"
            clock = alignment.base_time(_prior_us(record, records[0]), why)
        elif node is not None and node == node_of[first_rank]:
            clock = alignment.on_one_clock(
                theirs.instances, record.instances, shift_us=_prior_us(record, theirs), step_us=step_us
            )
        elif node is not None and (node, trace.first_step) in measured:
            clock = _as_its_node(measured[(node, trace.first_step)], theirs, record, step_us)
        else:
            clock = alignment.align(
                theirs.instances, record.instances, prior_us=_prior_us(record, theirs), step_us=step_us
            )
            if node is not None and clock.paired:
                measured[(node, trace.first_step)] = dataclasses.replace(
                    clock, shift_us=clock.shift_us - _prior_us(record, theirs)
                )  # the node's correction beyond the base times
        per_rank.setdefault(trace.rank, []).append(Aligned(trace, record, clock))
    return per_rank


def _as_its_node(
    node_clock: Alignment, theirs: TraceRecord, record: TraceRecord, step_us: float | None
) -> Alignment:
    """A rank on a node already measured: the node's correction on its own base time."""
    return alignment.on_one_clock(
        theirs.instances,
        record.instances,
        shift_us=_prior_us(record, theirs) + node_clock.shift_us,
        step_us=step_us,
        uncertainty_us=node_clock.uncertainty_us or 0.0,
        note="its node's clock, measured by the node's first rank",
    )


def _prior_us(record: TraceRecord, reference: TraceRecord) -> float:
    """The shift the two traces' base times give (0 where either has none)."""
    mine, theirs = record.base_time_ns, reference.base_time_ns
    return (mine - theirs) / 1e3 if mine is not None and theirs is not None else 0.0


def summarise(
    folder: Path, per_rank: dict[int, list[Aligned]], link_gbps: float | None = None
) -> dict[str, Any]:
    """``report.json``'s content (see :mod:`profiling.report`) from every trace, by rank then window."""
    ranks = [_rank_summary(rank, traces) for rank, traces in sorted(per_rank.items())]
    means = [r["step_time_ms"]["mean"] for r in ranks]
    spans = {rank: _spans(traces) for rank, traces in per_rank.items()}
    waits = split_waiting(spans)
    for r in ranks:
        r["collective_wait"] = _wait(waits.get(r["rank"]), len(r["steps"]))
    straggler = find_straggler(
        arrivals={
            rank: {key: arrival for key, (arrival, _) in found.items()} if found is not None else None
            for rank, found in spans.items()
        },
        anchor_steps=_anchor_steps(per_rank[min(per_rank)]),
        step_ms={r["rank"]: r["step_ms"] for r in ranks},
        compute_ms={r["rank"]: r["compute_ms"] for r in ranks},
        clock_uncertainty_us={r["rank"]: r["clock"]["uncertainty_us"] or 0.0 for r in ranks},
    )
    return {
        "folder": str(folder),
        "generated_at": utc_now(),
        "ranks": ranks,
        "straggler": straggler,
        "step_time_spread_ms": {
            "min": min(means),
            "median": statistics.median(means),
            "max": max(means),
            "max_minus_min": max(means) - min(means),
        },
        "communication_wait_ms": {str(r["rank"]): r["breakdown_ms"]["communication"] for r in ranks},
        "kernels_across": gpu_sections.kernels_across(ranks),
        "collectives_across": gpu_sections.collectives_across(ranks, link_gbps),
        "link_gbps": link_gbps,
        "warnings": [f"rank {r['rank']}: {w}" for r in ranks for w in r["warnings"]],
    }


def _spans(traces: list[Aligned]) -> dict[tuple[int, int], tuple[float, float]] | None:
    """When this rank reached and left each of the first rank's collectives, on the first
    rank's clock.

    Keyed by (window's first step, the first rank's collective index); None if no window's
    clock was paired.
    """
    if not any(t.clock.paired for t in traces):
        return None
    return {
        (t.trace.first_step, theirs): (
            t.record.instances[mine].arrival + t.clock.shift_us,
            t.record.instances[mine].end + t.clock.shift_us,
        )
        for t in traces
        if t.clock.paired
        for theirs, mine in t.clock.matched.items()
    }


def _wait(split: WaitSplit | None, steps: int) -> dict[str, Any] | None:
    """A rank's time in the collectives every compared rank reached, per step (ms)."""
    if split is None:
        return None
    return {
        "collectives": split.collectives,
        "wait_ms": split.wait_us / 1e3 / max(steps, 1),
        "transfer_ms": split.transfer_us / 1e3 / max(steps, 1),
        "waiting_share": split.waiting_share,
        "last_arrivals": split.last_arrivals,
    }


def _anchor_steps(reference: list[Aligned]) -> dict[tuple[int, int], int]:
    """The step (on the first rank) of each of the first rank's collectives: the one that issued
    it, else the one it began in (a kernel whose launch the trace does not hold)."""
    found = {}
    for t in reference:
        starts = [s.start_us for s in t.record.steps]
        for index, instance in enumerate(t.record.instances):
            at = bisect.bisect_right(starts, instance.arrival) - 1
            step = (
                instance.step if instance.step is not None else t.record.steps[at].step if at >= 0 else None
            )
            if step is not None:
                found[(t.trace.first_step, index)] = step
    return found


def _rank_summary(rank: int, traces: list[Aligned]) -> dict[str, Any]:
    records = [t.record for t in traces]
    steps = [step for record in records for step in record.steps]
    parts = records[0].parts
    step_ms = [s.duration_us / 1e3 for s in steps]
    gpu_steps = [s.gpu for s in steps if s.gpu is not None]
    gpu = None
    if gpu_steps:
        gpu = {
            "span_ms": mean([g.duration_us / 1e3 for g in gpu_steps]),
            "busy_ms": mean([g.busy_us / 1e3 for g in gpu_steps]),
            "idle_ms": mean([s.parts_us["idle"] / 1e3 for s in steps]),
            "communication_overlapped_ms": mean([g.communication_overlapped_us / 1e3 for g in gpu_steps]),
            "compute_by_phase_ms": {
                phase: mean([g.compute_by_phase_us[phase] / 1e3 for g in gpu_steps])
                for phase in gpu_steps[0].compute_by_phase_us
            },
            "idle_causes_ms": gpu_sections.idle_causes_per_step([r.idle for r in records], len(steps)),
            "unlaunched": sum(r.unlaunched for r in records),
        }
    return {
        "rank": rank,
        "host": records[0].host,
        "device": records[0].device,
        "trace_files": [t.trace.name for t in traces],
        "steps": [s.step for s in steps],
        "step_ms": step_ms,
        "step_time_ms": {
            "mean": mean(step_ms),
            "min": min(step_ms, default=0.0),
            "max": max(step_ms, default=0.0),
        },
        "breakdown_ms": {part: mean([s.parts_us[part] / 1e3 for s in steps]) for part in parts},
        "breakdown_steps_ms": {part: [s.parts_us[part] / 1e3 for s in steps] for part in parts},
        "accounted_ms": mean([s.accounted_us / 1e3 for s in steps]),
        "compute_ms": mean([s.compute_us / 1e3 for s in steps]),
        "communication_total_ms": mean([s.collectives_us / 1e3 for s in steps]),
        "gpu": gpu,
        "kernels": gpu_sections.rank_kernels([r.kernels for r in records], steps=len(steps)),
        "collectives": gpu_sections.rank_collectives([r.collectives for r in records]),
        "clock": _clock(traces[0].clock),
        "trace_clocks": [{"trace": t.trace.name, **_clock(t.clock)} for t in traces],
        "analysed_by": {t.trace.name: t.record.analysed_by for t in traces},
        "warnings": list(dict.fromkeys(w for record in records for w in record.warnings)),
    }


def _clock(clock: Alignment) -> dict[str, Any]:
    return {
        "method": clock.method,
        "shift_us": clock.shift_us,
        "pairs": clock.pairs,
        "residual_us": clock.residual_us,
        "max_residual_us": clock.max_residual_us,
        "paired_share": clock.paired_share,
        "uncertainty_us": clock.uncertainty_us,
        "note": clock.note,
    }


def mean(values: Sequence[float]) -> float:
    """The mean, 0 for no values (a rank without steps)."""
    return statistics.fmean(values) if values else 0.0
