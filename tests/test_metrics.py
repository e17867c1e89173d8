"""Live metrics for Prometheus: what a node's publisher exports from step logs, that a server
down costs nothing but one line, and a real job's metrics through the real servers of Debian's
packages (Pushgateway, node_exporter's textfile collector, and a Prometheus scraping both),
queried in PromQL over Prometheus's HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from jobs.runtime.live_metrics import Sinks, publish, registry_of
from profiling.analysis.run.run_logs import read_run
from profiling.folder.layout import JobFolder
from tests.common import REPO, submitted_job_id
from tests.step_logs import timed_step_logs

SERVERS = ("prometheus", "prometheus-pushgateway", "prometheus-node-exporter")
# each way's series in Prometheus, by their job label: the pushed ones keep the pusher's
WAYS = {"pushgateway": "slurm-profile", "node_exporter": "node"}


def test_a_nodes_metrics_and_the_jobs_view(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "77")
    timed_step_logs(folder, {0: 100.0, 1: 100.0, 2: 100.0, 3: 180.0})
    run, _ = read_run(folder.path)
    mesh = {rank: {"dp": rank // 2, "pp": rank % 2} for rank in range(4)}
    asked = {"auto": 2}
    text = generate_latest(registry_of("77", run, mesh, {2, 3}, whole_job=True, captures=asked)).decode()
    series = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if not line.startswith("#")
    }
    own = 'dp="1",node="node2",pp="1",rank="3",slurm_job_id="77"'
    assert series[f"slurm_profile_step{{{own}}}"] == 29.0
    assert series[f"slurm_profile_step_seconds{{{own}}}"] == pytest.approx(0.180, rel=0.02)
    assert series[f"slurm_profile_memory_bytes{{{own}}}"] > 1e6  # this process's resident memory
    assert not any('rank="0"' in name for name in series if name.startswith("slurm_profile_step{"))  # node1's
    # the job's view: every rank's score against the median rank's (100 ms), and the job's step
    assert series[f"slurm_profile_straggler_score{{{own}}}"] == pytest.approx(1.8, rel=0.02)
    zero = 'dp="0",node="node1",pp="0",rank="0",slurm_job_id="77"'
    assert series[f"slurm_profile_straggler_score{{{zero}}}"] == pytest.approx(1.0, rel=0.02)
    assert series['slurm_profile_job_step_seconds{slurm_job_id="77"}'] == pytest.approx(0.100, rel=0.02)
    assert series['slurm_profile_captures{by="auto",slurm_job_id="77"}'] == 2.0
    assert series['slurm_profile_captures{by="request",slurm_job_id="77"}'] == 0.0


def test_a_server_down_costs_one_line(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "78")
    timed_step_logs(folder, {0: 50.0, 1: 50.0})
    run, _ = read_run(folder.path)
    registry = registry_of("78", run, {}, {0, 1}, whole_job=True)
    started = time.monotonic()
    lines = publish(registry, Sinks(push_url=f"http://127.0.0.1:{_free_port()}"), "78", "node1", timeout_s=2)
    assert len(lines) == 1 and lines[0].startswith("--metrics-push http://127.0.0.1:"), lines
    assert time.monotonic() - started < 2.5
    # the publisher's process: said once however often it fails, and its textfile gone at the end
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    publisher = subprocess.Popen(
        [sys.executable, "-m", "jobs.commands.metrics", str(folder.path), "--node", "node1", "--job", "78",
         "--ranks", "0-1", "--whole-job", "--every", "1", "--push", f"http://127.0.0.1:{_free_port()}",
         "--textfile", str(textfiles)],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not list(textfiles.glob("*.prom")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.name for p in textfiles.glob("*.prom")] == ["slurm_profile_78_node1.prom"]
        time.sleep(2.5)  # two more rounds, failing
    finally:
        publisher.send_signal(signal.SIGTERM)
        _, err = publisher.communicate(timeout=30)
    assert publisher.returncode == 0
    assert err.count("metrics not published: --metrics-push") == 1, err
    assert list(textfiles.iterdir()) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.read()


def _ready(url: str, process: subprocess.Popen, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{process.args[0]} ended: {process.returncode}"
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {limit_s} s")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Pushgateway, node_exporter (its textfile collector alone) and Prometheus scraping both
    every second, on loopback ports; stopped after."""
    missing = [name for name in SERVERS if shutil.which(name) is None]
    if missing:
        why = f"{', '.join(missing)} not installed. HINT: apt-get install {' '.join(SERVERS)}"
        if os.environ.get("REQUIRE_PROMETHEUS"):  # CI: a missing server fails, never skips
            pytest.fail(f"REQUIRE_PROMETHEUS is set and {why}")
        pytest.skip(why)
    push, node, prom = _free_port(), _free_port(), _free_port()
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        # the pushed series keep their job label (slurm-profile), as Pushgateway's docs ask
        "  - {job_name: pushgateway, honor_labels: true,\n"
        f"     static_configs: [{{targets: ['127.0.0.1:{push}']}}]}}\n"
        f"  - {{job_name: node, static_configs: [{{targets: ['127.0.0.1:{node}']}}]}}\n"
    )
    started = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for command in (
            ["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{push}"],
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node}",
             "--collector.disable-defaults", "--collector.textfile",
             f"--collector.textfile.directory={textfiles}"],
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom}"],
        )
    ]  # fmt: skip
    try:
        for url, process in zip(
            (
                f"http://127.0.0.1:{push}/-/ready",
                f"http://127.0.0.1:{node}/metrics",
                f"http://127.0.0.1:{prom}/-/ready",
            ),
            started,
            strict=True,
        ):
            _ready(url, process)
        yield {
            "push": f"http://127.0.0.1:{push}",
            "textfiles": str(textfiles),
            "prometheus": f"http://127.0.0.1:{prom}",
        }
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _recent(metric: str, job: str) -> str:
    return f'max_over_time(slurm_profile_{metric}{{job="{job}"}}[1m])'


def _query(prometheus: str, promql: str) -> dict[str, float]:
    """rank -> value, of an instant query over the HTTP API."""
    answer = json.loads(_get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert answer["status"] == "success", answer
    return {found["metric"]["rank"]: float(found["value"][1]) for found in answer["data"]["result"]}


def test_a_jobs_metrics_reach_prometheus_through_both_ways(
    servers: dict[str, str], traces_root: Path
) -> None:
    """A local job of 2 ranks, rank 1 slowed by 60 ms a step, publishing every second while it
    runs: Prometheus has rank 1's step time, higher than rank 0's, from the Pushgateway and from
    node_exporter; the textfile is gone at the end."""
    job = subprocess.Popen(
        [sys.executable, str(REPO / "submit.py"), "--cluster", "local", "--nodes", "1", "--gpus", "2",
         "--profile-ranks", "none", "--no-report", "--wait", "--traces-root", str(traces_root),
         "--workload", "tests.user_code.tiny_mlp:build", "--steps", "250", "--dtype", "fp32",
         "--threads-per-rank", "1",
         "--inject-slowdown", "1:60", "--metrics-every", "1", "--metrics-push", servers["push"],
         "--metrics-textfile", servers["textfiles"]],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        found: dict[str, dict[str, float]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and job.poll() is None:
            found = {
                way: _query(servers["prometheus"], _recent("step_seconds", job)) for way, job in WAYS.items()
            }
            if all(len(ranks) == 2 for ranks in found.values()):
                break
            time.sleep(1)
        score = _query(servers["prometheus"], _recent("straggler_score", WAYS["pushgateway"]))
    finally:
        output, _ = job.communicate(timeout=120)
    assert job.returncode == 0, output
    for way, ranks in found.items():
        assert set(ranks) == {"0", "1"}, (way, found, output)
        assert ranks["1"] >= 0.05 and ranks["1"] > 2 * ranks["0"], (way, ranks)
    assert score["1"] > 1.5 > score["0"], score
    assert list(Path(servers["textfiles"]).iterdir()) == []  # removed at the job's end
    assert submitted_job_id(output) and "metrics not published" not in output
