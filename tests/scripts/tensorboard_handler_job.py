"""A user's script that knows nothing of the toolkit: a small model under DDP (gloo), profiled by
torch.profiler with torch's own ``tensorboard_trace_handler``, which names the files itself.

    python -m torch.distributed.run --nproc_per_node 2 tensorboard_handler_job.py OUT [--per-worker] [--gzip]

``--per-worker``: each rank writes to ``OUT/worker<rank>/``, else all to ``OUT``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-worker", action="store_true")
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = args.out / f"worker{rank}" if args.per_worker else args.out
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, target = torch.randn(32, 64), torch.randn(32, 8)
    handler = tensorboard_trace_handler(str(out), use_gzip=args.gzip)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=handler,
    ) as prof:
        for _ in range(6):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(inputs), target).backward()
            optimizer.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} done", flush=True)


if __name__ == "__main__":
    main()
    # past the interpreter's teardown: torch 2.14 aborted there once in CI ("terminate called
    # without an active exception", a thread of its own still joinable), after the traces and the
    # line above were written; what this script is for was done
    os._exit(0)
