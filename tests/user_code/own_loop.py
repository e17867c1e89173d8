"""A user's script with its own loop and launcher, and the toolkit's ``ProfiledRun`` around it:

    python -m torch.distributed.run --standalone --nproc_per_node 2 own_loop.py TRACES_ROOT
    srun --ntasks 2 python own_loop.py TRACES_ROOT        (MASTER_ADDR, MASTER_PORT set)

It makes its process group itself, from torchrun's variables or SLURM's. For the live tests:
``--steps``, ``--step-ms`` (a pause per step), ``--timeout`` (the group's and the run's) and
``--hang-when FILE`` (rank 1 stops making progress once FILE exists).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from jobs.profiled_run import ProfiledRun


def main(traces_root: str, steps: int, step_ms: float, timeout_s: float, hang_when: str | None) -> None:
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=timeout_s)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun: its variables, its store
        dist.init_process_group("gloo", timeout=timeout)
    else:  # srun: SLURM's variables
        address = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group(
            "gloo",
            init_method=address,
            rank=int(os.environ["SLURM_PROCID"]),
            world_size=int(os.environ["SLURM_NTASKS"]),
            timeout=timeout,
        )
    rank = dist.get_rank()
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.Tanh(), torch.nn.Linear(96, 3))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with ProfiledRun(
        profile_ranks="all",
        traces_root=traces_root,
        steps=steps,
        wait=2,
        warmup=1,
        active=3,
        dist_timeout_s=timeout_s,
    ) as run:
        for _ in range(steps):
            while hang_when and rank == 1 and os.path.exists(hang_when):
                time.sleep(1)  # stuck, as a data loader can be
            time.sleep(step_ms / 1e3)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.randn(8, 48)), torch.randint(0, 3, (8,))).backward()
            optimizer.step()
            run.step()
    dist.destroy_process_group()
    print(f"rank {rank}: traces in {run.trace_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("traces_root")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--step-ms", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--hang-when")
    args = parser.parse_args()
    main(args.traces_root, args.steps, args.step_ms, args.timeout, args.hang_when)
