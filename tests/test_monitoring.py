"""What docs/monitoring/ ships for a cluster's monitoring: Prometheus's alerting rules, checked
and run against series with known answers by promtool, and a Grafana dashboard whose queries
name only the metrics the toolkit exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from jobs.runtime.live_metrics import registry_of
from profiling.analysis.run.run_logs import read_run
from profiling.folder.layout import JobFolder
from tests.common import REPO
from tests.step_logs import timed_step_logs

MONITORING = REPO / "docs" / "monitoring"
RULES = MONITORING / "slurm-profile.rules.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
_METRIC = re.compile(r"\bslurm_profile_[a-z_]+\b")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        why = "promtool is not installed (Debian's prometheus package has it)"
        if os.environ.get("REQUIRE_PROMETHEUS"):  # CI: a missing tool fails, never skips
            pytest.fail(f"REQUIRE_PROMETHEUS is set and {why}")
        pytest.skip(why)
    return found


def _exported(tmp_path: Path) -> set[str]:
    """The metrics the publisher of rank 0's node exports for a job with a layout."""
    folder = JobFolder(tmp_path, "77")
    timed_step_logs(folder, {0: 100.0, 1: 100.0, 2: 100.0, 3: 180.0})
    found = read_run(folder.path)
    assert found is not None
    mesh = {rank: {"dp": rank // 2, "pp": rank % 2} for rank in range(4)}
    text = generate_latest(registry_of("77", found[0], mesh, {0, 1}, whole_job=True)).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def test_the_alerting_rules_are_valid_and_alert_as_their_tests_say() -> None:
    promtool = _promtool()
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", RULES.with_suffix(".test.yml").name],
        cwd=MONITORING, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_rules_and_the_dashboard_name_only_exported_metrics(tmp_path: Path) -> None:
    exported = _exported(tmp_path)
    assert exported == {
        "slurm_profile_step", "slurm_profile_step_seconds", "slurm_profile_memory_bytes",
        "slurm_profile_straggler_score", "slurm_profile_job_step_seconds", "slurm_profile_captures",
    }  # fmt: skip
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    named = {name for query in queries for name in _METRIC.findall(query)}
    assert named <= exported, named - exported
    assert named == exported  # every metric has a panel
    in_rules = set(_METRIC.findall(RULES.read_text()))
    assert in_rules and in_rules <= exported, in_rules - exported


def test_the_dashboards_panels_are_whole() -> None:
    """Each panel has a title, a place on the grid, a query on the dashboard's data source."""
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "job"}
    for panel in dashboard["panels"]:
        assert panel["title"] and {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all('slurm_job_id=~"$job"' in target["expr"] for target in panel["targets"]), panel["title"]
