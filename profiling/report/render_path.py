"""report.md's "What limits the step": what stragglers cost the job (S), the part that holds the
most of it, and the replayed gains that add up, the largest first, each with the next thing to do
(:mod:`profiling.analysis.across_ranks.critical_path.what_if`)."""

from __future__ import annotations

from profiling.schema.model import Report
from profiling.schema.model_path import CriticalPath
from profiling.schema.model_replay import Replay, ReplayGain, UndecidedStep
from slurm.common.mesh import DATA, PIPELINE, TENSOR

SHOWN = 5
_OTHERS = {"rank": "the other ranks'", PIPELINE: "the other stages'", DATA: "the other replicas'"}
_NAMED = {"rank": "rank", PIPELINE: "stage", DATA: "replica", TENSOR: "tensor-parallel index"}


def what_limits(report: Report) -> list[str]:
    path = report.critical_path
    if path is None:
        return []
    lines = ["## What limits the step", ""]
    replay = path.replay
    if replay is None:
        said = _undecided(path.undecided) or ["Not replayed: no step recorded by every rank."]
        return [*lines, *said, ""]
    noise = path.noise_ms or 0.0
    lines += [_slowdown(replay, noise), "", *_captured(report, replay)]
    shown = [g for g in replay.gains if g.gain_ms > noise and _names_rightly(g, replay, noise)][:SHOWN]
    lines += [f"{number}. {_gain(gain, report)}" for number, gain in enumerate(shown, 1)]
    together = sum(g.gain_ms for g in shown)
    lines += [
        *([""] if shown else []),
        (
            f"Each gain is replayed on top of those above it, so they add up: {together:.2f} ms a step "
            f"together ({together / replay.measured_ms:.0%}). "
            if len(shown) > 1
            else ""
        )
        + f"A gain under the step-to-step noise ({noise:.2f} ms) gets no line, nor a rank or stage "
        "that holds no more than its peers beyond it. "
        f"Every step is replayed on its cross-rank graph with the durations changed, as the OSDI 2025 "
        f"what-if analysis does (report.json's `critical_path.replay`; docs/report.md says which edges "
        f"the graph has). Replayed as measured, the {len(replay.steps)} step(s) come out within "
        f"{replay.fidelity.median:.1%} of their measured length (median; worst {replay.fidelity.worst:.1%}), "
        f"each wait from the graph, never from the recorded idle.",
        *_uncertain(replay),
        *_bubble(path, noise),
        *_undecided(replay.undecided),
        "",
    ]
    return lines


def _captured(report: Report, replay: Replay) -> list[str]:
    """Where the replayed steps are those ``--auto-capture`` recorded: that it did, and why."""
    if report.run is None:
        return []
    steps = {s.step for s in replay.steps}
    lines = [
        f"Steps {c.first}-{c.last}, replayed here, were captured automatically (`--auto-capture`) while "
        f"the job ran: {c.why}."
        for c in report.run.captures
        if c.automatic and steps & set(range(c.first, c.last + 1))
    ]
    return [*lines, ""] if lines else []


def _names_rightly(gain: ReplayGain, replay: Replay, noise_ms: float) -> bool:
    """Whether a line that names a rank or a stage may: as the verdict does, only where it holds
    more than its peers beyond the noise (a balanced job's slower rank of two gains about half
    the step's noise by being like the other)."""
    if gain.rank is not None:
        return replay.beyond_peers_ms("rank", gain.rank) > noise_ms
    if gain.what == "stage like the median stage" and gain.coordinate is not None:
        return replay.beyond_peers_ms(PIPELINE, int(gain.coordinate.split()[-1])) > noise_ms
    return True


def _slowdown(replay: Replay, noise_ms: float) -> str:
    """The first line: S, the host's share apart, and the part that holds the most of it. One
    rank has no peers to straggle behind: its line has the host's share alone."""
    s = replay.slowdown
    measured, ideal = replay.measured_ms, replay.ideal_ms
    said = []
    if len(replay.strips.ranks) < 2:
        pass  # nobody to straggle behind
    elif (s - 1) * ideal > noise_ms or replay.most_beyond_peers_ms() > noise_ms:
        said.append(
            f"Stragglers cost this job **S = {s:.2f}**: the step is {s - 1:.0%} longer than its ideal "
            f"({s * ideal:.2f} ms a step, every rank's work as measured, against {ideal:.2f})."
        )
    else:
        said.append(
            f"Stragglers cost this job nothing beyond the step-to-step noise: S = {s:.2f} "
            f"(the ideal step {ideal:.2f} ms, the noise {noise_ms:.2f})."
        )
    base = s * ideal
    if base - base / replay.host_share > noise_ms:
        said.append(
            f"The host's gaps make the step {replay.host_share - 1:.0%} longer than it replays "
            f"without them ({base:.2f} ms: {replay.host_share:.2f}×)."
        )
    return " ".join([*said, *_most(replay, noise_ms)]) or f"The step replays at {measured:.2f} ms."


def _most(replay: Replay, noise_ms: float) -> list[str]:
    most = replay.most
    if most is None or replay.most_beyond_peers_ms() <= noise_ms:
        return []
    part = f"{_NAMED.get(most.dimension, most.dimension)} {most.index}"
    said = f"Most of it is **{part}** (S {most.slowdown:.2f} alone)"
    if not most.kinds:
        return [said + "."]
    kinds = " and ".join(_KIND_WORDS.get(kind, kind) for kind in most.kinds)
    longer = f"{most.longer_fraction:.0%} " if most.longer_fraction is not None else ""
    others = _OTHERS.get(most.dimension, "the others'")
    return [said + f": its {kinds} run {longer}longer than {others} ({most.longer_ms:.2f} ms a step)."]


_KIND_WORDS = {"host": "host gaps", "compute": "compute of no known phase", "other": "time in no op"}


def _gain(gain: ReplayGain, report: Report) -> str:
    amount = f"{gain.gain_ms:.2f} ms a step shorter ({gain.share:.0%})"
    if gain.what == "rank like its peers":
        return (
            f"**Rank {gain.rank} like its peers**: {amount}. Next: `--profile-ranks {gain.rank}` for its "
            f"detail, or `python -m jobs.commands.capture <job id> --ranks {gain.rank}` while it runs; a "
            "slow node: `--exclude-slow-from <job folder>`."
        )
    if gain.what == "stage like the median stage":
        stage = (gain.coordinate or "").split()[-1]
        return (
            f"**Stage {stage} like the median stage**: {amount}. Next: move layers off it (the "
            "--parallel job: `--workload-arg last_stage_layers=N`; the last stage also holds the head "
            "and the loss), or give it more of the pipeline's ranks."
        )
    if gain.what == "the exposed communication hidden":
        return (
            f"**The exposed communication hidden**: {amount}. Evidence: the collectives table (bus "
            "bandwidth), report.png. Next: overlap it with the backward pass (DDP's `bucket_cap_mb`, "
            "`gradient_as_bucket_view`), fewer, larger buckets; a faster link where the bandwidth is "
            "below it."
        )
    gpu = any(r.device == "gpu" for r in report.ranks)
    evidence = "the GPU idle causes table, report.png" if gpu else "the step breakdown, the trace in Perfetto"
    advice = (
        "fewer host syncs (`.item()`, `.cpu()`), a larger batch, or CUDA graphs for a launch-bound host"
        if gpu
        else "the Python stack there (the merged timeline in Perfetto): data loading, host syncs, slow Python"
    )
    return f"**No host gaps**: {amount}. Evidence: {evidence}. Next: {advice}."


def _bubble(path: CriticalPath, noise_ms: float) -> list[str]:
    """The pipeline's bubble is no straggler's: the path's estimate of it, with what to do."""
    bubble = next((w for w in path.what_if if w.what == "bubble"), None)
    if bubble is None or bubble.gain_ms <= noise_ms:
        return []
    return [
        "",
        f"The pipeline's bubble holds {bubble.gain_ms:.2f} ms of the critical path a step "
        f"({bubble.share:.0%}): the path's stage waits while the others fill the pipeline and drain "
        "it (report.png's bubble segments). Next: more microbatches (the bubble is p - 1 of m + p - 1 "
        "microbatches' time), an interleaved schedule (`ScheduleInterleaved1F1B`) or a zero-bubble "
        "one (`ScheduleZBVZeroBubble`).",
    ]


def _uncertain(replay: Replay) -> list[str]:
    """The steps the graph replays off their measured length: what it leaves out held them."""
    off = [step for step in replay.steps if not step.certain]
    if not off:
        return []
    listed = ", ".join(f"{step.step} ({step.error:.0%})" for step in off[:8])
    more = f" and {len(off) - 8} more" if len(off) > 8 else ""
    return [
        "",
        f"**Less certain:** {len(off)} of {len(replay.steps)} step(s) replay more than "
        f"{replay.fidelity.threshold:.0%} off their measured length: {listed}{more}. Something the traces do "
        "not show held them (a dependency between streams without its event, the launch queue, contention); "
        "the what-ifs rest on those steps too.",
    ]


def _undecided(undecided: list[UndecidedStep]) -> list[str]:
    if not undecided:
        return []
    reasons = sorted({u.why for u in undecided})
    steps = ", ".join(str(u.step) for u in undecided[:8])
    return [f"Not replayed: step(s) {steps} ({'; '.join(reasons)})."]
