"""What a preempted job resumes from: every rank's workload state (or rank 0's alone, where it
is the same on every rank: ``Workload.replicated``), the step to resume at, and every rank's
random number generators."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from slurm.common.files import atomic_path
from workload.contract import Workload


def replicated(workload: Workload) -> bool:
    return bool(getattr(workload, "replicated", False))


def save_state(
    workload: Workload, *, state: Path, rng: Path, rank: int, device: torch.device, next_step: int
) -> None:
    """Write this rank's share of the checkpoint: its RNG state, and the workload's state unless
    it is replicated and this is not rank 0. ``state``: where this rank's state goes."""
    state.parent.mkdir(parents=True, exist_ok=True)
    rng_state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        rng_state["cuda"] = torch.cuda.get_rng_state(device)
    with atomic_path(rng) as temp:
        torch.save(rng_state, temp)
    if rank == 0 or not replicated(workload):
        with atomic_path(state) as temp:
            torch.save({"step": next_step, "workload": workload.state_dict()}, temp)


def restore_state(workload: Workload, *, state: Path, rng: Path, device: torch.device) -> int | None:
    """Load what :func:`save_state` wrote into ``workload``; the step to resume at (None: nothing saved)."""
    if not state.exists():
        return None
    saved = torch.load(state, map_location=device, weights_only=False)
    workload.load_state_dict(saved["workload"])
    if rng.exists():
        rng_state = torch.load(rng, weights_only=False)
        torch.set_rng_state(rng_state["torch"])
        random.setstate(rng_state["python"])
        if "cuda" in rng_state and device.type == "cuda":
            torch.cuda.set_rng_state(rng_state["cuda"], device)
    return int(saved["step"])
