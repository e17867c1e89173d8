"""The SLURM job's ``Comment`` at its end: the report's verdict in one line, which ``squeue -o
%k``, ``scontrol show job`` and (where the site keeps comments) ``sacct`` show anyone on the
cluster, as Princeton's jobstats puts its summary in the admin comment."""

from __future__ import annotations

from profiling.schema import model
from profiling.schema.summary import JobSummary

MARK = "slurm-profile:"  # what starts our line: a comment that starts so is ours to replace
# SLURM keeps comments far longer; a line squeue shows whole, with room for the user's own
MAX_CHARS = 250
_JOINED = " | "  # between the user's comment and ours


def comment_line(summary: JobSummary, baseline: model.Baseline | None) -> str:
    """``"slurm-profile: step 131 ms (p90 140); straggler rank 3 (node2); S 1.23; MFU 41%; no
    OOM; 12% slower than the last 5 (regression)"``, at most :data:`MAX_CHARS`."""
    parts = []
    if summary.step_median_ms is not None:
        p90 = f" (p90 {summary.step_p90_ms:.0f})" if summary.step_p90_ms is not None else ""
        parts.append(f"step {summary.step_median_ms:.0f} ms{p90}")
    if summary.verdict == "straggler" and summary.straggler is not None:
        parts.append(f"straggler rank {summary.straggler}")
    elif summary.verdict == "none":
        parts.append("balanced")
    if summary.slow_nodes:
        parts.append(f"slow {','.join(summary.slow_nodes[:3])}")
    if summary.slowdown is not None:
        parts.append(f"S {summary.slowdown:.2f}")
    if summary.mfu is not None:
        parts.append(f"MFU {summary.mfu * 100:.0f}%")
    parts.append("OOM" if summary.oom else "no OOM")
    if baseline is not None and baseline.change is not None:
        regression = " (regression)" if baseline.regression else ""
        parts.append(f"{baseline.change * 100:+.0f}% vs last {len(baseline.jobs)}{regression}")
    return _cut(_printable(f"{MARK} {'; '.join(parts)}"), MAX_CHARS)


def merged_comment(existing: str, line: str) -> str | None:
    """The comment to set: ``line`` where there was none or ours; after the user's own where
    both fit; None where they do not (the user's comment is left as it is)."""
    existing = existing.strip()
    if not existing or existing.startswith(MARK):
        return line
    own = existing.split(_JOINED + MARK, 1)[0]  # a comment we appended to before: ours replaced
    joined = f"{own}{_JOINED}{line}"
    return joined if len(joined) <= MAX_CHARS else None


def _printable(text: str) -> str:
    """Printable ASCII alone: a node's name with a newline, a CR or an escape sequence would go
    straight into sacct's and squeue's output (and their parsers')."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
