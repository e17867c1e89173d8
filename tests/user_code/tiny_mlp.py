"""A user's workload for ``submit.py --workload tests.user_code.tiny_mlp:build``: a small MLP
under DDP, its width from ``--workload-arg hidden=N``. Its state is kept per rank (it is not
``replicated``), so a requeue saves and restores every rank's own."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel


class TinyMLP:
    def __init__(self, context: Any) -> None:
        hidden = int(context.args.get("hidden", "64"))
        torch.manual_seed(context.settings.seed)
        self.module = torch.nn.Sequential(
            torch.nn.Linear(32, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4)
        ).to(context.device)
        self.model = DistributedDataParallel(self.module) if context.identity.is_distributed else self.module
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.inputs = torch.randn(16, 32, device=context.device)
        self.target = torch.randn(16, 4, device=context.device)
        self.steps_run = 0  # what this rank did: saved and restored as its own state
        self.rank, self.log = context.identity.rank, context.log
        context.log(f"tiny MLP, hidden {hidden}, rank {self.rank}")

    def step(self, step: int) -> torch.Tensor:
        self.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.inputs), self.target)
        loss.backward()
        self.optimizer.step()
        self.steps_run += 1
        return loss.detach()

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "steps_run": self.steps_run,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps_run = state["steps_run"]
        self.log(f"rank {self.rank} resumed its own state: {self.steps_run} steps run")


def build(context: Any) -> TinyMLP:
    return TinyMLP(context)


def broken(context: Any) -> TinyMLP:
    """A factory that fails on rank 1 only (the others wait for it in DDP's first broadcast)."""
    if context.identity.rank == 1:
        raise RuntimeError("rank 1 could not build its model (on purpose)")
    return TinyMLP(context)


def open_sockets() -> int:
    """This process's open sockets (Linux)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile
            pass
    return count


class CountingSockets(TinyMLP):
    """The tiny MLP, writing this rank's open sockets to ``--workload-arg out=DIR``: when it is
    built (the job's process group made, nothing of the toolkit's yet) and at its last step
    (the toolkit's profiler, step log, live capture and agreed stop all running)."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.out, self.last = Path(context.args["out"]), context.settings.steps - 1
        self.built = open_sockets()

    def step(self, step: int) -> torch.Tensor:
        loss = super().step(step)
        if step == self.last:
            counts = {"rank": self.rank, "built": self.built, "running": open_sockets()}
            (self.out / f"rank{self.rank}.json").write_text(json.dumps(counts))
        return loss


def counting_sockets(context: Any) -> CountingSockets:
    return CountingSockets(context)
