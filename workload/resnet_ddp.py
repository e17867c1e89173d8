"""The tutorial's training-step loop: ResNet18, fixed random batch, MSE loss, SGD, under DDP.

It runs under any :class:`Profiler` (the toolkit's is
:class:`profiling.recording.profiler.StepProfiler`), on the device and rank it is given, and
imports nothing of the toolkit but its shared basics.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

from slurm.basics import atomic_path
from workload.config import AUTO_DTYPE, DTYPES, WorkloadConfig


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``--inject-failure``."""


class Profiler(Protocol):
    """What the loop runs under: entered before the first step, told when each step ends
    (torch.profiler's shape)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> object: ...

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


class Trainer:
    """Model, optimizer and the fixed batch of one rank; runs steps, saves and restores them.

    ``dtype`` is a ``--dtype`` name already chosen for the device (see :func:`choose_dtype`);
    ``distributed``: wrap the model in DDP (the process group is up).
    """

    def __init__(
        self, config: WorkloadConfig, *, device: torch.device, dtype: str, rank: int, distributed: bool
    ) -> None:
        self.config, self.device, self.rank = config, device, rank
        torch_dtype = getattr(torch, DTYPES[dtype])
        torch.manual_seed(config.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
        self.module = torchvision.models.resnet18(num_classes=config.num_classes).to(
            device=device, dtype=torch_dtype
        )
        self.model: torch.nn.Module = self.module
        if distributed:
            device_ids = [device.index] if device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=device_ids)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)
        generator = torch.Generator(device=device).manual_seed(config.seed + 1 + rank)
        shape = (config.batch_size, 3, config.image_size, config.image_size)
        self.inputs = torch.randn(shape, generator=generator, device=device, dtype=torch_dtype)
        self.target = torch.randn(
            (config.batch_size, config.num_classes), generator=generator, device=device, dtype=torch_dtype
        )

    def run(
        self,
        profiler: Profiler,
        *,
        start_step: int = 0,
        stop: StopRequest | None = None,
        log: Callable[[str], None] = print,
        progress: Callable[[int], None] = lambda step: None,
    ) -> RunResult:
        """Run steps ``start_step`` .. ``steps - 1`` under ``profiler``, or until ``stop`` is requested.

        ``progress(step)`` is told when each step starts (the watchdog's clock)."""
        stop = stop or NeverStop()
        config, rank = self.config, self.rank
        model, optimizer, inputs, target = self.model, self.optimizer, self.inputs, self.target
        failure, slowdown, hang = config.inject_failure, config.inject_slowdown, config.inject_hang
        fail_at = failure.step if failure is not None and failure.rank == rank else -1
        hang_at = hang.step if hang is not None and hang.rank == rank else -1
        slow = slowdown if slowdown is not None and slowdown.rank == rank else None
        log_progress = rank == 0
        step = start_step
        with profiler:  # which times the steps: it is told when each one ends
            for step in range(start_step, config.steps):
                if stop.should_stop(step):
                    return RunResult(step, stopped=True)
                progress(step)
                if step == fail_at:
                    raise InjectedFailure(f"rank {rank} failed at step {step} (--inject-failure)")
                if step == hang_at:
                    _hang_forever()
                if slow is not None and slow.applies(step):
                    _burn_cpu(slow.ms / 1e3)
                optimizer.zero_grad(set_to_none=True)
                loss = F.mse_loss(model(inputs), target)
                loss.backward()
                optimizer.step()
                profiler.step()
                if log_progress and (step + 1) % config.log_every == 0:
                    log(f"step {step + 1}/{config.steps} loss {loss.item():.5f}")
        return RunResult(config.steps, stopped=False)

    def save(self, state: Path, rng: Path, next_step: int) -> None:
        """Rank 0 saves model, optimizer and step to ``state``; every rank its RNG state to ``rng``."""
        state.parent.mkdir(parents=True, exist_ok=True)
        rng_state = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if self.device.type == "cuda":
            rng_state["cuda"] = torch.cuda.get_rng_state(self.device)
        with atomic_path(rng) as temp:
            torch.save(rng_state, temp)
        if self.rank == 0:  # DDP keeps the weights identical on every rank
            saved = {
                "step": next_step,
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }
            with atomic_path(state) as temp:
                torch.save(saved, temp)

    def restore(self, state: Path, rng: Path) -> int:
        """Load what :meth:`save` wrote; returns the step to resume at."""
        saved = torch.load(state, map_location=self.device, weights_only=True)
        self.module.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        if rng.exists():
            rng_state = torch.load(rng, weights_only=False)
            torch.set_rng_state(rng_state["torch"])
            random.setstate(rng_state["python"])
            if "cuda" in rng_state and self.device.type == "cuda":
                torch.cuda.set_rng_state(rng_state["cuda"], self.device)
        return int(saved["step"])


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
