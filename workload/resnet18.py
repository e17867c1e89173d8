"""The tutorial's workload: ResNet18 under DDP on a fixed random batch, MSE loss, SGD (lr 1e-3),
in the dtype chosen for the device. The default ``--workload``, written against the same
contract as any other (:mod:`workload.contract`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel

from workload.config import DTYPES
from workload.contract import WorkloadContext


class ResNet18:
    """Model, optimizer and the fixed batch of one rank."""

    replicated = True  # DDP keeps the weights identical on every rank: rank 0 saves them

    def __init__(self, context: WorkloadContext) -> None:
        settings, device = context.settings, context.device
        torch_dtype = getattr(torch, DTYPES[context.dtype])
        torch.manual_seed(settings.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
        self.module = torchvision.models.resnet18(num_classes=settings.num_classes).to(
            device=device, dtype=torch_dtype
        )
        self.model: torch.nn.Module = self.module
        if context.identity.is_distributed:
            device_ids = [device.index] if device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=device_ids)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=settings.lr)
        generator = torch.Generator(device=device).manual_seed(settings.seed + 1 + context.identity.rank)
        shape = (settings.batch_size, 3, settings.image_size, settings.image_size)
        self.inputs = torch.randn(shape, generator=generator, device=device, dtype=torch_dtype)
        self.target = torch.randn(
            (settings.batch_size, settings.num_classes), generator=generator, device=device, dtype=torch_dtype
        )

    def step(self, step: int) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(self.model(self.inputs), self.target)
        loss.backward()
        self.optimizer.step()
        return loss.detach()  # read only when logged: no host synchronisation per step

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def build(context: WorkloadContext) -> ResNet18:
    return ResNet18(context)
