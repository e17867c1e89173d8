"""The straggler verdict, made to follow the replay (:mod:`.replay_steps`).

Arrival alone (:mod:`.straggler`) names the rank the others waited for at a collective; in a
pipeline that is often a rank downstream of the slow one (it arrives late because its inputs
did), and a long stage makes every rank of it late without any rank being slower than its
peers. Where the steps were replayed, the replay says who holds the slowdown: the rank the
verdict names is the one whose part holds the most (``replay.most``); a heavy stage or replica
names no rank; and a slowdown within the step-to-step noise names none either.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from profiling.schema.model import StageBalance, Straggler
from profiling.schema.model_replay import Replay
from slurm.layout import PIPELINE


def follows_replay(
    straggler: Straggler | None, replay: Replay | None, named: Callable[[int], str]
) -> Straggler | None:
    """``straggler`` as the replay has it; as it was where nothing was replayed or the verdict
    is undetermined. ``named``: how a rank is named ("rank 0 (pp 0, dp 0)")."""
    if straggler is None or replay is None or straggler.verdict == "undetermined":
        return straggler
    noise_ms = straggler.step_noise_ms or 0.0
    excess_ms = replay.measured_ms - replay.ideal_ms if replay.slowdown > 1.0 else 0.0
    most = replay.most
    if most is None or excess_ms <= noise_ms:
        if straggler.verdict != "straggler":
            return straggler
        why = (
            f"the replay finds the step within its step-to-step noise of its ideal "
            f"(S = {replay.slowdown:.2f}, {excess_ms:.2f} ms against {noise_ms:.2f} ms)"
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
        return straggler  # a replica (dp, tp) of the late rank's: arrival tells which of its ranks
    if straggler.verdict == "straggler" and straggler.rank == most.index:
        return straggler  # arrival and the replay agree: the arrival's evidence says more
    kinds = " and ".join(most.kinds) or "work"
    longer = f"{most.longer_fraction:.0%} " if most.longer_fraction is not None else ""
    text = (
        f"Straggler: {named(most.index)} holds the most of the replayed slowdown (S {most.slowdown:.2f} "
        f"alone, against S = {replay.slowdown:.2f} for the job): its {kinds} run {longer}longer than its "
        f"peers' ({most.longer_ms:.2f} ms a step)"
    )
    if straggler.verdict == "straggler" and straggler.rank is not None:
        text += f"; rank {straggler.rank} arrived last most often, waiting on it"
    return _named(straggler, "straggler", most.index, text)


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
    excess_ms = replay.measured_ms - replay.ideal_ms if replay.slowdown > 1.0 else 0.0
    if most is None or excess_ms <= (noise_ms or 0.0):
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
