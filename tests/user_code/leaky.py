"""A workload that leaks, and runs out of memory, for real: the tiny MLP, and a tensor of
``leak_mb`` (``--workload-arg leak_mb=N``, default 64) kept from every step on the ranks
``leak_ranks`` (``1,3``; default all), under an address-space limit set in this rank's process
alone once torch is loaded (``limit_mb`` above what it uses then, default 256; 0: none). The
allocator fails as it would on a full machine; nothing is faked."""

from __future__ import annotations

import resource
from typing import Any

import torch

from tests.user_code.tiny_mlp import TinyMLP


class Leaky(TinyMLP):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        ranks = context.args.get("leak_ranks")
        leaks = ranks is None or context.identity.rank in {int(rank) for rank in ranks.split(",")}
        self.leak_bytes = int(context.args.get("leak_mb", "64")) << 20 if leaks else 0
        self.kept: list[torch.Tensor] = []
        if int(context.args.get("limit_mb", "256")) == 0:
            return
        with open("/proc/self/statm") as handle:
            in_use = int(handle.read().split()[0]) * resource.getpagesize()  # the address space now
        limit = in_use + (int(context.args.get("limit_mb", "256")) << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))

    def step(self, step: int) -> torch.Tensor:
        if self.leak_bytes:
            self.kept.append(torch.ones(self.leak_bytes // 4))  # touched: resident, not only reserved
        return super().step(step)


def build(context: Any) -> Leaky:
    return Leaky(context)
