"""One attempt of the job on this rank: identity -> process group -> the workload's steps inside
a :class:`~jobs.profiled_run.ProfiledRun` -> traces -> manifest -> report.

An *attempt* is one run of the job (``SLURM_RESTART_COUNT`` = k): the first, or one requeued
after a preemption, which resumes from the saved step and writes to a folder of its own.
:func:`run_task` is what :mod:`jobs.task` calls in every task, under submitit or ``srun``.
Around the run it adds what only a loop of the toolkit's own can: the stop every rank agrees
on, the checkpoint, the injected faults, and a watchdog that ends a stuck rank.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch.distributed as dist

from jobs.profiled_run import ProfiledRun, RunSettings
from jobs.runtime.agreed_stop import AgreedStop
from jobs.runtime.distributed import DistributedContext, distributed, enable_flight_recorder
from jobs.runtime.live_metrics import Sinks
from jobs.runtime.output import say
from jobs.runtime.preemption import Preemption
from jobs.runtime.report_step import report_on
from jobs.spec import TaskConfig
from profiling.folder.layout import JobFolder
from profiling.schema.manifest import RankRecord
from slurm.identity import DistributedIdentity
from slurm.launchers import Launcher
from workload import checkpoint
from workload.contract import Workload, WorkloadContext, make_workload
from workload.loop import choose_dtype, run_steps


def run_task(
    config: TaskConfig, identity: DistributedIdentity, preemption: Preemption | None = None
) -> RankRecord:
    """Run one rank of the job; returns that rank's record (also gathered into the manifest)."""
    # settings that depend on the world size fail here, before joining the others
    config.profiler.ranks.resolve(identity.world_size)
    config.workload.check_ranks(identity.world_size)
    folder = JobFolder(config.traces_root, identity.job_id)
    enable_flight_recorder(folder.flight_recorder)
    with distributed(
        identity, timeout_s=config.dist_timeout_s, threads=config.workload.threads, device=config.device
    ) as ctx:
        dtype = choose_dtype(config.workload.dtype, ctx.device)
        workload = make_workload(config.workload.workload, _context(config, ctx, dtype[0]))
        start_step = _restore(workload, folder, identity, ctx) if identity.restart_count else 0
        run = ProfiledRun.of(_settings(config, dtype), identity, start_step=start_step)
        with run:
            if identity.is_main:
                _log_start(run, ctx, dtype)
            stop = AgreedStop(preemption, timeout_s=config.dist_timeout_s) if preemption else None
            with stop or contextlib.nullcontext():
                result = run_steps(
                    workload,
                    run,
                    config.workload,
                    rank=identity.rank,
                    start_step=start_step,
                    stop=stop,
                    log=say,
                )
            if result.stopped:
                assert preemption is not None
                _stop_for_requeue(run, workload, ctx, result.next_step)
                preemption.hand_over(identity, config.max_restarts)
            record = run.finish(analyse=config.report)
    # After leaving the group: the other ranks are done, and no collective timeout applies to
    # the report, which takes as long as the traces are big.
    if identity.is_main and config.report:  # every rank's step log, and traces if any
        commented = identity.job_id if config.job_comment and identity.launcher == Launcher.SLURM else None
        report_on(run.trace_dir, say, comment_on=commented)
    return record


def _context(config: TaskConfig, ctx: DistributedContext, dtype: str) -> WorkloadContext:
    return WorkloadContext(
        device=ctx.device,
        dtype=dtype,
        identity=ctx.identity,
        process_group=dist.group.WORLD,
        args=dict(config.workload.args),
        settings=config.workload,
        log=say,
    )


def _settings(config: TaskConfig, dtype: tuple[str, str]) -> RunSettings:
    return RunSettings(
        profiler=config.profiler,
        traces_root=config.traces_root,
        steps=config.workload.steps,
        dist_timeout_s=config.dist_timeout_s,
        report=False,  # run_task writes it once the group is left
        end_stuck_rank=True,  # under submitit's local executor nothing else would end it
        workload={"name": config.workload.workload, **dataclasses.asdict(config.workload)},
        about={"dtype": {"chosen": dtype[0], "why": dtype[1]}},
        metrics=Sinks(config.metrics_push, config.metrics_textfile, config.metrics_every_s),
        layout=config.workload.parallel,
    )


def _restore(
    workload: Workload, folder: JobFolder, identity: DistributedIdentity, ctx: DistributedContext
) -> int:
    """The step a requeued attempt resumes at, the workload's state loaded (0: nothing saved)."""
    resumed = checkpoint.restore_state(
        workload,
        state=folder.checkpoint_state(None if checkpoint.replicated(workload) else identity.rank),
        rng=folder.checkpoint_rng(identity.rank),
        device=ctx.device,
    )
    return resumed or 0


def _log_start(run: ProfiledRun, ctx: DistributedContext, dtype: tuple[str, str]) -> None:
    identity = ctx.identity
    resumed = (
        f", restart {identity.restart_count} resuming at step {run.start_step}"
        if identity.restart_count
        else ""
    )
    say(
        f"job {identity.job_id}: {identity.world_size} ranks on {identity.num_nodes} node(s), "
        f"{ctx.backend} on {ctx.device.type}, {dtype[0]} ({dtype[1]}){resumed}, "
        f"workload {run.settings.workload['name']}, traces in {run.trace_dir}"
    )


def _stop_for_requeue(run: ProfiledRun, workload: Workload, ctx: DistributedContext, next_step: int) -> None:
    """Preempted: save the state to resume from; the caller then requeues (or waits to be ended)."""
    identity, folder = ctx.identity, run.attempt.folder
    replicated = checkpoint.replicated(workload)
    checkpoint.save_state(
        workload,
        state=folder.checkpoint_state(None if replicated else identity.rank),
        rng=folder.checkpoint_rng(identity.rank),
        rank=identity.rank,
        device=ctx.device,
        next_step=next_step,
    )
    run.preempted(next_step)
    if identity.is_main:
        say(f"preempted: saved the state of step {next_step} to {folder.checkpoint}; requeueing")
    else:
        say(f"preempted: rank {identity.rank} saved its state of step {next_step}")
