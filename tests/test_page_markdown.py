"""report.md as report.html's body (profiling/report/page_markdown.py, markdown-it-py): every
construct report.md writes, and a real report's ordered list of what limits the step."""

from __future__ import annotations

import re
from pathlib import Path

from profiling.report.build import build_report
from profiling.report.page_markdown import markdown_html
from profiling.report.settings import ReportSettings
from tests.synthetic import cpu_job, write_job

EVERY_CONSTRUCT = """# Report of `traces/4242`

**Straggler: rank 1** arrived last, *on average* 2.1 ms late; see [the docs](docs/report.md).

## What limits the step

1. **The host (rank 1)**: 87 ms per step (41%)
2. **Exposed communication**: 12 ms per step

- rank 1: +8.0 MiB a step since step 1
- a `<script>` in an op name, <!--<script> in a host's

![per rank](report.png)

| rank | host | step ms |
|---:|---|---:|
| 0 | node1 | 12.50 |
| 1 | node\\|2 | 14.25 |

```
python -m jobs.commands.capture 4242 --ranks 1
```
"""


def _page(text: str) -> str:
    return markdown_html(text, lambda src, alt: f'<figure data-src="{src}">{alt}</figure>')


def test_every_construct_report_md_writes_is_rendered() -> None:
    page = _page(EVERY_CONSTRUCT)
    assert '<h1 id="report-of-traces-4242">Report of <code>traces/4242</code></h1>' in page
    assert '<h2 id="what-limits-the-step">What limits the step</h2>' in page
    assert "<strong>Straggler: rank 1</strong>" in page and "<em>on average</em>" in page
    assert '<a href="docs/report.md">the docs</a>' in page
    # the ordered list is a list, not one paragraph
    assert re.search(
        r"<ol>\s*<li><strong>The host \(rank 1\)</strong>: 87 ms per step \(41%\)</li>\s*"
        r"<li><strong>Exposed communication</strong>: 12 ms per step</li>\s*</ol>",
        page,
    ), page
    assert "<ul>\n<li>rank 1: +8.0 MiB a step since step 1</li>" in page
    # raw HTML is text: nothing an op or host name holds opens a tag or a comment
    assert "<code>&lt;script&gt;</code>" in page and "&lt;!--&lt;script&gt; in a host's" in page
    assert "<script" not in page and "<!--" not in page
    # a lone picture is the caller's HTML, outside any paragraph
    assert '<figure data-src="report.png">per rank</figure>' in page
    assert "<p><figure" not in page
    table = page[page.index("<table") : page.index("</table>")]
    assert table.startswith('<table class="sortable">')
    assert '<th style="text-align:right">rank</th>' in table and "<td>node|2</td>" in table
    assert "<pre><code>python -m jobs.commands.capture 4242 --ranks 1\n</code></pre>" in page


def test_a_real_reports_ordered_list_is_a_list_on_the_page(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "job", cpu_job(8, lambda step: {1: 30.0}), 8)
    build_report(folder, ReportSettings(plot=False, merged_trace=False))
    markdown = (folder / "meta" / "report.md").read_text()
    assert re.search(r"^1\. \*\*", markdown, re.M), markdown  # report.md numbers what limits the step
    page = (folder / "meta" / "report.html").read_text()
    items = re.findall(r"<ol>(.*?)</ol>", page, re.S)
    assert items and items[0].count("<li>") == len(re.findall(r"^\d+\. ", markdown, re.M)), page
