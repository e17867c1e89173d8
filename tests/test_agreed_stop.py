"""The ranks agree on the step to stop at, whichever rank the preemption signal reaches first.

Three real processes in a gloo group, each running a loop with one all-reduce per step as DDP
does; the "signal" (the flag a real handler sets) comes to each rank at a step of its own,
mid-step, as it would from SLURM."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from jobs.runtime.agreed_stop import AgreedStop
from jobs.runtime.preemption import Preemption

WORLD = 3
STEPS = 40
# rank -> the step during which its signal comes (None: never), per scenario
SCENARIOS = {
    "one rank signalled": {1: 5},
    "signalled at different steps": {0: 3, 1: 20, 2: 9},
    "signalled in the same step": {0: 12, 1: 12, 2: 12},
    "never signalled": {},
}


def _run_ranks(
    target: Callable[[int, str, multiprocessing.Queue], None], world: int, tmp_path: Path, answers: int
) -> tuple[list[tuple], list[int | None]]:
    """Start ``world`` processes of ``target``; the first ``answers`` they report, and their exit codes."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    ranks = [context.Process(target=target, args=(r, str(tmp_path / "store"), queue)) for r in range(world)]
    for process in ranks:
        process.start()
    try:
        got = [queue.get(timeout=120) for _ in range(answers)]
    finally:
        for process in ranks:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return got, [process.exitcode for process in ranks]


def _join(rank: int, world: int, store_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)


def _rank(rank: int, store_path: str, answers: multiprocessing.Queue) -> None:
    _join(rank, WORLD, store_path)
    try:
        for name, signals in SCENARIOS.items():
            flag = Preemption()  # not installed: the test raises the flag where a handler would
            stopped_at = None
            with AgreedStop(flag, timeout_s=30, name=f"agreed-stop {name}") as stop:
                for step in range(STEPS):
                    if stop.should_stop(step):
                        stopped_at = step
                        break
                    if signals.get(rank) == step:
                        flag.requested = True
                    time.sleep(0.002 * ((step + rank) % 3))  # the ranks drift apart within a step
                    dist.all_reduce(torch.ones(4))  # the step's gradient all-reduce
            answers.put((name, rank, stopped_at))
    finally:
        dist.destroy_process_group()


def test_every_rank_stops_before_the_same_step(tmp_path: Path) -> None:
    got, exit_codes = _run_ranks(_rank, WORLD, tmp_path, answers=WORLD * len(SCENARIOS))
    assert exit_codes == [0] * WORLD
    stopped = {(name, rank): step for name, rank, step in got}
    # the flag raised during step s is read at s + 1 and acted on, by every rank, at s + 2
    expected = {
        "one rank signalled": 7,
        "signalled at different steps": 5,
        "signalled in the same step": 14,
        "never signalled": None,
    }
    assert stopped == {(name, rank): step for name, step in expected.items() for rank in range(WORLD)}


def test_a_single_process_stops_on_its_own_flag() -> None:
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        flag = Preemption()
        with AgreedStop(flag, timeout_s=5) as stop:
            assert not stop.should_stop(0)
            flag.requested = True
            assert stop.should_stop(1)
    finally:
        dist.destroy_process_group()


def test_a_rank_that_left_is_an_error_not_a_hang(tmp_path: Path) -> None:
    """A rank gone mid-run (killed, say) ends the others' agreement with an error within the
    timeout: gloo's, where the closed connection is seen, else the agreement's own."""
    started = time.monotonic()
    [outcome], _ = _run_ranks(_leaver, 2, tmp_path, answers=1)
    assert outcome[0] == "error", outcome
    assert "Connection" in outcome[2] or "did not agree within 5s (--dist-timeout)" in outcome[2], outcome
    assert time.monotonic() - started < 60


def _leaver(rank: int, store_path: str, answers: multiprocessing.Queue) -> None:
    _join(rank, 2, store_path)
    with AgreedStop(Preemption(), timeout_s=5) as stop:
        stop.should_stop(0)
        if rank == 1:
            os._exit(0)  # leaves without a word, as a SIGKILLed rank does
        try:
            for step in range(1, 50):
                stop.should_stop(step)
                time.sleep(0.05)
            answers.put(("no error",))
        except Exception as error:
            answers.put(("error", type(error).__name__, str(error)[:200]))
