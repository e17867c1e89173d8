"""``--auto-capture``'s trigger (jobs/runtime/auto_capture.py) on step logs written here: who it
captures, once per finding, and each bound that holds it back, in words; and the request's way
through the ranks (profiling/recording/capture.py) to the manifest."""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path

import msgspec
import pytest

from jobs.profiled_run import ProfiledRun
from jobs.runtime.auto_capture import AutoCapture, manifest_record
from profiling.analysis.run import run_map
from profiling.analysis.run.run_logs import read_run
from profiling.analysis.run.run_map import RunMap
from profiling.folder.layout import JobFolder
from profiling.folder.requests import read_requests, write_accepted, write_request
from profiling.recording.capture import CaptureWatcher
from profiling.recording.config import AutoCaptureConfig, ProfilerConfig
from profiling.recording.profiler import StepProfiler
from profiling.schema.manifest import CaptureRecord, CaptureTrigger
from slurm.common.mesh import parse_layout
from tests.step_logs import write_logs

ON = AutoCaptureConfig(enabled=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_of(
    folder: JobFolder,
    extra_ms: dict[int, Collection[int]],
    *,
    ranks: int = 4,
    steps: int = 100,
    extra: float = 60.0,
) -> RunMap:
    """The job's map, each rank 130 ms a step, ``extra_ms``'s ranks ``extra`` more in their steps."""
    write_logs(
        folder,
        lambda rank, step: 130.0 + (extra if step in extra_ms.get(rank, ()) else 0.0),
        ranks=ranks,
        steps=range(steps),
    )
    found = read_run(folder.path)
    assert found is not None
    return found[0]


def test_a_balanced_run_asks_for_nothing(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    trigger = AutoCapture(folder, ON, None)
    assert trigger.look(run_of(folder, {})) is None
    assert read_requests(folder) == []


def test_a_rank_slow_now_is_captured_once_with_a_typical_rank(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    trigger = AutoCapture(folder, ON, None)
    run = run_of(folder, {2: range(80, 100)})
    line = trigger.look(run)
    [request] = read_requests(folder)
    found = request.trigger
    assert found is not None
    assert (found.rank, found.first, found.last) == (2, 80, 99)
    assert found.slow_steps == 20 and found.ratio == pytest.approx(190 / 130, abs=0.05)
    assert found.slow_above == pytest.approx(1.2) and found.reference in {0, 1, 3} and found.neighbours == []
    assert request.selection().resolve(4) == {2, found.reference} and request.active == ON.active
    assert line == f"--auto-capture: capture 1 of ranks {request.ranks} asked for: {found.why}"
    assert found.why.startswith("rank 2 on node2 took 1.4") and "in 20 steps (80-99), above 1.20" in found.why
    assert "(the run's noise 0.0" in found.why and ") and 1.33; rank " in found.why
    # the same rank, still slow at the next look: the same finding, not a second capture
    assert trigger.look(run) is None and len(read_requests(folder)) == 1


def test_a_rank_a_little_slow_is_the_maps_not_a_capture(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    run = run_of(folder, {2: range(60, 100)}, extra=36.0)  # 1.28x: what a balanced job has shown
    assert [(s.rank, s.first) for s in run_map.segments(run)] == [(2, 60)]
    assert AutoCapture(folder, ON, None).look(run) is None
    assert read_requests(folder) == []


def test_a_slow_stretch_that_has_ended_is_the_reports_not_the_triggers(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    assert AutoCapture(folder, ON, None).look(run_of(folder, {2: range(20, 50)})) is None
    assert read_requests(folder) == []


def test_each_bound_holds_a_capture_back_and_says_so(tmp_path: Path) -> None:
    folder, clock = JobFolder(tmp_path, "1"), Clock()
    config = AutoCaptureConfig(enabled=True, max_captures=2, cooldown_s=300.0)
    trigger = AutoCapture(folder, config, None, clock=clock)
    assert trigger.look(run_of(folder, {2: range(80, 100)})) is not None
    clock.now += 10
    run = run_of(folder, {2: range(80, 100), 1: range(85, 100)})
    held = trigger.look(run)
    assert held is not None and held.startswith("--auto-capture: rank 1 on node1 took")
    assert held.endswith(
        "not yet captured: the last capture was 10 s ago, within the 300 s cool-down (it will be if "
        "still slow then)"
    )
    clock.now += 10
    assert trigger.look(run) is None  # said once
    clock.now += 300
    held = trigger.look(run)  # a wait passed, the next holds: the ranks have not taken capture 1 up
    assert held is not None and held.endswith(
        "not yet captured: capture 1 is not yet taken up by the ranks (it will be if still slow then)"
    )
    accepted = CaptureRecord(id=1, requested_at="now", first=97, last=99, ranks=[1, 2], within_run=True)
    write_accepted(folder, 1, accepted)
    # capture 1 records steps 97-99 now: the same wait, said once
    assert trigger.look(run_of(folder, {2: range(80, 100), 1: range(85, 100)}, steps=99)) is None
    # capture 1 recorded, rank 1 still slow: now it is captured
    asked = trigger.look(run_of(folder, {2: range(80, 110), 1: range(85, 110)}, steps=110))
    assert asked is not None and asked.startswith("--auto-capture: capture 2 of ranks ")
    assert "rank 1 on node1" in asked
    write_accepted(folder, 2, msgspec.structs.replace(accepted, id=2, first=105, last=107))
    clock.now += 300
    run = run_of(folder, {3: range(100, 120)}, steps=120)  # ranks 1 and 2 well again
    held = trigger.look(run)
    assert held is not None and held.endswith(
        "not captured: 2 captures taken, the most a job takes (--auto-capture-max 2)"
    )
    assert trigger.look(run) is None  # a bound that does not pass: rank 3's finding is closed


def test_a_later_finding_of_a_rank_once_held_back_is_said_again(tmp_path: Path) -> None:
    folder, clock = JobFolder(tmp_path, "1"), Clock()
    trigger = AutoCapture(folder, AutoCaptureConfig(enabled=True, cooldown_s=300.0), None, clock=clock)
    assert trigger.look(run_of(folder, {2: range(80, 100)})) is not None  # capture 1
    clock.now += 10
    held = trigger.look(run_of(folder, {1: range(85, 100)}))
    assert held is not None and "rank 1 on node1" in held and "the 300 s cool-down" in held
    write_accepted(
        folder, 1, CaptureRecord(id=1, requested_at="now", first=97, last=99, ranks=[1, 2], within_run=True)
    )
    clock.now += 300
    asked = trigger.look(run_of(folder, {1: range(85, 110)}, steps=110))
    assert asked is not None and asked.startswith("--auto-capture: capture 2 of ranks ")
    clock.now += 10  # rank 1 slow again, in a new stretch, within the cool-down of capture 2
    held = trigger.look(run_of(folder, {1: [*range(85, 110), *range(130, 150)]}, steps=150))
    assert (
        held is not None
        and "rank 1 on node1" in held
        and "not yet captured: the last capture was 10 s" in held
    )


def test_the_bytes_cap_counts_the_next_capture_before_it_is_taken(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    folder.path.mkdir(parents=True)
    (folder.path / "rank0_iter10_12.json").write_bytes(b" " * 3 * 2**20)  # a scheduled window: 1 MiB a step
    config = AutoCaptureConfig(enabled=True, max_bytes=5 * 2**20)
    held = AutoCapture(folder, config, None).look(run_of(folder, {2: range(80, 100)}))
    assert held is not None and held.endswith(
        "not captured: the captures' traces hold 0 MiB, and the next would take about 6 MiB more, past the "
        "cap of 5 MiB"
    )
    assert read_requests(folder) == []


def test_in_a_pipeline_the_reference_shares_the_stage_and_the_neighbours_come_along(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    dims = parse_layout("pp=4,dp=2")  # the mesh's order: ranks 0-1 are stage 0, 6-7 stage 3
    trigger = AutoCapture(folder, ON, dims)
    trigger.look(run_of(folder, {5: range(80, 100)}, ranks=8))
    [request] = read_requests(folder)
    assert request.trigger is not None
    assert (request.trigger.rank, request.trigger.reference, request.trigger.neighbours) == (5, 4, [3, 7])
    assert request.ranks == "3-5,7"
    assert "; rank 4 as its reference, its pipeline neighbours 3,7" in request.trigger.why


def test_the_manifest_keeps_the_bounds_and_the_rule() -> None:
    assert manifest_record(AutoCaptureConfig()) is None
    record = manifest_record(AutoCaptureConfig(enabled=True, max_captures=5))
    assert record is not None
    assert msgspec.to_builtins(record) == {
        "max_captures": 5,
        "cooldown_s": 300.0,
        "max_bytes": 2 * 2**30,
        "active": 3,
        "look_every_s": 1.0,
        "min_excess": 0.2,
        "noise_sigmas": 3.0,
        "min_steps": 10,
        "min_ratio": 1.3333,
    }


def test_profiled_run_takes_auto_capture_as_submit_py_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith(("SLURM_", "TORCHELASTIC_"))] + ["RANK", "WORLD_SIZE"]:
        monkeypatch.delenv(name, raising=False)  # one process: rank 0, its node's watcher its own
    with ProfiledRun(traces_root=tmp_path, profile_ranks="none", report=False, auto_capture=True) as run:
        assert run.publisher.running  # the trigger's process, with no metrics asked for
        for _ in range(3):
            run.step()
    assert not run.publisher.running
    manifest = json.loads(run.attempt.folder.manifest.read_text())
    assert manifest["profiler"]["auto_capture"]["max_captures"] == ON.max_captures
    assert manifest.get("captures") in (None, [])
    with ProfiledRun(traces_root=tmp_path / "off", profile_ranks="none", report=False) as run:
        assert not run.publisher.running
        run.step()


def test_the_ranks_record_an_automatic_capture_and_say_why(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    why = "rank 1 on node1 took 1.50x its peers' median CPU time per step"
    trigger = CaptureTrigger(
        rank=1, ratio=1.5, first=3, last=14, slow_steps=12, slow_above=1.2, noise=0.01, reference=0, why=why
    )
    (folder.capture).mkdir(parents=True)
    folder.capture_request(1).write_bytes(b"{half a reque")  # damaged: never taken for a free number
    request = write_request(folder, active=2, ranks="0,1", trigger=trigger)
    assert request.id == 2 and read_requests(folder) == [request]
    said: list[str] = []
    watcher = CaptureWatcher(
        folder,
        rank=1,
        world_size=2,
        agree=lambda _key, step: step,
        schedule_windows=[],
        log=said.append,
        poll_s=0,
    )
    config = ProfilerConfig(with_stack=False)
    profiler = StepProfiler(config, rank=1, steps=40, trace_dir=tmp_path, scheduled=False)
    watcher.after_step(5, profiler)
    [capture] = watcher.captures
    assert capture.trigger == trigger and capture.ranks == [0, 1]
    assert said == [
        f"capture 2: rank 1 records steps {capture.first}-{capture.last}, asked for by --auto-capture: {why}"
    ]
