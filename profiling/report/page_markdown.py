"""report.md as HTML, for ``report.html``: the Markdown that :mod:`profiling.report.render`
writes (headings, paragraphs, pipe tables, lists, images, inline code, bold, italics, links),
not Markdown at large. A page made of report.md itself says what report.md says, in its order,
with nothing to keep in step."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator

_INLINE = re.compile(
    r"`(?P<code>[^`]+)`"
    r"|!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)"
    r"|\[(?P<text>[^\]]+)\]\((?P<href>[^)\s]+)\)"
    r"|\*\*(?P<bold>.+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s][^*]*?)\*(?![\w*])"
)


def markdown_html(text: str, image: Callable[[str, str], str]) -> str:
    """``text`` as HTML; ``image(src, alt)`` gives the HTML of each picture it names."""
    return "\n".join(_blocks(text.splitlines(), image))


def _blocks(lines: list[str], image: Callable[[str, str], str]) -> Iterator[str]:
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
        elif heading := re.match(r"(#{1,6}) (.*)", line):
            level = len(heading.group(1))
            title = heading.group(2)
            yield f'<h{level} id="{_anchor(title)}">{_inline(title, image)}</h{level}>'
            index += 1
        elif line.startswith("```"):
            end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("```")), len(lines))
            yield f"<pre><code>{html.escape(chr(10).join(lines[index + 1 : end]))}</code></pre>"
            index = end + 1
        elif line.startswith("|"):
            end = _end(lines, index, lambda s: s.startswith("|"))
            yield _table(lines[index:end], image)
            index = end
        elif line.startswith("- "):
            end = _end(lines, index, lambda s: s.startswith("- "))
            items = "".join(f"<li>{_inline(item[2:], image)}</li>" for item in lines[index:end])
            yield f"<ul>{items}</ul>"
            index = end
        else:
            end = _end(lines, index, lambda s: bool(s.strip()) and not s.startswith(("|", "#", "- ", "```")))
            body = _inline(" ".join(lines[index:end]), image)
            yield body if body.startswith("<figure") else f"<p>{body}</p>"
            index = end


def _end(lines: list[str], start: int, belongs: Callable[[str], bool]) -> int:
    end = start + 1
    while end < len(lines) and belongs(lines[end]):
        end += 1
    return end


def _table(rows: list[str], image: Callable[[str, str], str]) -> str:
    cells = [_cells(row) for row in rows]
    header, body = cells[0], [row for row in cells[1:] if not all(re.fullmatch(r":?-+:?", c) for c in row)]
    align = ["right" if c.endswith(":") else "left" for c in (cells[1] if len(cells) > 1 else header)]

    def row_of(tag: str, row: list[str]) -> str:
        cells = (
            f'<{tag} style="text-align:{a}">{_inline(c, image)}</{tag}>'
            for c, a in zip(row, align, strict=False)
        )
        return "<tr>" + "".join(cells) + "</tr>"

    head, lines = row_of("th", header), "".join(row_of("td", row) for row in body)
    return f'<table class="sortable"><thead>{head}</thead><tbody>{lines}</tbody></table>'


def _cells(row: str) -> list[str]:
    inner = row.strip()[1:-1] if row.strip().endswith("|") else row.strip()[1:]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


def _inline(text: str, image: Callable[[str, str], str]) -> str:
    out, at = [], 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[at : match.start()]))
        at = match.end()
        found = match.groupdict()
        if found["code"] is not None:
            out.append(f"<code>{html.escape(found['code'])}</code>")
        elif found["src"] is not None:
            out.append(image(found["src"], found["alt"]))
        elif found["href"] is not None:
            out.append(f'<a href="{html.escape(found["href"])}">{_inline(found["text"], image)}</a>')
        elif found["bold"] is not None:
            out.append(f"<strong>{_inline(found['bold'], image)}</strong>")
        else:
            out.append(f"<em>{_inline(found['em'], image)}</em>")
    out.append(html.escape(text[at:]))
    return "".join(out)


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
