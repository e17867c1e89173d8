"""The training-step loop, whatever the workload (:mod:`workload.contract`): one ``step`` of it
per training step, under any :class:`Profiler` (the toolkit's is
:class:`profiling.recording.profiler.StepProfiler`), with the faults ``--inject-*`` asks for;
and the dtype a device computes best. Imports nothing of the toolkit but its foundation (slurm/common/).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol

import torch

from workload.config import AUTO_DTYPE, WorkloadConfig
from workload.contract import Workload

_LOG = logging.getLogger(__name__)


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``--inject-failure``."""


class StepMarker(Protocol):
    """Told when each step ends: the toolkit's :class:`jobs.profiled_run.ProfiledRun`, or
    torch.profiler's ``profile``, entered by the caller around the loop."""

    def step(self) -> None: ...


class StopRequest(Protocol):
    """Asked at the start of every step whether to stop before it (a preemption, say).

    In a distributed run every rank must get the same answer for the same step, or one rank
    leaves while the others wait for it in the step's all-reduce."""

    def should_stop(self, step: int) -> bool: ...


class NeverStop:
    def should_stop(self, step: int) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class RunResult:
    next_step: int  # the first step not run: ``steps`` when the run finished
    stopped: bool  # True if a stop request ended it early


def run_steps(
    workload: Workload,
    marker: StepMarker,
    settings: WorkloadConfig,
    *,
    rank: int,
    start_step: int = 0,
    stop: StopRequest | None = None,
    log: Callable[[str], None] = _LOG.info,
) -> RunResult:
    """Run steps ``start_step`` .. ``steps - 1`` of ``workload``, ``marker`` told as each ends, or
    until ``stop`` is requested; the faults ``settings`` inject happen here, whatever the workload."""
    stop = stop or NeverStop()
    failure, slowdown, hang = settings.inject_failure, settings.inject_slowdown, settings.inject_hang
    fail_at = failure.step if failure is not None and failure.rank == rank else -1
    hang_at = hang.step if hang is not None and hang.rank == rank else -1
    slow = [s for s in slowdown if s.rank == rank]
    log_progress = rank == 0
    for step in range(start_step, settings.steps):
        if stop.should_stop(step):
            return RunResult(step, stopped=True)
        if step == fail_at:
            raise InjectedFailure(f"rank {rank} failed at step {step} (--inject-failure)")
        if step == hang_at:
            _hang_forever()
        if extra_ms := sum(s.ms for s in slow if s.applies(step)):
            _burn_cpu(extra_ms / 1e3)
        loss = workload.step(step)
        marker.step()
        if log_progress and (step + 1) % settings.log_every == 0:
            shown = f" loss {float(loss):.5f}" if loss is not None else ""
            log(f"step {step + 1}/{settings.steps}{shown}")
    return RunResult(settings.steps, stopped=False)


def choose_dtype(requested: str, device: torch.device) -> tuple[str, str]:
    """The ``--dtype`` to run on ``device``, and why.

    ``auto`` is the tutorial's bf16 where the device computes it natively, and fp32 elsewhere:
    on a CPU without AVX-512 BF16 or AMX a bf16 ResNet18 step takes about 40 times as long
    (5.1 s against 0.13 s at 32x32, batch 10, on AVX2), and the job seems to hang.
    """
    if requested != AUTO_DTYPE:
        return requested, f"--dtype {requested}"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", f"auto: {torch.cuda.get_device_name(device)} computes bf16 natively"
        return "fp32", f"auto: {torch.cuda.get_device_name(device)} has no native bf16"
    checks = (("AVX-512 BF16", "_is_avx512_bf16_supported"), ("AMX", "_is_amx_tile_supported"))
    native = [name for name, check in checks if getattr(torch.cpu, check, lambda: False)()]
    if native:
        return "bf16", f"auto: the CPU computes bf16 natively ({', '.join(native)})"
    return "fp32", "auto: the CPU has no native bf16 (no AVX-512 BF16 or AMX), where bf16 runs ~40x slower"


def _hang_forever() -> None:
    """``--inject-hang``: stop making progress, as a stuck data loader or a deadlock would."""
    while True:
        time.sleep(60)  # injected hang (--inject-hang): the watchdog ends this rank


def _burn_cpu(seconds: float) -> None:
    """Work on the CPU for ``seconds`` of this thread's CPU time (``--inject-slowdown``).

    CPU time, not wall time: with more ranks than cores, the delay stays what was asked for.
    """
    done = time.thread_time() + seconds
    while time.thread_time() < done:
        pass
