"""report.md as HTML, for ``report.html``, by markdown-it-py (CommonMark, with GFM's tables):
a page made of report.md itself says what report.md says, in its order, with nothing to keep
in step. Raw HTML in the Markdown is escaped, not passed (an op or host name is text); each
heading gets an id to link to, each table the class the page's script sorts, and a picture
that stands alone in its paragraph is the caller's HTML (``image``), not wrapped in ``<p>``."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token


def markdown_html(text: str, image: Callable[[str, str], str]) -> str:
    """``text`` as HTML; ``image(src, alt)`` gives the HTML of each picture it names."""
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(text)
    _mark(tokens)

    def render_image(renderer: Any, tokens: Sequence[Token], index: int, options: Any, env: Any) -> str:
        token = tokens[index]  # bound to the renderer, as markdown-it-py calls a rule
        alt = renderer.renderInlineAsText(token.children or [], options, env)
        return image(str(token.attrGet("src") or ""), alt)

    parser.add_render_rule("image", render_image)
    return parser.renderer.render(tokens, parser.options, {})


def _mark(tokens: list[Token]) -> None:
    """Ids on headings, the sortable class on tables, and no paragraph around a lone picture."""
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            token.attrSet("id", _anchor(tokens[index + 1].content))
        elif token.type == "table_open":
            token.attrSet("class", "sortable")
        elif token.type == "paragraph_open" and _lone_image(tokens[index + 1]):
            token.hidden = tokens[index + 2].hidden = True


def _lone_image(inline: Token) -> bool:
    children = [c for c in inline.children or [] if not (c.type == "text" and not c.content.strip())]
    return len(children) == 1 and children[0].type == "image"


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
