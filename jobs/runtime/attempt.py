"""One attempt of the job on this rank: identity -> process group -> profiled loop -> traces ->
manifest -> report.

An *attempt* is one run of the job (``SLURM_RESTART_COUNT`` = k): the first, or one requeued
after a preemption, which resumes from the saved step and writes to a folder of its own.
:func:`run_task` is what :mod:`jobs.task` calls in every task, under submitit or ``srun``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
from typing import Any

import torch.distributed as dist

from jobs.runtime.agreed_stop import AgreedStop
from jobs.runtime.distributed import DistributedContext, distributed, enable_flight_recorder
from jobs.runtime.preemption import Preemption
from jobs.runtime.records import Attempt, gather_and_write_manifest, log, rank_record, write_running
from jobs.runtime.report_step import analyse_own_traces, report_on
from jobs.runtime.watchdog import Watchdog
from jobs.spec import TaskConfig
from profiling.analysis import hang
from profiling.folder import manifest
from profiling.folder.layout import JobFolder
from profiling.folder.shared import UnsharedFolderError, leave_marker, unseen_ranks, unshared_error
from profiling.folder.step_log import StepLogHeader
from profiling.recording.capture import CaptureWatcher
from profiling.recording.profiler import StepHook, StepProfiler, scheduled_windows
from profiling.recording.slowest import SlowestRank
from profiling.recording.step_timing import StepTiming
from slurm.basics import utc_now
from slurm.env import DistributedIdentity
from workload.resnet_ddp import Trainer, choose_dtype

# A rank with no progress for --dist-timeout plus this long is ended by its watchdog: by then
# the others' collectives have timed out, and nothing but this rank keeps the job alive.
WATCHDOG_GRACE_S = 30.0


def run_task(
    config: TaskConfig, identity: DistributedIdentity, preemption: Preemption | None = None
) -> dict[str, Any]:
    """Run one rank of the job; returns that rank's record (also gathered into the manifest)."""
    # settings that depend on the world size fail here, before joining the others
    profiled = identity.rank in config.profiler.ranks.resolve(identity.world_size)
    config.workload.check_ranks(identity.world_size)
    folder = JobFolder(config.traces_root, identity.job_id)
    attempt = Attempt(config, identity, folder, started_at=utc_now())
    enable_flight_recorder(folder.hang)
    with distributed(
        identity, timeout_s=config.dist_timeout_s, threads=config.workload.threads, device=config.device
    ) as ctx:
        _check_shared_folder(attempt, ctx)
        dtype = choose_dtype(config.workload.dtype, ctx.device)
        trainer = Trainer(
            config.workload,
            device=ctx.device,
            dtype=dtype[0],
            rank=identity.rank,
            distributed=identity.is_distributed,
        )
        if identity.restart_count and folder.checkpoint_state.exists():
            resumed = trainer.restore(folder.checkpoint_state, folder.checkpoint_rng(identity.rank))
            attempt = dataclasses.replace(attempt, start_step=resumed)
        if identity.is_main:
            _log_start(attempt, ctx, dtype)
            write_running(attempt)
        watchdog = _watchdog(attempt)
        timing = _step_timing(attempt, ctx)
        profiler, hooks = _profiler(attempt, ctx, profiled, timing)
        stop = AgreedStop(preemption, timeout_s=config.dist_timeout_s) if preemption else None
        try:
            with watchdog, stop or contextlib.nullcontext():
                result = trainer.run(
                    profiler,
                    start_step=attempt.start_step,
                    stop=stop,
                    log=log,
                    progress=watchdog.progress,
                )
        except Exception as error:
            timing.close(failed=True)
            _on_failure(attempt, ctx.backend, watchdog, error)
            raise
        timing.close()
        if result.stopped:
            assert preemption is not None
            _stop_for_requeue(attempt, trainer, ctx.backend, result.next_step, preemption)
        record = rank_record(attempt, ctx, profiler, timing, profiled, dtype)
        record["step_log"] = timing.manifest_record()
        if config.report and profiler.trace_files:
            record["analysis"] = analyse_own_traces(
                profiler.trace_files, reader=_reader(identity), limit_s=config.dist_timeout_s / 2
            )
        gather_and_write_manifest(attempt, ctx, record, result.next_step, hooks)
    # After leaving the group: the other ranks are done, and no collective timeout applies to
    # the report, which takes as long as the traces are big.
    if identity.is_main and config.report:  # every rank's step log, and traces if any
        report_on(attempt.trace_dir, log)
    return record


def _reader(identity: DistributedIdentity) -> str:
    return f"rank {identity.rank} on {identity.node_name or socket.gethostname()} (pid {os.getpid()})"


def _check_shared_folder(attempt: Attempt, ctx: DistributedContext) -> None:
    """Stop every rank at once, with one line, if some cannot see the job folder rank 0 sees."""
    identity = attempt.identity
    if identity.world_size == 1:
        return
    node = identity.node_name or socket.gethostname()
    written = leave_marker(attempt.folder, identity.rank, node)
    # each rank's (node, job folder, write error), once every marker is written
    where = ctx.gather((node, str(attempt.folder.path), written))
    message: list[str | None] = [None]
    if identity.is_main:
        missing = unseen_ranks(attempt.folder, identity.world_size)
        message[0] = unshared_error(attempt.folder, missing, where) if missing else None
    dist.broadcast_object_list(message, src=0)
    if message[0] is not None:
        raise UnsharedFolderError(message[0])


def _step_timing(attempt: Attempt, ctx: DistributedContext) -> StepTiming:
    """This rank's step log, started now: just before the first step."""
    identity = attempt.identity
    header = StepLogHeader(
        rank=identity.rank,
        world_size=identity.world_size,
        restart=identity.restart_count,
        node=identity.node_name or socket.gethostname(),
        gpu=ctx.device.type == "cuda",
    )
    path = attempt.folder.step_log(identity.rank, identity.restart_count)
    return StepTiming.open(path, header, cuda=header.gpu)


def _profiler(
    attempt: Attempt, ctx: DistributedContext, profiled: bool, timing: StepTiming
) -> tuple[StepProfiler, list[StepHook]]:
    """This rank's profiler, with its hooks: the step log first (its clocks read before the
    others' work), then those that add windows while the job runs."""
    config, identity = attempt.config, attempt.identity
    steps = config.workload.steps
    schedule = scheduled_windows(config.profiler, steps, attempt.start_step)
    hooks: list[StepHook] = [
        CaptureWatcher(
            attempt.folder,
            rank=identity.rank,
            world_size=identity.world_size,
            agree=ctx.agree,
            schedule_windows=schedule,
            log=log,
        ),
    ]
    if config.profiler.ranks.slowest:
        hooks.append(
            SlowestRank(
                rank=identity.rank, recording=profiled, windows=schedule, gather=ctx.gather, timing=timing
            )
        )
    profiler = StepProfiler(
        config.profiler,
        rank=identity.rank,
        steps=steps,
        trace_dir=attempt.trace_dir,
        cuda=ctx.device.type == "cuda",
        start_step=attempt.start_step,
        scheduled=profiled,
        hooks=[timing, *hooks],
    )
    return profiler, hooks  # the job-wide ones, for the manifest (the step log is per rank)


def _watchdog(attempt: Attempt) -> Watchdog:
    """Dumps at half the collective timeout, before the others give up; ends the rank a grace after it."""
    timeout = attempt.config.dist_timeout_s
    return Watchdog(
        rank=attempt.identity.rank,
        node=attempt.identity.node_name,
        dump_path=attempt.folder.hang_dump(attempt.identity.rank),
        dump_after_s=max(5.0, timeout / 2),
        exit_after_s=timeout + WATCHDOG_GRACE_S,
    )


def _on_failure(attempt: Attempt, backend: str, watchdog: Watchdog, error: Exception) -> None:
    """Keep what this attempt wrote listed; after a collective timed out, say where this rank was."""
    timed_out = isinstance(error, dist.DistError) or "timed out" in str(error).lower()
    if timed_out:
        first_line = next(iter(str(error).strip().splitlines()), "")
        watchdog.dump(f"{type(error).__name__}: {first_line}", error)
    if not attempt.identity.is_main:
        return
    manifest.record_attempt(
        attempt.folder,
        attempt.facts(backend),
        attempt.record("failed", -1, f"{type(error).__name__}: {error}"),
    )
    attempt.folder.running.unlink(missing_ok=True)
    # The ranks' first dumps, at half the timeout, are there by now; a batch job has no
    # ``--wait`` to print the verdict, so rank 0 puts it in its own error log.
    verdict = hang.verdict_lines(attempt.folder) if timed_out else None
    if verdict:
        print("\n".join(verdict), file=sys.stderr, flush=True)


def _log_start(attempt: Attempt, ctx: DistributedContext, dtype: tuple[str, str]) -> None:
    identity = attempt.identity
    resumed = (
        f", restart {identity.restart_count} resuming at step {attempt.start_step}"
        if identity.restart_count
        else ""
    )
    log(
        f"job {identity.job_id}: {identity.world_size} ranks on {identity.num_nodes} node(s), "
        f"{ctx.backend} on {ctx.device.type}, {dtype[0]} ({dtype[1]}){resumed}, traces in {attempt.trace_dir}"
    )


def _stop_for_requeue(
    attempt: Attempt, trainer: Trainer, backend: str, next_step: int, preemption: Preemption
) -> None:
    """Preempted: save the state to resume from, then requeue (or wait to be ended by the requeue)."""
    folder = attempt.folder
    trainer.save(folder.checkpoint_state, folder.checkpoint_rng(attempt.identity.rank), next_step)
    if attempt.identity.is_main:
        log(f"preempted: saved the state of step {next_step} to {folder.checkpoint}; requeueing")
        manifest.record_attempt(folder, attempt.facts(backend), attempt.record("preempted", next_step))
        folder.running.unlink(missing_ok=True)  # the next attempt writes its own
    else:
        log(f"preempted: rank {attempt.identity.rank} saved its state of step {next_step}")
    preemption.hand_over(attempt.identity, attempt.config)
