"""The straggler verdict, made to follow the replay (:mod:`.what_if`).

Arrival alone (:mod:`.straggler`) names the rank the others waited for at a collective; in a
pipeline that is often a rank downstream of the slow one (it arrives late because its inputs
did), and a long stage makes every rank of it late without any rank being slower than its
peers. Where the steps were replayed, the replay says who holds the slowdown: the rank the
verdict names is the one whose part holds the most (``replay.most``); a heavy stage or replica
names no rank; and a slowdown within the step-to-step noise names none either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from profiling.schema.model import Report, Run, StageBalance, Straggler
from profiling.schema.model_replay import Replay, ReplayMost
from slurm.common.mesh import PIPELINE, named


def follows_replay(
    straggler: Straggler | None,
    replay: Replay | None,
    name_of: Callable[[int], str],
    logs_noise_ms: float | None = None,
    mesh: Mapping[int, Mapping[str, int]] | None = None,
) -> Straggler | None:
    """``straggler`` as the replay has it; as it was where nothing was replayed, and where the
    replay agrees (the rank arrival named holds the most, alone or with its replica: ``mesh``,
    each rank's coordinates). ``name_of``: how a rank is named ("rank 0 (pp 0, dp 0)"). An
    undetermined verdict (too few steps traced for arrival's test: the tutorial's schedule traces
    3) is decided by the replay where the step logs give the step-to-step noise
    (``logs_noise_ms``), which every step is in; else it stays."""
    if straggler is None or replay is None:
        return straggler
    undetermined = straggler.verdict == "undetermined"
    if undetermined and (logs_noise_ms is None or not straggler.ranks_compared):
        return straggler
    noise_ms = logs_noise_ms if undetermined and logs_noise_ms is not None else straggler.step_noise_ms or 0.0
    most = replay.most
    if straggler.verdict == "straggler" and most is not None and _holds(most, straggler.rank, mesh or {}):
        return straggler  # arrival and the replay agree: the arrival's evidence says more
    # what the part holds beyond its peers: S itself is above 1 in a balanced job too (a
    # step waits for the slowest rank of each meeting, the ideal for none)
    excess_ms = replay.most_beyond_peers_ms()
    if most is None or excess_ms <= noise_ms:
        if straggler.verdict != "straggler" or undetermined:
            return straggler
        why = (
            f"the replay finds no part holding more than its peers beyond the step-to-step noise "
            f"({most.dimension} {most.index}: {excess_ms:.2f} ms against {noise_ms:.2f} ms)"
            if most is not None
            else "the replay finds no rank holding more of the slowdown than its peers"
        )
        return _named(straggler, "none", None, f"no significant straggler: {why}")
    if most.dimension == PIPELINE:
        return _named(
            straggler,
            "none",
            None,
            f"no single straggler: stage {most.index} holds the most of the replayed slowdown "
            f"(S {most.slowdown:.2f} alone, against S = {replay.slowdown:.2f}), each of its ranks alike",
        )
    if most.dimension != "rank":
        return straggler  # a replica (dp, tp): arrival tells which of its ranks, if any
    kinds = " and ".join(most.kinds) or "work"
    longer = f"{most.longer_fraction:.0%} " if most.longer_fraction is not None else ""
    text = (
        f"Straggler: {name_of(most.index)} holds the most of the replayed slowdown (S {most.slowdown:.2f} "
        f"alone, against S = {replay.slowdown:.2f} for the job): its {kinds} run {longer}longer than its "
        f"peers' ({most.longer_ms:.2f} ms a step)"
    )
    if straggler.verdict == "straggler" and straggler.rank is not None:
        text += f"; rank {straggler.rank} arrived last most often, waiting on it"
    if undetermined:
        steps = [step.step for step in replay.steps]
        text += (
            f"; from the replay of step(s) {_ranges(steps)}, beyond the step-to-step noise of the "
            f"step logs ({noise_ms:.2f} ms): too few steps traced for arrival alone"
        )
    return _named(straggler, "straggler", most.index, text)


def _holds(most: ReplayMost, rank: int | None, mesh: Mapping[int, Mapping[str, int]]) -> bool:
    """Whether the part that holds the most is ``rank``, or a replica (not a stage) of it."""
    if rank is None or most.dimension == PIPELINE:
        return False
    return (
        rank == most.index
        if most.dimension == "rank"
        else mesh.get(rank, {}).get(most.dimension) == most.index
    )


def decided_with_logs(report: Report, run: Run | None) -> Straggler | None:
    """The straggler verdict that too few traced steps left undetermined, decided by the replay
    against the step logs' noise (every step is in them)."""
    replay = report.critical_path.replay if report.critical_path else None
    if report.straggler is None or run is None or replay is None:
        return report.straggler
    mesh = {r.rank: r.mesh for r in report.ranks}
    return follows_replay(
        report.straggler,
        replay,
        lambda rank: named(rank, mesh.get(rank)),
        run.noise * replay.measured_ms,
        {rank: where for rank, where in mesh.items() if where},
    )


def _ranges(steps: list[int]) -> str:
    """``15-17, 30``."""
    runs: list[list[int]] = []
    for step in sorted(steps):
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def _named(straggler: Straggler, verdict: str, rank: int | None, text: str) -> Straggler:
    return msgspec.structs.replace(straggler, verdict=verdict, rank=rank, text=text)


def stages_follow_replay(
    stages: StageBalance | None, replay: Replay | None, noise_ms: float | None
) -> StageBalance | None:
    """The stage verdict as the replay has it: a stage that holds the most of the slowdown
    beyond the noise is an imbalance; a stage whose compute is high because of one rank of it
    is not called balanced, but that rank's."""
    if stages is None or replay is None:
        return stages
    most = replay.most
    if most is None or replay.most_beyond_peers_ms() <= (noise_ms or 0.0):
        return stages
    if most.dimension == PIPELINE and (stages.verdict, stages.stage) != ("imbalance", most.index):
        found = next((s for s in stages.stages if s.stage == most.index), None)
        ranks = f" (ranks {', '.join(map(str, found.ranks[:8]))})" if found is not None else ""
        return msgspec.structs.replace(
            stages,
            verdict="imbalance",
            stage=most.index,
            text=f"stage imbalance: stage {most.index}{ranks} holds the most of the replayed slowdown "
            f"(S {most.slowdown:.2f} alone, against S = {replay.slowdown:.2f}): its "
            f"{' and '.join(most.kinds) or 'work'} run longer than the other stages' "
            f"({most.longer_ms:.2f} ms a step). Every stage waits for it: move layers off stage {most.index}",
        )
    if stages.verdict == "balanced" and most.dimension == "rank":
        return msgspec.structs.replace(
            stages,
            text=f"no stage imbalance of its own: the replay puts the slowdown on rank {most.index} "
            f"alone ({stages.text.removeprefix('stages balanced: ')})",
        )
    return stages
