"""The tutorial's training-step loop: ResNet18, fixed random batch, MSE loss, SGD, under DDP."""

from __future__ import annotations

import dataclasses
import itertools
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

from jobs.runtime.distributed import DistributedContext
from profiling.recording.profiler import StepProfiler
from slurm.basics import atomic_path
from workload.config import DTYPES, WorkloadConfig


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``--inject-failure``."""


class StopRequest(Protocol):
    """Read between steps; set (by a signal handler, say) to stop at the next step boundary."""

    requested: bool


@dataclasses.dataclass
class NeverStop:
    requested: bool = False


class StepTimer:
    """Per-step wall time without a per-step host sync: CUDA events on GPU, the clock on CPU."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._marks: list = []

    def mark(self) -> None:
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Durations between consecutive marks."""
        if self._cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(self._marks)]
        return [b - a for a, b in itertools.pairwise(self._marks)]


@dataclasses.dataclass(frozen=True)
class RunResult:
    step_seconds: list[float]
    next_step: int  # the first step not run: ``steps`` when the run finished
    stopped: bool  # True if a stop request ended it early


class Trainer:
    """Model, optimizer and the fixed batch of one rank; runs steps, saves and restores them."""

    def __init__(self, config: WorkloadConfig, ctx: DistributedContext) -> None:
        self.config, self.ctx = config, ctx
        device, dtype = ctx.device, getattr(torch, DTYPES[config.dtype])
        identity = ctx.identity
        torch.manual_seed(config.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
        self.module = torchvision.models.resnet18(num_classes=config.num_classes).to(
            device=device, dtype=dtype
        )
        self.model: torch.nn.Module = self.module
        if identity.is_distributed:
            device_ids = [device.index] if device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=device_ids)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)
        generator = torch.Generator(device=device).manual_seed(config.seed + 1 + identity.rank)
        shape = (config.batch_size, 3, config.image_size, config.image_size)
        self.inputs = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        self.target = torch.randn(
            (config.batch_size, config.num_classes), generator=generator, device=device, dtype=dtype
        )

    def run(
        self,
        profiler: StepProfiler,
        *,
        start_step: int = 0,
        stop: StopRequest | None = None,
        log: Callable[[str], None] = print,
        progress: Callable[[int], None] = lambda step: None,
    ) -> RunResult:
        """Run steps ``start_step`` .. ``steps - 1`` under ``profiler``, or until ``stop`` is requested.

        ``progress(step)`` is told when each step starts (the watchdog's clock)."""
        stop = stop or NeverStop()
        config, rank = self.config, self.ctx.identity.rank
        model, optimizer, inputs, target = self.model, self.optimizer, self.inputs, self.target
        failure, slowdown, hang = config.inject_failure, config.inject_slowdown, config.inject_hang
        fail_at = failure.step if failure is not None and failure.rank == rank else -1
        hang_at = hang.step if hang is not None and hang.rank == rank else -1
        extra_cpu_s = slowdown.ms / 1e3 if slowdown is not None and slowdown.rank == rank else 0.0
        log_progress = self.ctx.identity.is_main
        timer = StepTimer(self.ctx.device)
        step = start_step
        with profiler:
            timer.mark()
            for step in range(start_step, config.steps):
                if stop.requested:
                    return RunResult(timer.seconds(), step, stopped=True)
                progress(step)
                if step == fail_at:
                    raise InjectedFailure(f"rank {rank} failed at step {step} (--inject-failure)")
                if step == hang_at:
                    _hang_forever()
                if extra_cpu_s:
                    _burn_cpu(extra_cpu_s)
                optimizer.zero_grad(set_to_none=True)
                loss = F.mse_loss(model(inputs), target)
                loss.backward()
                optimizer.step()
                timer.mark()
                profiler.step()
                if log_progress and (step + 1) % config.log_every == 0:
                    log(f"step {step + 1}/{config.steps} loss {loss.item():.5f}")
        return RunResult(timer.seconds(), config.steps, stopped=False)

    def save(self, folder: Path, next_step: int) -> None:
        """Rank 0 saves model, optimizer and step; every rank saves its own RNG state."""
        folder.mkdir(parents=True, exist_ok=True)
        rank = self.ctx.identity.rank
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if self.ctx.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.ctx.device)
        with atomic_path(folder / f"rng-rank{rank}.pt") as temp:
            torch.save(rng, temp)
        if rank == 0:  # DDP keeps the weights identical on every rank
            state = {
                "step": next_step,
                "model": self.module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }
            with atomic_path(folder / STATE_FILE) as temp:
                torch.save(state, temp)

    def restore(self, folder: Path) -> int:
        """Load what :meth:`save` wrote; returns the step to resume at."""
        state = torch.load(folder / STATE_FILE, map_location=self.ctx.device, weights_only=True)
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        rng_file = folder / f"rng-rank{self.ctx.identity.rank}.pt"
        if rng_file.exists():
            rng = torch.load(rng_file, weights_only=False)
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
            if "cuda" in rng and self.ctx.device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"], self.ctx.device)
        return int(state["step"])


STATE_FILE = "state.pt"


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


def has_checkpoint(folder: Path) -> bool:
    return (folder / STATE_FILE).exists()
