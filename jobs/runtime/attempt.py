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
import resource
import socket
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

from jobs.runtime.agreed_stop import AgreedStop
from jobs.runtime.distributed import DistributedContext, distributed, enable_flight_recorder
from jobs.runtime.preemption import Preemption
from jobs.runtime.report_step import analyse_own_traces, report_on
from jobs.runtime.watchdog import Watchdog
from jobs.spec import TaskConfig
from profiling import hang
from profiling.folder import manifest
from profiling.folder.job_state import process_start
from profiling.folder.layout import JobFolder
from profiling.folder.shared import UnsharedFolderError, leave_marker, unseen_ranks, unshared_error
from profiling.folder.step_log import StepLogHeader
from profiling.recording.capture import CaptureWatcher
from profiling.recording.profiler import StepHook, StepProfiler, describe, scheduled_windows
from profiling.recording.slowest import SlowestRank
from profiling.recording.step_timing import StepTiming
from slurm.basics import utc_now, write_json_atomically
from slurm.env import DistributedIdentity
from workload.resnet_ddp import Trainer, choose_dtype

# A rank with no progress for --dist-timeout plus this long is ended by its watchdog: by then
# the others' collectives have timed out, and nothing but this rank keeps the job alive.
WATCHDOG_GRACE_S = 30.0


def _log(line: str) -> None:
    print(line, flush=True)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of the job on this rank: where it writes, what it did."""

    config: TaskConfig
    identity: DistributedIdentity
    folder: JobFolder
    started_at: str
    start_step: int = 0

    @property
    def trace_dir(self) -> Path:
        return self.folder.attempt(self.identity.restart_count)

    def facts(self, backend: str) -> dict[str, Any]:
        """What the manifest says about the job as a whole."""
        identity = self.identity
        return {
            "job_id": identity.job_id,
            "launcher": str(identity.launcher),
            "nodes": identity.num_nodes,
            "master": f"{identity.master_addr}:{identity.master_port}",
            "backend": backend,
        }

    def record(self, outcome: str, next_step: int, error: str | None = None) -> dict[str, Any]:
        return manifest.attempt_record(
            self.folder,
            restart_count=self.identity.restart_count,
            resumed_from_step=self.start_step,
            next_step=next_step,
            outcome=outcome,
            started_at=self.started_at,
            error=error,
        )


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
            _write_running(attempt)
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
                    log=_log,
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
        record = _rank_record(attempt, ctx, profiler, timing, profiled, dtype)
        record["step_log"] = timing.manifest_record()
        if config.report and profiler.trace_files:
            record["analysis"] = analyse_own_traces(
                profiler.trace_files, reader=_reader(identity), limit_s=config.dist_timeout_s / 2
            )
        _gather_and_write_manifest(attempt, ctx, record, result.next_step, hooks)
    # After leaving the group: the other ranks are done, and no collective timeout applies to
    # the report, which takes as long as the traces are big.
    if identity.is_main and config.report:  # every rank's step log, and traces if any
        report_on(attempt.trace_dir, _log)
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
            log=_log,
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


def _write_running(attempt: Attempt) -> None:
    """What a live capture needs to know of the running job (rank 0, at the start)."""
    identity = attempt.identity
    attempt.folder.meta.mkdir(parents=True, exist_ok=True)
    write_json_atomically(
        attempt.folder.running,
        {
            "job_id": identity.job_id,
            "world_size": identity.world_size,
            "nodes": identity.num_nodes,
            "restart_count": identity.restart_count,
            "launcher": str(identity.launcher),
            "started_at": attempt.started_at,
            # rank 0's process: whether it still lives tells a local job's tools it runs
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_started": process_start(),
        },
    )


def _log_start(attempt: Attempt, ctx: DistributedContext, dtype: tuple[str, str]) -> None:
    identity = attempt.identity
    resumed = (
        f", restart {identity.restart_count} resuming at step {attempt.start_step}"
        if identity.restart_count
        else ""
    )
    _log(
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
        _log(f"preempted: saved the state of step {next_step} to {folder.checkpoint}; requeueing")
        manifest.record_attempt(folder, attempt.facts(backend), attempt.record("preempted", next_step))
        folder.running.unlink(missing_ok=True)  # the next attempt writes its own
    else:
        _log(f"preempted: rank {attempt.identity.rank} saved its state of step {next_step}")
    preemption.hand_over(attempt.identity, attempt.config)


def _rank_record(
    attempt: Attempt,
    ctx: DistributedContext,
    profiler: StepProfiler,
    timing: StepTiming,
    profiled: bool,
    dtype: tuple[str, str],
) -> dict[str, Any]:
    """What this rank did, as the manifest lists it under ``ranks``."""
    identity = attempt.identity
    return {
        "rank": identity.rank,
        "local_rank": identity.local_rank,
        "node_rank": identity.node_rank,
        "node": identity.node_name or socket.gethostname(),
        "hostname": socket.gethostname(),
        "device": str(ctx.device),
        "dtype": {"chosen": dtype[0], "why": dtype[1]},
        "threads": ctx.threads,
        "launcher": str(identity.launcher),
        "profiled": profiled or bool(profiler.recorded),
        "trace_files": [path.name for path in profiler.trace_files],
        "windows": describe(profiler.recorded),  # what each trace holds, and why it was recorded
        "step_time": manifest.step_time_summary(
            timing.step_seconds, first_step=attempt.start_step, windows=profiler.windows
        ),
        "trace_export_s": round(profiler.export_seconds, 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "started_at": attempt.started_at,
    }


def _gather_and_write_manifest(
    attempt: Attempt,
    ctx: DistributedContext,
    record: dict[str, Any],
    next_step: int,
    hooks: list[StepHook],
) -> list[dict[str, Any]]:
    """Every rank's record to rank 0, which writes the manifest; returns the records."""
    identity = attempt.identity
    records = ctx.gather(record)
    if identity.is_main:
        attempts = manifest.with_attempt(attempt.folder, attempt.record("completed", next_step))
        written = manifest.build_manifest(
            facts={**attempt.facts(ctx.backend), "restart_count": identity.restart_count},
            ranks=records,
            attempts=attempts,
            profiler=attempt.config.profiler,
            workload=attempt.config.workload,
            started_at=min([attempts[0]["started_at"], *(r["started_at"] for r in records)]),
            ended_at=utc_now(),
        )
        written.update({hook.manifest_key: hook.manifest_section() for hook in hooks})
        path = manifest.write_manifest(attempt.folder, written)
        attempt.folder.running.unlink(missing_ok=True)
        _log(f"wrote {len(written['trace_files'])} trace(s) and {path}")
    dist.barrier()
    return records
