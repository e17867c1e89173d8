"""The per-task entry point: identity -> process group -> profiled loop -> traces -> manifest.

submitit pickles a :class:`ProfiledTraining` and calls it in every task; the batch script
runs ``python -m jobs.task [options]`` under ``srun`` instead. Both end in :func:`run_task`.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any, Sequence

from jobs.spec import TaskConfig
from slurm.env import DistributedEnvError, DistributedIdentity, from_environment


class ProfiledTraining:
    """The callable submitit runs in each task."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self) -> dict[str, Any]:
        return run_task(self.config, from_environment())


def job_folder(traces_root: Path, identity: DistributedIdentity) -> Path:
    return traces_root / identity.job_id


def run_task(config: TaskConfig, identity: DistributedIdentity) -> dict[str, Any]:
    """Run one rank of the job; returns that rank's record (also gathered into the manifest)."""
    # Imported here so that ``submit.py`` (which imports this module to pickle the task)
    # never loads torch on a login node.
    import torch.distributed as dist

    from profiling.manifest import build_manifest, step_time_summary, utc_now, write_manifest
    from profiling.profiler import profiler_for_rank
    from workload.distributed import distributed
    from workload.resnet_ddp import train

    profiled = identity.rank in config.profiler.ranks.resolve(identity.world_size)  # fails before joining
    job_dir = job_folder(config.traces_root, identity)
    started_at = utc_now()
    with distributed(identity, timeout_s=config.dist_timeout_s, threads=config.workload.threads) as ctx:
        if identity.is_main:
            print(
                f"job {identity.job_id}: {identity.world_size} ranks on {identity.num_nodes} node(s), "
                f"{ctx.backend} on {ctx.device.type}, traces in {job_dir}",
                flush=True,
            )
        profiler = profiler_for_rank(
            config.profiler,
            rank=identity.rank,
            world_size=identity.world_size,
            steps=config.workload.steps,
            trace_dir=job_dir,
        )
        step_seconds = train(config.workload, ctx, profiler, log=lambda line: print(line, flush=True))
        record = {
            "rank": identity.rank,
            "local_rank": identity.local_rank,
            "node_rank": identity.node_rank,
            "hostname": socket.gethostname(),
            "node": identity.node_name or socket.gethostname(),
            "device": str(ctx.device),
            "threads": ctx.threads,
            "launcher": identity.source,
            "profiled": profiled,
            "trace_files": [path.name for path in profiler.trace_files],
            "step_time": step_time_summary(step_seconds),
            "started_at": started_at,
        }
        records: list[Any] = [None] * identity.world_size
        dist.all_gather_object(records, record)
        if identity.is_main:
            manifest = build_manifest(
                job={
                    "job_id": identity.job_id,
                    "restart_count": identity.restart_count,
                    "launcher": identity.source,
                    "nodes": identity.num_nodes,
                    "master": f"{identity.master_addr}:{identity.master_port}",
                    "backend": ctx.backend,
                },
                ranks=records,
                profiler=config.profiler,
                workload=config.workload,
                started_at=min(r["started_at"] for r in records),
                ended_at=utc_now(),
            )
            path = write_manifest(job_dir, manifest)
            print(f"wrote {len(manifest['trace_files'])} trace(s) and {path}", flush=True)
        dist.barrier()
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.task [workload and profiler options]``, one per task under ``srun``."""
    from jobs.cli import task_config_from_argv

    config = task_config_from_argv(argv, prog="python -m jobs.task")
    try:
        identity = from_environment()
        config.profiler.ranks.resolve(identity.world_size)
    except (DistributedEnvError, ValueError) as error:
        print(f"jobs.task: error: {error}", file=sys.stderr)
        return 2
    run_task(config, identity)
    return 0


if __name__ == "__main__":
    sys.exit(main())
