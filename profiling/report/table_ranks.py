"""Which ranks report.md's per-rank tables show, so that each stays readable at any count; and
a name as a table's cell."""

from __future__ import annotations

from profiling.schema.model import RankReport, Report

SHOWN_RANKS = 16  # the lowest ranks every per-rank table shows; a line says what the others are


def shown_ranks(report: Report, ranks: list[RankReport] | None = None) -> list[RankReport]:
    """Of ``ranks`` (the report's, by default): the lowest :data:`SHOWN_RANKS`, and the ranks
    that matter beyond them (the straggler or its candidate, the slowest and fastest step)."""
    ranks = report.ranks if ranks is None else ranks
    if len(ranks) <= SHOWN_RANKS:
        return ranks
    verdict = report.straggler
    named = {verdict.rank, verdict.candidate} if verdict is not None else set()
    means = sorted(ranks, key=lambda r: r.step_time_ms.mean)
    named |= {means[0].rank, means[-1].rank}
    return [r for index, r in enumerate(ranks) if index < SHOWN_RANKS or r.rank in named]


def others_line(total: int, shown: int, columns: int) -> list[str]:
    """The row of a table of ``columns`` saying how many of ``total`` ranks it does not show
    (with the blank line that ends a table)."""
    left = total - shown
    if not left:
        return [""]
    return [f"| {left} other ranks (report.json) |" + " |" * (columns - 1), ""]


def cell(name: object) -> str:
    """A name (an op's, a host's, a group's: what a trace or a user wrote) as one Markdown table
    cell: a ``|`` escaped, line breaks and other control characters as spaces, so that a name
    never shifts a table's columns or ends its row."""
    text = str(name).replace("|", "\\|")
    return "".join(c if c.isprintable() else " " for c in text)
