"""The parallel LM (``--parallel dp=2,pp=2``) saved and restored as a requeued job does it
(``workload/checkpoint.py``: each rank its own ``state_dict``, ``torch.save`` / ``torch.load``):
4 ranks on gloo run 2 steps, save, run step 2; a fresh model loads the state and runs step 2
again. Prints ``rank R resumed loss A B`` on the last stage, A the first step 2's loss, B the
restored one's.

    python tests/scripts/parallel_lm_resume.py OUT_DIR PORT
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workload.config import WorkloadConfig  # noqa: E402
from workload.contract import WorkloadContext  # noqa: E402
from workload.parallel_lm import parallel_lm  # noqa: E402


def run(rank: int, world: int, out: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)  # this process's own rendezvous
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    identity = types.SimpleNamespace(rank=rank, world_size=world, is_distributed=True)
    settings = WorkloadConfig(parallel=(("dp", 2), ("pp", 2)), batch_size=8, dtype="fp32")
    context = WorkloadContext(
        device=torch.device("cpu"), dtype="fp32", identity=identity, process_group=None, args={},
        settings=settings, log=print,
    )  # fmt: skip
    first = parallel_lm(context)
    for step in range(2):
        first.step(step)
    saved = Path(out) / f"rank{rank}.pt"
    torch.save({"step": 2, "workload": first.state_dict()}, saved)
    before = first.step(2)
    again = parallel_lm(context)
    again.load_state_dict(torch.load(saved, weights_only=False)["workload"])
    after = again.step(2)
    if before is not None and after is not None:
        print(f"rank {rank} resumed loss {float(before)!r} {float(after)!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(4, sys.argv[1], sys.argv[2]), nprocs=4)
