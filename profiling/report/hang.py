"""A hang's report: ``meta/hang/hang.json`` (the verdict, typed) and ``hang.md`` (the verdict,
every rank's state and stacks), from the ranks' dumps (:mod:`profiling.analysis.dumps.hang`).
Made by ``python -m jobs.commands.hang``, ``submit.py --wait`` and rank 0 on its way out."""

from __future__ import annotations

from profiling.analysis.dumps import HangError, analyse_dumps, read_dumps
from profiling.folder.layout import JobFolder
from profiling.folder.manifest import manifest_or_none
from profiling.report.table_ranks import cell
from profiling.schema.dumps import HangDump, HangVerdict
from profiling.schema.files import write_file
from slurm.common.files import write_text_atomically


def hang_markdown(verdict: HangVerdict, dumps: dict[int, HangDump], refused: list[str]) -> str:
    lines = [
        "# Hang",
        "",
        *verdict.verdict,
        "",
        "| rank | node | step | reason | stuck at |",
        "|---:|---|---:|---|---|",
    ]
    for rank, info in verdict.ranks.items():
        stuck = f"`{info.stuck_at}`" if info.stuck_at else "–"
        lines.append(f"| {rank} | {cell(info.node)} | {info.step} | {cell(info.reason)} | {stuck} |")
    if refused:
        lines += ["", "Dumps that did not read:", "", *(f"- {line}" for line in refused)]
    for rank, dump in sorted(dumps.items()):
        lines += ["", f"## Rank {rank}", ""]
        for thread, frames in dump.stacks.items():
            lines += [f"Thread `{thread}`:", "", "```", *frames, "```", ""]
    return "\n".join(lines)


def explain(folder: JobFolder) -> HangVerdict:
    """Analyse the job's dumps and write ``hang.json`` and ``hang.md``; returns the verdict."""
    dumps, refused = read_dumps(folder)
    manifest = manifest_or_none(folder)
    verdict = analyse_dumps(dumps, manifest.world_size if manifest else None)
    write_file(folder.hang_verdict, verdict)
    write_text_atomically(folder.hang_markdown, hang_markdown(verdict, dumps, refused))
    return verdict


def verdict_lines(folder: JobFolder) -> list[str] | None:
    """The verdict from the job's latest dumps (``hang.json`` and ``hang.md`` rewritten), or None
    where no rank left one or none can be read."""
    if not folder.hang_dumps():
        return None
    try:
        return explain(folder).verdict
    except (HangError, OSError, ValueError):
        return None
