"""report.html in a real browser (tests/browser.py: headless Chromium through Selenium), on pages
made from real reports: a 2-rank local job, the real GPU traces in tests/data, and simulated
folders of 8 and 4096 ranks. Each page loads with no console error and holds every section of
report.md; the run map draws, zooms to ranks and steps with report.json's values, names the
cell under the pointer; a table sorts. Screenshots are left in each test's temporary folder."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from profiling.folder.layout import JobFolder, ReportFiles
from profiling.folder.step_log import EXACT, StepLogHeader, read_step_log
from profiling.report.build import build_report
from profiling.report.page import render_page, write_page
from profiling.report.page_data import ranks_table
from profiling.report.render import report_markdown
from profiling.report.settings import ReportSettings
from profiling.schema import model
from tests.browser import browser, open_page  # noqa: F401 (the fixture)
from tests.synthetic_report import synthetic_report

DATA = Path(__file__).parent / "data" / "gpu_traces"
LEFT, BOTTOM = 56, 22  # page.js: the run map's margins


def report_of(folder: Path, out: Path, **options: Any) -> tuple[model.Report, ReportFiles]:
    report = build_report(folder, ReportSettings(out=out, jobs=1, **options))
    return report, ReportFiles(out)


def sections_in_order(files: ReportFiles, driver: Any) -> None:
    """Every heading of report.md is on the page, in report.md's order."""
    wanted = [line[3:] for line in files.markdown.read_text().splitlines() if line.startswith("## ")]
    shown = [h.text for h in driver.find_elements("css selector", "main h2")]
    assert [title for title in shown if title in wanted] == wanted, shown


def painted(driver: Any) -> dict[str, int]:
    """How many of the run map's pixels are red (slower), blue (faster), grey (not recorded)."""
    return driver.execute_script(f"""
        const c = document.getElementById("runmap-canvas");
        const d = c.getContext("2d").getImageData({LEFT}, 0, c.width - {LEFT}, c.height - {BOTTOM}).data;
        const n = {{red: 0, blue: 0, grey: 0}};
        for (let i = 0; i < d.length; i += 4) {{
            if (d[i] === 220 && d[i + 1] === 220) n.grey++;
            else if (d[i] > d[i + 2]) n.red++;
            else if (d[i + 2] > d[i]) n.blue++;
        }}
        return n;""")


def zoom(driver: Any, ranks: str, steps: str) -> list[tuple[int, float]]:
    """Zoom with the map's own controls; returns the range's (rank, median ms) rows."""
    for name, value in (("runmap-ranks", ranks), ("runmap-steps", steps)):
        field = driver.find_element("id", name)
        field.clear()
        field.send_keys(value)
    driver.find_element("id", "runmap-zoom").click()
    rows = driver.find_elements("css selector", "#runmap-range-table tbody tr")
    return [(int(r.get_attribute("data-rank")), float(r.get_attribute("data-ms"))) for r in rows]


def hover(driver: Any, row: int, rows: int, step: float, first: int, last: int, right: int = 0) -> str:
    """Move the pointer over the map's cell of ``row`` (of ``rows`` shown) at ``step`` (of the
    steps ``first``-``last`` shown); returns what the map says of it. ``right``: the margin
    where the stages are named, if any."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = driver.find_element("id", "runmap-canvas")
    width, height = canvas.size["width"] - LEFT - right, canvas.size["height"] - BOTTOM
    x = LEFT + (step - first + 0.5) / (last - first + 1) * width
    y = (row + 0.5) / rows * height
    ActionChains(driver).move_to_element_with_offset(
        canvas, int(x - canvas.size["width"] / 2), int(y - canvas.size["height"] / 2)
    ).perform()
    return driver.find_element("id", "runmap-tip").text


def sort_column(driver: Any, table: Any, name: str) -> list[str]:
    header = next(th for th in table.find_elements("css selector", "thead th") if th.text.startswith(name))
    column = [th.text for th in table.find_elements("css selector", "thead th")].index(header.text)
    header.click()
    return [
        r.find_elements("css selector", "td")[column].text
        for r in table.find_elements("css selector", "tbody tr")
    ]


def test_the_page_of_a_real_job(real_job: Path, tmp_path: Path, browser: Any) -> None:  # noqa: F811
    report, files = report_of(real_job, tmp_path / "meta")
    assert files.page.exists() and report.run is not None
    assert open_page(browser, files.page) == []
    browser.save_screenshot(str(tmp_path / "page-2-ranks.png"))
    sections_in_order(files, browser)
    assert len(browser.find_elements("css selector", "figure img")) >= 1  # report.png, inline
    assert sum(painted(browser).values()) > 0
    # zoomed to the steps of each rank's second interval: the medians report.json gives
    for rank in report.run.ranks:
        first, last, median_ms = (lambda i: (i.first, i.last, i.median_ms))(rank.intervals[1])
        shown = dict(zoom(browser, f"{rank.rank}-{rank.rank}", f"{first}-{last}"))
        assert shown == {rank.rank: pytest.approx(median_ms, rel=1e-5)}, (rank.rank, first, last)
    start, end = report.run.steps
    zoom(browser, "0-1", f"{start}-{end}")
    told = hover(browser, 1, 2, start + 3, start, end)
    assert told.startswith(f"rank 1 ({report.run.ranks[0].node}), step {start + 3}: "), told
    table = browser.find_element("css selector", "main table.sortable")
    assert sort_column(browser, table, "rank") == ["0", "1"]
    assert sort_column(browser, table, "rank") == ["1", "0"]
    if report.critical_path is not None:
        strips = browser.find_elements("css selector", "#critical-path .path-strip")
        assert len(strips) == len([s for s in report.critical_path.steps if s.segments]) > 0
        segment = strips[0].find_element("css selector", "span")
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(browser).move_to_element(segment).perform()
        assert re.match(r"step \d+: rank \d, ", browser.find_element("id", "path-tip").text)
    assert browser.find_element("id", "perfetto-file") and "merged_trace.tar" in browser.page_source
    browser.save_screenshot(str(tmp_path / "page-2-ranks-explored.png"))


def test_the_page_of_real_gpu_traces(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        shutil.copy(DATA / f"trace_filter_sampled_rank-{rank}.json.gz", folder)
    report, files = report_of(folder, tmp_path / "out")
    assert report.run is None and len(report.ranks) == 2
    assert open_page(browser, files.page) == []
    sections_in_order(files, browser)
    assert "## Kernels" in files.markdown.read_text() or browser.find_elements("css selector", "main h2")
    tables = browser.find_elements("css selector", "main table.sortable")
    assert tables and not browser.find_elements("id", "runmap")  # no step logs: no map
    browser.save_screenshot(str(tmp_path / "page-gpu-traces.png"))


def write_simulated_logs(
    folder: JobFolder, ranks: int, steps: int, per_node: int, slow: range, slow_ranks: set[int] | None = None
) -> None:
    """Step logs as ranks write them, made fast: one row array, scaled per rank; the ranks of
    the middle node (or ``slow_ranks``) 1.5 times slower in steps ``slow``."""
    rng = np.random.default_rng(0)
    template = np.zeros(steps, dtype=EXACT)
    template["step"] = np.arange(steps)
    template["wall"], template["mem"] = 400.0, 30_000.0
    template["cpu"] = 130.0 + rng.normal(0, 3.0, steps)
    template["gpu"] = np.nan
    slow_node = ranks // 2 // per_node
    folder.steps.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        rows = template.copy()
        rows["cpu"] *= rng.normal(1.0, 0.01)
        if (rank // per_node == slow_node) if slow_ranks is None else (rank in slow_ranks):
            rows["cpu"][slow.start : slow.stop] *= 1.5
        node = f"node{rank // per_node + 1}"
        header = StepLogHeader(rank=rank, world_size=ranks, restart=0, node=node, gpu=False)
        folder.step_log(rank).write_bytes(header.encode() + rows.tobytes())


@pytest.mark.parametrize(("ranks", "steps"), [(8, 200), (4096, 1000)])
def test_the_page_of_a_simulated_run(ranks: int, steps: int, tmp_path: Path, browser: Any) -> None:  # noqa: F811
    folder = JobFolder(tmp_path, "77")
    per_node = 4 if ranks == 8 else 8
    write_simulated_logs(folder, ranks, steps, per_node, range(60, 120))
    report, files = report_of(folder.path, tmp_path / "out")
    assert report.run is not None and len(report.run.ranks) == ranks
    assert files.page.stat().st_size < 20e6
    assert open_page(browser, files.page) == []
    sections_in_order(files, browser)
    browser.save_screenshot(str(tmp_path / f"page-{ranks}-ranks.png"))
    colours = painted(browser)
    assert colours["red"] > 0 and colours["blue"] > 0, colours  # the slow node, and the others
    # the slow node's ranks in its slow steps: every cell, from the page's detail around it
    # where its levels join steps (4096 ranks), from its finest level where not (8)
    slow_rank = report.run.segments[0].rank
    shown = zoom(browser, f"{slow_rank}-{slow_rank + 2}", "60-119")
    assert [rank for rank, _ in shown] == [slow_rank, slow_rank + 1, slow_rank + 2]
    axis = browser.find_element("id", "runmap-axis").text
    assert axis.startswith("detail: ranks ") if ranks > 8 else axis.startswith("level 0 of 1: "), axis
    for rank, ms in shown:  # the medians of the rank's own steps 60-119, as its log holds them
        logged = read_step_log(folder.step_log(rank)).median["cpu"][60:120]
        assert ms == pytest.approx(float(np.median(logged)), rel=1e-6), (rank, ms)
    told = hover(browser, 1, 3, 80, 60, 119)
    assert re.match(rf"rank {slow_rank + 1} \(node\d+\), steps? \d+(-\d+)?: ", told), told
    # a click on a rank lists its slow segments
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("id", "runmap-canvas")
    ActionChains(browser).move_to_element_with_offset(
        canvas, 0, -canvas.size["height"] // 2 + 10
    ).click().perform()
    listed = browser.find_element("id", "runmap-segments").text
    assert listed.startswith("slow in steps ") or listed == "no slow segment", listed
    if ranks > 16:  # the ranks' table stays cut; the whole opens on demand
        assert "## Step time" not in files.markdown.read_text()
    browser.save_screenshot(str(tmp_path / f"page-{ranks}-ranks-zoomed.png"))


def test_a_jobs_layout_draws_its_map_by_stage_and_replica(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """16 ranks laid out dp=4,pp=4 (dp outermost: a stage's ranks are 4 apart), stage 3 slow:
    the rows come stage by stage, replica by replica, and the slow stage is one band, drawn
    with a line where each stage begins and named beside it; run.png draws the same bands."""
    folder = JobFolder(tmp_path, "78")
    write_simulated_logs(folder, 16, 120, 4, range(0, 120), slow_ranks={3, 7, 11, 15})
    report, files = report_of(folder.path, tmp_path / "out", layout=(("dp", 4), ("pp", 4)))
    assert report.run is not None and files.run_plot.exists()
    assert open_page(browser, files.page) == []
    browser.save_screenshot(str(tmp_path / "page-by-stage.png"))
    right = 60  # page.js: the margin that names the stages
    told = [hover(browser, row, 16, 60, 0, 119, right) for row in range(16)]
    assert [int(re.match(r"rank (\d+) ", text)[1]) for text in told] == [  # type: ignore[index]
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15
    ], told  # fmt: skip
    slow = [float(re.search(r"×(\d+\.\d+)", text)[1]) for text in told]  # type: ignore[index]
    assert min(slow[12:]) > 1.3 > 1.1 > max(slow[:12]), slow  # stage 3: one hot band
    # a solid line where stages 1, 2, 3 begin, none inside a stage; the stages named on the right
    pixels = browser.execute_script(f"""
        const c = document.getElementById("runmap-canvas"), h = c.height - {BOTTOM};
        const at = (y) => Array.from(c.getContext("2d").getImageData({LEFT} + 50, Math.round(y), 1, 1).data);
        const right = c.getContext("2d").getImageData(c.width - {right}, 0, {right}, h).data;
        let dark = 0;
        for (let i = 0; i < right.length; i += 4) if (right[i + 3] > 0 && right[i] < 128) dark++;
        return {{lines: [4, 8, 12].map((row) => at(row * h / 16)), inside: at(6.5 * h / 16), dark}};""")
    assert all(p[:3] == [0, 0, 0] for p in pixels["lines"]), pixels
    assert pixels["inside"][:3] != [0, 0, 0] and pixels["dark"] > 0, pixels


def test_no_html_leaves_the_page_out_and_a_warm_report_keeps_it(real_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "meta"
    report_of(real_job, out, html=False)
    assert not ReportFiles(out).page.exists()
    report_of(real_job, out)
    page = ReportFiles(out).page
    written = page.stat().st_mtime_ns
    report_of(real_job, out)
    assert page.stat().st_mtime_ns == written  # nothing it shows changed: not written again


def test_the_pages_data_cannot_end_its_script() -> None:
    report = model.empty("</script><script>alert(1)</script>", "2026-12-03T00:00:00")
    page = render_page(report, "# Trace report: </script>\n", {}, None, {"columns": [], "rows": []})
    assert page.count("</script>") == 2 and "&lt;/script&gt;" in page


def test_a_table_of_many_ranks_keeps_its_top_rows_and_opens_whole(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    report = synthetic_report(300)
    means = sorted(r.step_time_ms.mean for r in report.ranks)
    spread = model.Spread(min=means[0], median=means[150], max=means[-1], max_minus_min=means[-1] - means[0])
    report = msgspec.structs.replace(report, step_time_spread_ms=spread)
    page = tmp_path / "report.html"
    write_page(page, report, report_markdown(report), {}, None, ranks_table(report))
    assert open_page(browser, page) == []
    heading = next(h for h in browser.find_elements("css selector", "h2") if h.text.startswith("Step time"))
    cut = heading.find_element("xpath", "following-sibling::table[1]")
    assert 0 < len(cut.find_elements("css selector", "tbody tr")) < 300
    browser.find_element("id", "all-ranks").click()
    whole = browser.find_element("id", "all-ranks-table")
    assert len(whole.find_elements("css selector", "tbody tr")) == 300
    headers = [th.text for th in whole.find_elements("css selector", "thead th")]
    assert headers[:6] == ["rank", "host", "steps", "mean", "min", "max"] and "compute ms" in headers
    means = [float(m) for m in sort_column(browser, whole, "mean")]
    assert means == sorted(means) and len(means) == 300
    assert means[-1] == pytest.approx(max(r.step_time_ms.mean for r in report.ranks), abs=0.01)
