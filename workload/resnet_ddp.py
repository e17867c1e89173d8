"""The tutorial's training-step loop: ResNet18, fixed random batch, MSE loss, SGD, under DDP."""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

from profiling.profiler import StepProfiler
from workload.config import WorkloadConfig
from workload.distributed import DistributedContext

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class InjectedFailure(RuntimeError):
    """Raised on purpose by ``--inject-failure``."""


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
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self._marks, self._marks[1:])]
        return [b - a for a, b in zip(self._marks, self._marks[1:])]


def train(
    config: WorkloadConfig,
    ctx: DistributedContext,
    profiler: StepProfiler,
    log: Callable[[str], None] = print,
) -> list[float]:
    """Run ``config.steps`` training steps under ``profiler``; returns each step's seconds."""
    device, dtype = ctx.device, DTYPES[config.dtype]
    identity = ctx.identity
    torch.manual_seed(config.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = torchvision.models.resnet18(num_classes=config.num_classes).to(device=device, dtype=dtype)
    if identity.is_distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)

    generator = torch.Generator(device=device).manual_seed(config.seed + 1 + identity.rank)
    shape = (config.batch_size, 3, config.image_size, config.image_size)
    inputs = torch.randn(shape, generator=generator, device=device, dtype=dtype)
    target = torch.randn((config.batch_size, config.num_classes), generator=generator, device=device, dtype=dtype)

    fail_at = config.fail_step if config.fail_rank == identity.rank else -1
    timer = StepTimer(device)
    with profiler:
        timer.mark()
        for step in range(config.steps):
            if step == fail_at:
                raise InjectedFailure(f"rank {identity.rank} failed at step {step} (--inject-failure)")
            optimizer.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(inputs), target)
            loss.backward()
            optimizer.step()
            timer.mark()
            profiler.step()
            if identity.is_main and (step + 1) % config.log_every == 0:
                log(f"step {step + 1}/{config.steps} loss {loss.item():.5f}")
    return timer.seconds()
