"""report.html's replay in a real browser (tests/browser.py): on an 8-rank pipeline whose stage
3 computes 3x the others (tests/synthetic.py), the heat map of S by stage x replica has stage
3 as its hot row, and choosing a what-if draws each rank's step replayed so beside the measured
one, at the step report.json's what-if has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.support.ui import Select

from profiling.folder.layout import ReportFiles
from profiling.report.build import build_report
from tests.browser import browser, open_page  # noqa: F401 (the fixture)
from tests.synthetic import pipeline_job, write_job


def test_the_replays_heat_map_and_what_if_strips(tmp_path: Path, browser: Any) -> None:  # noqa: F811
    folder = write_job(tmp_path / "job", pipeline_job(8, compute=(20.0, 20.0, 20.0, 60.0)), 8)
    build_report(folder)
    files = ReportFiles.of(folder)
    replay = json.loads(files.json.read_text())["critical_path"]["replay"]
    assert open_page(browser, files.page) == []
    browser.save_screenshot(str(tmp_path / "page-replay.png"))
    # the heat map: 4 stages x 2 replicas, report.json's S in each cell, stage 3's the reddest
    rows = browser.find_elements("css selector", "#replay-heat tbody tr")
    cells = [[td.text for td in row.find_elements("css selector", "td")] for row in rows]
    assert cells == [[f"{v:.2f}" for v in row] for row in replay["heat"]["values"]]
    reds = [
        [browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor", td) for td in row]
        for row in (r.find_elements("css selector", "td") for r in rows)
    ]
    redness = [[int(c[4:-1].split(",")[0]) - int(c[4:-1].split(",")[2]) for c in row] for row in reds]
    assert min(redness[3]) > max(max(row) for row in redness[:3])
    # a what-if chosen: the measured strips and the replayed ones, a strip a rank each
    chosen = next(w for w in replay["what_if"] if w["coordinate"] == "pp 3")
    Select(browser.find_element("id", "what-if")).select_by_visible_text("stage 3 like the median stage")
    titles = [t.text for t in browser.find_elements("css selector", "#replay-strips .strips-title")]
    measured = max(next(v for v in replay["strips"]["variants"] if v["what"] == "measured")["end_ms"])
    assert titles == [
        f"measured: {measured:.2f} ms a step",
        f"stage 3 like the median stage: {chosen['step_ms']:.2f} ms a step",
    ]
    assert len(browser.find_elements("css selector", "#replay-strips .path-strip")) == 2 * 8
    assert chosen["step_ms"] == pytest.approx(measured - chosen["gain_ms"])
    browser.save_screenshot(str(tmp_path / "page-replay-what-if.png"))
