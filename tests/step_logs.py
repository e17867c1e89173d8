"""Step logs written for tests: each rank's times as a function of its rank and step, with noise
(:func:`write_logs`), or through the step timer itself (:func:`timed_step_logs`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from profiling.folder.layout import JobFolder
from profiling.folder.step_log import StepLogHeader, StepLogWriter
from profiling.recording.step_timing import StepTiming


def write_logs(
    folder: JobFolder,
    cpu_ms: Callable[[int, int], float],
    *,
    ranks: int = 4,
    steps: range = range(100),
    restart: int = 0,
    per_node: int = 2,
    noise: float = 3.0,
    steps_of: Callable[[int], range] | None = None,
) -> None:
    """A step log per rank, ``cpu_ms(rank, step)`` plus Gaussian noise; ``steps_of(rank)``: the
    rank's own steps, if not ``steps``."""
    rng = np.random.default_rng(restart)
    for rank in range(ranks):
        node = f"node{rank // per_node + 1}"
        head = StepLogHeader(rank=rank, world_size=ranks, restart=restart, node=node, gpu=False)
        writer = StepLogWriter(folder.step_log(rank, restart), head)
        for step in steps_of(rank) if steps_of else steps:
            writer.add(step, 400.0, cpu_ms(rank, step) + rng.normal(0, noise))
        writer.close()


def timed_step_logs(folder: JobFolder, step_ms: dict[int, float], steps: int = 30) -> None:
    """Each rank's step log, its steps ``step_ms`` apart: the CPU clock made to say so."""
    for rank, ms in step_ms.items():
        header = StepLogHeader(
            rank=rank,
            world_size=len(step_ms),
            restart=0,
            node=f"node{rank // 2 + 1}",
            gpu=False,
            memory="rss",
        )
        timing = StepTiming.open(folder.step_log(rank, 0), header)
        for step in range(steps):
            timing._cpu -= ms / 1e3  # the step's CPU time, without spending it
            timing._wall -= ms / 1e3
            timing.after_step(step)
        timing.close()
