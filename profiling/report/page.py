"""``report.html``: the whole report as one page that works offline.

Every section of report.md in its order (:mod:`profiling.report.page_markdown`), the pictures
inline, and what the pictures cannot do: the run map explored (zoom to any ranks and steps,
hover a cell, click a rank for its slow segments), the critical path one strip per step, the
tables sorted by any column (and the ranks' whole table opened on demand), the merged timeline
opened in Perfetto. The script and style are this module's own (``page.js``, ``page.css``
beside it), inline: no server, no network, no library. The data the page explores is
:mod:`profiling.report.page_data`'s, in one JSON block.

A warm report keeps the page as it was where nothing it shows changed: the page holds nothing
of when the report was made or how long it took, and is written only where its bytes differ.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from profiling.report.page_markdown import markdown_html
from profiling.schema import model
from profiling.schema.model_path import PathStep
from slurm.common.files import write_text_atomically

PERFETTO = "https://ui.perfetto.dev"
_RUN_MAP = '<div id="runmap" class="runmap"></div>'


def write_page(
    path: Path,
    report: model.Report,
    markdown: str,
    pictures: Mapping[str, Path],
    run_levels: dict[str, Any] | None,
    ranks_table: dict[str, Any],
) -> bool:
    """Write ``path`` unless it already holds this page; returns whether it wrote."""
    page = render_page(report, markdown, pictures, run_levels, ranks_table)
    try:
        if path.read_text() == page:
            return False
    except OSError:
        pass
    write_text_atomically(path, page)
    return True


def render_page(
    report: model.Report,
    markdown: str,
    pictures: Mapping[str, Path],
    run_levels: dict[str, Any] | None,
    ranks_table: dict[str, Any],
) -> str:
    """The page's text: ``markdown`` (report.md) as HTML with ``pictures`` (name -> file)
    inline, and the data its script explores."""

    def image(src: str, alt: str) -> str:
        if src == "run.png" and run_levels is not None:  # the map to explore, the picture below it
            return _RUN_MAP + _details("run.png", _img(pictures.get(src), alt))
        return f"<figure>{_img(pictures.get(src), alt)}</figure>"

    body = markdown_html(markdown, image)
    data = {
        "run": run_levels,
        "segments": [msgspec.to_builtins(s) for s in report.run.segments] if report.run else [],
        "captures": [msgspec.to_builtins(c) for c in report.run.captures] if report.run else [],
        "memory_growth": [msgspec.to_builtins(g) for g in report.run.memory_growth] if report.run else [],
        "critical_path": _path_steps(report),
        "replay": _replay(report),
        "ranks_table": ranks_table,
    }
    script_data = _script_json(data)
    top = pictures.get("report.png")  # last: it may be being drawn
    if top is not None:  # report.png: under the verdicts, before the first section
        first_section = body.find("<h2")
        at = first_section if first_section >= 0 else len(body)
        body = body[:at] + f"<figure>{_img(top, 'per rank')}</figure>\n" + body[at:]
    title = html.escape(f"Trace report: {report.folder}")
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{title}</title>",
            f"<style>{_asset('page.css')}</style>",
            "</head><body>",
            f'<nav id="sections">{_contents(body)}</nav>',
            f'<main id="report">{body}',
            _perfetto(report),
            "</main>",
            f'<script type="application/json" id="page-data">{script_data}</script>',
            f"<script>{_asset('page.js')}</script>",
            "</body></html>",
            "",
        ]
    )


def _path_steps(report: model.Report) -> list[PathStep]:
    """The critical path's steps that list their segments: a strip each. Encoded as they are
    (as dicts first, a dense report's 17 000 segments were 20 MB more at the report's peak)."""
    path = report.critical_path
    if path is None:
        return []
    return [step for step in path.steps if step.segments]


def _replay(report: model.Report) -> dict[str, Any] | None:
    """The replay's heat map and each rank's step in each what-if: a map and strips to choose."""
    replay = report.critical_path.replay if report.critical_path else None
    if replay is None:
        return None
    return {"heat": replay.heat, "strips": replay.strips}


def _perfetto(report: model.Report) -> str:
    """The merged timeline, opened in Perfetto the way it documents for another page: the file
    chosen here, then posted to ui.perfetto.dev once it answers (a page from disk cannot read
    the file beside it by itself)."""
    if report.archive is None:
        return ""
    name = html.escape(report.archive.file)
    return (
        '<h2 id="open-in-perfetto">Open the merged timeline in Perfetto</h2>'
        f"<p><code>{name}</code> (ranks {html.escape(report.archive.ranks)}) is beside this page. "
        f'Choose it here to open it in <a href="{PERFETTO}" target="_blank" rel="noopener">Perfetto</a> '
        "(it is sent to that tab, nowhere else): "
        '<input type="file" id="perfetto-file" accept=".tar,.json,.gz"> '
        f"or open {PERFETTO} and pick <em>Open trace file</em>, then <code>{name}</code>.</p>"
    )


def _contents(body: str) -> str:
    found = re.findall(r'<h2 id="([^"]+)">(.*?)</h2>', body)
    return " · ".join(f'<a href="#{anchor}">{title}</a>' for anchor, title in found)


def _img(path: Path | None, alt: str) -> str:
    if path is None or not path.exists():
        return f'<p class="missing">({html.escape(alt)}: not drawn)</p>'
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def _details(summary: str, inner: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>{inner}</details>"


_SCRIPT_DATA = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"))


def _script_json(data: dict[str, Any]) -> str:
    """``data`` as JSON that is script data whatever its strings hold: ``<``, ``>`` and ``&`` as
    JSON escapes (``</script>`` would end the block, ``<!--<script>`` would put the HTML
    tokenizer in its escaped state and swallow page.js). NaN is null (JSON has none)."""
    encoded = msgspec.json.encode(data)
    for character, escaped in _SCRIPT_DATA:  # bytes.replace: str.translate took 0.34 s for 8 ranks' data
        encoded = encoded.replace(character, escaped)
    return encoded.decode()


def _asset(name: str) -> str:
    return resources.files("profiling.report").joinpath(name).read_text()
