"""report.md's "What limits the step": the critical path's gains, the largest first, each with
its evidence and the next thing to do (:mod:`profiling.analysis.across_ranks.critical_steps`)."""

from __future__ import annotations

from profiling.schema.model import Report
from profiling.schema.model_path import CriticalPath, WhatIf

SHOWN = 5
_NAME_CHARS = 80  # kernel names run to thousands of characters; report.json keeps them whole


def what_limits(report: Report) -> list[str]:
    path = report.critical_path
    if path is None:
        return []
    lines = ["## What limits the step", ""]
    if not path.steps:
        return [*lines, *_undecided(path), ""]
    noise = path.noise_ms or 0.0
    shown = [w for w in path.what_if if w.gain_ms > noise and _named(w, report)][:SHOWN]
    for number, what in enumerate(shown, 1):
        lines.append(f"{number}. {_line(what, report)}")
    if not shown:
        top = path.by_rank_kind[0]
        lines.append(
            f"Balanced: no part of the path would gain more than the step-to-step noise ({noise:.2f} ms). "
            f"The most of it is rank {top.rank}'s {top.kind} ({top.share:.0%}, `{_short(top.name)}`)."
        )
    lines += [
        "",
        f"From the critical path of {len(path.steps)} step(s), {path.step_ms:.2f} ms each on average "
        f"(report.json's `critical_path`; docs/report.md says how it is walked). Gains are estimates "
        f"from the path, not a simulation, each on its own (they may overlap); a gain under the "
        f"step-to-step noise ({noise:.2f} ms) gets no line"
        + (", nor a late rank the straggler verdict does not name." if report.straggler else "."),
        *_undecided(path),
        "",
    ]
    return lines


def _named(what: WhatIf, report: Report) -> bool:
    """A late rank's gain is named only where the straggler verdict names it: in a balanced job
    the last rank changes at random, and each collective's last arrival still leads the next by
    a little (the sum over a step's collectives can exceed the noise)."""
    if what.what != "straggler":
        return True
    verdict = report.straggler
    return verdict is not None and verdict.verdict == "straggler" and verdict.rank == what.rank


def _line(what: WhatIf, report: Report) -> str:
    where = f"rank {what.rank}, `{_short(what.name)}`" if what.rank is not None else "the path"
    gain = f"{what.gain_ms:.2f} ms per step ({what.share:.0%})"
    if what.what == "straggler":
        return (
            f"**A late rank holds the others** ({where}): the step would be {gain} shorter if "
            f"{what.assumption}. Evidence: the straggler verdict above, the clock alignment table. "
            f"Next: `--profile-ranks {what.rank}` for that rank's detail, or "
            f"`python -m jobs.capture <job id> --ranks {what.rank}` while it runs; a slow node: "
            "`--exclude-slow-from <job folder>`."
        )
    if what.what == "overlap":
        return (
            f"**Exposed communication** ({where}): the step would be {gain} shorter if {what.assumption}. "
            "Evidence: the collectives table (bus bandwidth), report.png. Next: overlap it with the "
            "backward pass (DDP's `bucket_cap_mb`, `gradient_as_bucket_view`), fewer, larger buckets; "
            "a faster link where the bandwidth is below it."
        )
    if what.what == "bubble":
        return (
            f"**The pipeline's bubble** ({where}): the step would be {gain} shorter if {what.assumption}: "
            "the path's stage waits while the other stages fill the pipeline and drain it. Evidence: the "
            "critical path's bubble segments (report.png), the stages' compute. Next: more microbatches "
            "(the bubble is p - 1 of m + p - 1 microbatches' time), an interleaved schedule "
            "(`ScheduleInterleaved1F1B`, several stages a rank) or a zero-bubble one "
            "(`ScheduleZBVZeroBubble`)."
        )
    gpu = any(r.device == "gpu" for r in report.ranks)
    evidence = "the GPU idle causes table, report.png" if gpu else "the step breakdown, the trace in Perfetto"
    advice = (
        "fewer host syncs (`.item()`, `.cpu()`), a larger batch, or CUDA graphs for a launch-bound host"
        if gpu
        else "the Python stack there (the merged timeline in Perfetto): data loading, host syncs, slow Python"
    )
    return (
        f"**The host** ({where}): the step would be {gain} shorter if {what.assumption}. "
        f"Evidence: {evidence}. Next: {advice}."
    )


def _undecided(path: CriticalPath) -> list[str]:
    if not path.undecided:
        return []
    reasons = sorted({u.why for u in path.undecided})
    steps = ", ".join(str(u.step) for u in path.undecided[:8])
    return [f"Not followed: step(s) {steps} ({'; '.join(reasons)})."]


def _short(name: str | None) -> str:
    name = name or ""
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"
