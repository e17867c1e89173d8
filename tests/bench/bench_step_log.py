"""What a rank's step log costs a step, with and without its memory column: the hook
(:class:`profiling.recording.step_timing.StepTiming`) called as the loop calls it, 100 000
steps (its rows flushed every 5 s as in a job), the best of ``--rounds``; and the memory read
alone. On a CPU the memory is one ``pread`` of ``/proc/self/statm``; on CUDA two host-side
calls of the allocator's counters (no synchronisation), not measured here.

    .venv/bin/python tests/bench/bench_step_log.py
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiling.folder.step_log import StepLogHeader  # noqa: E402
from profiling.recording import step_timing  # noqa: E402
from profiling.recording.step_timing import StepTiming  # noqa: E402

STEPS = 100_000


def per_step_us(folder: Path, memory: bool) -> float:
    kind = "rss" if memory else ""
    header = StepLogHeader(rank=0, world_size=1, restart=0, node="bench", gpu=False, memory=kind)
    timing = StepTiming.open(folder / f"rank0.{kind}.steps", header)
    if not memory:
        timing._memory = lambda: math.nan  # the hook as it was before the memory column
    started = time.perf_counter()
    for step in range(STEPS):
        timing.after_step(step)
    elapsed = time.perf_counter() - started
    timing.close()
    return elapsed / STEPS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        times = {memory: min(per_step_us(folder, memory) for _ in range(rounds)) for memory in (False, True)}
        read = step_timing._ResidentMemory()
        started = time.perf_counter()
        for _ in range(STEPS):
            read()
        alone = (time.perf_counter() - started) / STEPS * 1e6
        read.close()
    print(f"the step log's hook, {STEPS} steps, best of {rounds}:")
    print(f"  without memory {times[False]:.2f} µs a step, with it {times[True]:.2f} µs")
    print(f"  the memory read alone {alone:.2f} µs; against a 130 ms step, {times[True] / 1300:.4f} %")


if __name__ == "__main__":
    main()
