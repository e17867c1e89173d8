"""The job's summary from every trace's record: ``report.json``'s measures, as the model's Structs.

Clocks first: every trace is aligned against the first rank's trace of the same window
(:mod:`profiling.analysis.clocks.rank_clocks`); then, per rank, the means of what the records
measured per step (:mod:`profiling.analysis.per_trace.breakdown` defines each figure), each
collective's arrivals on the common clock, bisected onto its step, and from them the waiting,
the straggler verdict (:mod:`.straggler`) and the critical path (:mod:`.critical_path.path`).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from profiling.analysis.across_ranks import gpu_sections
from profiling.analysis.across_ranks.critical_path.ahead import graphs_ahead
from profiling.analysis.across_ranks.critical_path.kept import kept_path
from profiling.analysis.across_ranks.critical_path.path import critical_path
from profiling.analysis.across_ranks.critical_path.stages import stage_balance
from profiling.analysis.across_ranks.critical_path.verdict import follows_replay, stages_follow_replay
from profiling.analysis.across_ranks.critical_path.walk import Key
from profiling.analysis.across_ranks.mesh_from_groups import Dims, job_layout
from profiling.analysis.across_ranks.straggler import find_straggler
from profiling.analysis.across_ranks.waiting import WaitSplit, split_waiting
from profiling.analysis.clocks.alignment import Alignment
from profiling.analysis.clocks.rank_clocks import Aligned
from profiling.analysis.per_trace.efficiency import rank_flops, rank_memory
from profiling.analysis.reading.collectives import is_sequenced
from profiling.schema import model, model_path, model_ranks
from slurm.common.clock import utc_now
from slurm.common.mesh import named, stages_of


def summarise(
    folder: Path,
    per_rank: dict[int, list[Aligned]],
    reading: model.Reading,
    link_gbps: float | None = None,
    warnings: Sequence[str] = (),
    peak_tflops: float | None = None,
    layout: Dims | None = None,
    meanwhile: Callable[[model.Report], object] | None = None,
    ideal_sink: Callable[[dict[str, Any]], object] | None = None,
    kept_path_at: Path | None = None,
    jobs: int = 1,
) -> model.Report:
    """The report (see :mod:`profiling.schema.model`) from every trace, by rank then window;
    ``warnings``: the reading's, put first; ``layout``: ``--layout``, where given;
    ``meanwhile``: called with the report before its critical path, the slowest part, is found
    (report.png's rows of ranks are drawn meanwhile); ``ideal_sink``: given the ideal trace;
    ``kept_path_at``: where the critical path is kept for the next report on the same inputs
    (:mod:`.critical_path.kept`; the ideal trace is then the kept path's, not given again);
    ``jobs``: the processes the critical path's graphs may be made in."""
    spans = {rank: _spans(traces) for rank, traces in per_rank.items()}
    anchor_steps = _anchor_steps(per_rank)
    members = _members(per_rank)
    # a cold report's graphs are begun now, in forked children, on the cores the summary leaves idle
    cold = kept_path_at is None or not kept_path_at.exists()
    with graphs_ahead(per_rank, spans, anchor_steps, members, jobs if cold else 1) as ahead:
        report, mesh, said, layout_said = _summary(
            folder, per_rank, reading, spans, anchor_steps, members, warnings, link_gbps, peak_tflops, layout
        )
        if meanwhile is not None:
            meanwhile(report)
        remade: list[str] = []  # lanes files made again from their traces, as the path reached them
        noise_ms = report.straggler.step_noise_ms if report.straggler else None
        late = report.straggler.rank if report.straggler else None
        walk = partial(
            critical_path,
            per_rank,
            spans,
            anchor_steps,
            noise_ms,
            late,
            remade,
            members,
            mesh,
            ideal_sink,
            jobs,
            ahead,
        )
        path = kept_path(kept_path_at, per_rank, (late, noise_ms), mesh, walk)
    return _with_path(report, path, mesh, [*said, *remade, *layout_said])


def _summary(
    folder: Path,
    per_rank: dict[int, list[Aligned]],
    reading: model.Reading,
    spans: dict[int, dict[Key, tuple[float, float]] | None],
    anchor_steps: dict[Key, int],
    members: dict[Key, frozenset[int]],
    warnings: Sequence[str],
    link_gbps: float | None,
    peak_tflops: float | None,
    layout: Dims | None,
) -> tuple[model.Report, dict[int, dict[str, int]], list[str], list[str]]:
    """The report without its critical path, the job's mesh, and the warnings said: the
    traces' and the layout's."""
    waits = split_waiting(spans, members)
    ranks = [
        _rank_summary(rank, traces, waits.get(rank), peak_tflops) for rank, traces in sorted(per_rank.items())
    ]
    means = [r.step_time_ms.mean for r in ranks]
    groups = {rank: [g for t in traces for g in t.record.groups] for rank, traces in per_rank.items()}
    world = next(
        (t.record.world_size for traces in per_rank.values() for t in traces if t.record.world_size), None
    )
    found_layout, mesh, layout_said = job_layout(groups, sorted(per_rank), world, layout)
    ranks = [msgspec.structs.replace(r, mesh=mesh.get(r.rank) or None) for r in ranks]
    straggler = find_straggler(
        arrivals={
            rank: {key: arrival for key, (arrival, _) in found.items()} if found is not None else None
            for rank, found in spans.items()
        },
        anchor_steps=anchor_steps,
        members=members,
        step_ms={r.rank: r.step_ms for r in ranks},
        compute_ms={r.rank: r.compute_ms for r in ranks},
        clock_uncertainty_us={r.rank: r.clock.uncertainty_us or 0.0 for r in ranks},
        names={rank: named(rank, where) for rank, where in mesh.items() if where},
        stage_of=stages_of(mesh),
    )
    said = [*warnings, *(f"rank {r.rank}: {w}" for r in ranks for w in r.warnings)]
    report = model.Report(
        folder=str(folder),
        generated_at=utc_now(),
        ranks=ranks,
        straggler=straggler,
        step_time_spread_ms=model.Spread(
            min=min(means),
            median=statistics.median(means),
            max=max(means),
            max_minus_min=max(means) - min(means),
        ),
        critical_path=None,
        communication_wait_ms={r.rank: r.breakdown_ms["communication"] for r in ranks},
        kernels_across=gpu_sections.kernels_across(ranks),
        collectives_across=gpu_sections.collectives_across(ranks, link_gbps),
        link_gbps=link_gbps,
        peak_tflops=peak_tflops,
        layout=found_layout,
        stages=stage_balance(ranks, mesh),
        warnings=[*said, *layout_said],
        reading=reading,
    )
    return report, mesh, said, layout_said


def _with_path(
    report: model.Report,
    path: model_path.CriticalPath | None,
    mesh: dict[int, dict[str, int]],
    warnings: list[str],
) -> model.Report:
    """The report with its critical path, its verdicts made to follow the replay."""
    replay, straggler = path.replay if path is not None else None, report.straggler
    return msgspec.structs.replace(
        report,
        critical_path=path,
        straggler=follows_replay(straggler, replay, lambda rank: named(rank, mesh.get(rank)), mesh=mesh),
        stages=stages_follow_replay(report.stages, replay, straggler.step_noise_ms if straggler else None),
        warnings=warnings,
    )


def _spans(traces: list[Aligned]) -> dict[Key, tuple[float, float]] | None:
    """When this rank reached and left each collective, on the first rank's clock.

    Keyed by (window's first step, what identifies the collective across ranks): its key where
    the trace numbers it (a group and sequence number: NCCL's, or the toolkit's labels), else
    the index of the first rank's collective it was paired with. None if no window's clock was
    paired.
    """
    if not any(t.clock.paired for t in traces):
        return None
    found: dict[Key, tuple[float, float]] = {}
    for t in traces:
        if not t.clock.paired:
            continue
        shift, mine = t.clock.shift_us, t.record.instances
        for instance in mine:
            if is_sequenced(instance):
                found[(t.trace.first_step, instance.key)] = (instance.arrival + shift, instance.end + shift)
        for theirs, index in t.clock.matched.items():
            if not is_sequenced(mine[index]):
                found[(t.trace.first_step, theirs)] = (mine[index].arrival + shift, mine[index].end + shift)
    return found


def _members(per_rank: dict[int, list[Aligned]]) -> dict[Key, frozenset[int]]:
    """The ranks of each numbered collective whose group is not the whole job (empty for a job
    of one group, whose views are then as they always were); sends and receives left out: the
    straggler and the waiting are about the groups' collectives."""
    found: dict[Key, frozenset[int]] = {}
    for traces in per_rank.values():
        for t in traces:
            world = t.record.world_size
            for instance in t.record.instances:
                group = instance.group
                if group and instance.peer is None and (world is None or len(group) < world):
                    found[(t.trace.first_step, instance.key)] = frozenset(group)
    return found


def _wait(split: WaitSplit | None, steps: int) -> model_ranks.CollectiveWait | None:
    """A rank's time in the collectives every compared rank reached, per step (ms)."""
    if split is None:
        return None
    return model_ranks.CollectiveWait(
        collectives=split.collectives,
        wait_ms=split.wait_us / 1e3 / max(steps, 1),
        transfer_ms=split.transfer_us / 1e3 / max(steps, 1),
        waiting_share=split.waiting_share,
        last_arrivals=split.last_arrivals,
    )


def _anchor_steps(per_rank: dict[int, list[Aligned]]) -> dict[Key, int]:
    """The step of each collective: the one that issued it, else the one it began in (a kernel
    whose launch the trace does not hold); numbered collectives from every rank's traces, the
    others from the first rank's (whose indices key them)."""
    found: dict[Key, int] = {}
    first = min(per_rank)
    for rank, traces in per_rank.items():
        for t in traces:
            starts = [s.start_us for s in t.record.steps]
            for index, instance in enumerate(t.record.instances):
                sequenced = is_sequenced(instance)
                if rank != first and not sequenced:
                    continue
                at = bisect.bisect_right(starts, instance.arrival) - 1
                step = (
                    instance.step
                    if instance.step is not None
                    else t.record.steps[at].step
                    if at >= 0
                    else None
                )
                if step is not None:
                    found.setdefault((t.trace.first_step, instance.key if sequenced else index), step)
    return found


def _rank_summary(
    rank: int, traces: list[Aligned], wait: WaitSplit | None, peak_tflops: float | None
) -> model_ranks.RankReport:
    records = [t.record for t in traces]
    steps = [step for record in records for step in record.steps]
    parts = records[0].parts
    step_ms = [s.duration_us / 1e3 for s in steps]
    gpu_steps = [s.gpu for s in steps if s.gpu is not None]
    gpu = None
    if gpu_steps:
        gpu = model_ranks.GpuTime(
            span_ms=mean([g.duration_us / 1e3 for g in gpu_steps]),
            busy_ms=mean([g.busy_us / 1e3 for g in gpu_steps]),
            idle_ms=mean([s.parts_us["idle"] / 1e3 for s in steps]),
            communication_overlapped_ms=mean([g.communication_overlapped_us / 1e3 for g in gpu_steps]),
            compute_by_phase_ms={
                phase: mean([g.compute_by_phase_us[phase] / 1e3 for g in gpu_steps])
                for phase in gpu_steps[0].compute_by_phase_us
            },
            idle_causes_ms=gpu_sections.idle_causes_per_step([r.idle for r in records], len(steps)) or {},
            unlaunched=sum(r.unlaunched for r in records),
        )
    flops, flops_said = rank_flops(records, steps, peak_tflops)
    return model_ranks.RankReport(
        rank=rank,
        host=records[0].host,
        device=records[0].device,
        trace_files=[t.trace.name for t in traces],
        steps=[s.step for s in steps],
        step_ms=step_ms,
        step_time_ms=model_ranks.StepTime(
            mean=mean(step_ms), min=min(step_ms, default=0.0), max=max(step_ms, default=0.0)
        ),
        breakdown_ms={part: mean([s.parts_us[part] / 1e3 for s in steps]) for part in parts},
        breakdown_steps_ms={part: [s.parts_us[part] / 1e3 for s in steps] for part in parts},
        accounted_ms=mean([s.accounted_us / 1e3 for s in steps]),
        compute_ms=mean([s.compute_us / 1e3 for s in steps]),
        communication_total_ms=mean([s.collectives_us / 1e3 for s in steps]),
        gpu=gpu,
        kernels=gpu_sections.rank_kernels([r.kernels for r in records], steps=len(steps)),
        collectives=gpu_sections.rank_collectives([r.collectives for r in records]),
        clock=_clock(traces[0].clock),
        trace_clocks=[
            model_ranks.TraceClock(trace=t.trace.name, **msgspec.structs.asdict(_clock(t.clock)))
            for t in traces
        ],
        analysed_by={t.trace.name: t.record.analysed_by for t in traces},
        warnings=list(dict.fromkeys([*(w for record in records for w in record.warnings), *flops_said])),
        collective_wait=_wait(wait, len(steps)),
        memory=rank_memory(records, steps),
        flops=flops,
    )


def _clock(clock: Alignment) -> model_ranks.Clock:
    """The alignment as report.json keeps it: the model's fields, read from the dataclass."""
    return msgspec.convert(clock, model_ranks.Clock, from_attributes=True)


def mean(values: Sequence[float]) -> float:
    """The mean, 0 for no values (a rank without steps)."""
    return statistics.fmean(values) if values else 0.0
