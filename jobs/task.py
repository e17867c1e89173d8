"""The per-task entry point: identity -> process group -> profiled loop -> traces -> manifest.

submitit pickles a :class:`ProfiledTraining` and calls it in every task; the batch script
runs ``python -m jobs.task [options]`` under ``srun`` instead. Both end in :func:`run_task`.
"""

from __future__ import annotations

import resource
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from submitit.helpers import Checkpointable, DelayedSubmission

from jobs.preemption import Preemption
from jobs.spec import TaskConfig
from slurm.env import DistributedEnvError, DistributedIdentity, from_environment


class ProfiledTraining(Checkpointable):
    """The callable submitit runs in each task (and requeues after a preemption)."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self) -> dict[str, Any]:
        return run_task(self.config, from_environment(), Preemption().install())

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:
        # submitit calls this on rank 0 when the job is preempted, after run_task has saved the
        # training state to the job folder: the requeued job is this same callable, which
        # resumes from that state. None (no requeue) once --max-restarts is used up.
        if from_environment().restart_count >= self.config.max_restarts:
            return None
        return DelayedSubmission(self, *args, **kwargs)


def run_task(config: TaskConfig, identity: DistributedIdentity, preemption: Preemption | None = None) -> dict[str, Any]:
    """Run one rank of the job; returns that rank's record (also gathered into the manifest)."""
    # Imported here so that ``submit.py`` (which imports this module to pickle the task)
    # never loads torch on a login node.
    import torch.distributed as dist

    from profiling import manifest as manifests
    from profiling.profiler import profiler_for_rank
    from workload.distributed import distributed
    from workload.resnet_ddp import Trainer, has_checkpoint

    profiled = identity.rank in config.profiler.ranks.resolve(identity.world_size)  # fails before joining
    job_dir = config.traces_root / identity.job_id
    trace_dir = manifests.attempt_folder(job_dir, identity.restart_count)
    checkpoint_dir = job_dir / "checkpoint"
    started_at = manifests.utc_now()
    job = {
        "job_id": identity.job_id,
        "launcher": identity.source,
        "nodes": identity.num_nodes,
        "master": f"{identity.master_addr}:{identity.master_port}",
    }

    def log(line: str) -> None:
        print(line, flush=True)

    with distributed(identity, timeout_s=config.dist_timeout_s, threads=config.workload.threads) as ctx:
        job["backend"] = ctx.backend
        trainer = Trainer(config.workload, ctx)
        start_step = 0
        if identity.restart_count and has_checkpoint(checkpoint_dir):
            start_step = trainer.restore(checkpoint_dir)
        if identity.is_main:
            resumed = f", restart {identity.restart_count} resuming at step {start_step}" if identity.restart_count else ""
            log(
                f"job {identity.job_id}: {identity.world_size} ranks on {identity.num_nodes} node(s), "
                f"{ctx.backend} on {ctx.device.type}{resumed}, traces in {trace_dir}"
            )
        profiler = profiler_for_rank(
            config.profiler,
            rank=identity.rank,
            world_size=identity.world_size,
            steps=config.workload.steps,
            trace_dir=trace_dir,
            start_step=start_step,
        )

        def attempt(outcome: str, next_step: int, error: str | None = None) -> dict[str, Any]:
            return manifests.attempt_record(
                job_dir,
                restart_count=identity.restart_count,
                resumed_from_step=start_step,
                next_step=next_step,
                outcome=outcome,
                started_at=started_at,
                error=error,
            )

        try:
            result = trainer.run(profiler, start_step=start_step, stop=preemption, log=log)
        except Exception as error:
            if identity.is_main:  # what this attempt did write stays listed
                manifests.record_attempt(job_dir, job, attempt("failed", -1, f"{type(error).__name__}: {error}"))
            raise

        if result.stopped:
            assert preemption is not None
            trainer.save(checkpoint_dir, result.next_step)
            if identity.is_main:
                log(f"preempted: saved the state of step {result.next_step} to {checkpoint_dir}; requeueing")
                manifests.record_attempt(job_dir, job, attempt("preempted", result.next_step))
            preemption.hand_over(identity, config.max_restarts)

        record = {
            "rank": identity.rank,
            "local_rank": identity.local_rank,
            "node_rank": identity.node_rank,
            "node": identity.node_name or socket.gethostname(),
            "hostname": socket.gethostname(),
            "device": str(ctx.device),
            "threads": ctx.threads,
            "launcher": identity.source,
            "profiled": profiled,
            "trace_files": [path.name for path in profiler.trace_files],
            "step_time": manifests.step_time_summary(
                result.step_seconds,
                first_step=start_step,
                windows=profiler.windows,
            ),
            "trace_export_s": round(profiler.export_seconds, 4),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "started_at": started_at,
        }
        records: list[Any] = [None] * identity.world_size
        dist.all_gather_object(records, record)
        if identity.is_main:
            attempts = manifests.with_attempt(job_dir, attempt("completed", result.next_step))
            manifest = manifests.build_manifest(
                job={**job, "restart_count": identity.restart_count},
                ranks=records,
                attempts=attempts,
                profiler=config.profiler,
                workload=config.workload,
                started_at=min([attempts[0]["started_at"], *(r["started_at"] for r in records)]),
                ended_at=manifests.utc_now(),
            )
            path = manifests.write_manifest(job_dir, manifest)
            log(f"wrote {len(manifest['trace_files'])} trace(s) and {path}")
        dist.barrier()
    # After leaving the group: the other ranks are done, and no collective timeout applies to
    # the report, which takes as long as the traces are big.
    if identity.is_main and config.report and any(r["trace_files"] for r in records):
        _report(trace_dir, log)
    return record


def _report(trace_dir: Path, log: Callable[[str], None]) -> None:
    from profiling.report import build_report

    try:
        report = build_report(trace_dir)
    except Exception as error:  # the traces are what the job is for; a report can be redone
        log(f"report failed ({type(error).__name__}: {error}); rerun: python -m profiling.report {trace_dir}")
        return
    straggler = report["straggler"]
    log(
        f"report in {trace_dir / 'meta'} ({report['seconds']:.1f}s): straggler rank {straggler['rank']} "
        f"({straggler['over_median_pct']:+.1f}% compute over the median)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.task [workload and profiler options]``, one per task under ``srun``."""
    from jobs.cli import task_config_from_argv
    from workload.distributed import RendezvousError

    config = task_config_from_argv(argv, prog="python -m jobs.task")
    try:
        identity = from_environment()
        config.profiler.ranks.resolve(identity.world_size)
    except (DistributedEnvError, ValueError) as error:
        print(f"jobs.task: error: {error}", file=sys.stderr)
        return 2
    try:
        run_task(config, identity, Preemption().install())
    except RendezvousError as error:
        print(f"jobs.task: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
