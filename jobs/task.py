"""The per-task entry point: identity -> process group -> profiled loop -> traces -> manifest.

submitit pickles a :class:`ProfiledTraining` and calls it in every task; the batch script
runs ``python -m jobs.task [options]`` under ``srun`` instead. Both end in :func:`run_task`.
"""

from __future__ import annotations

import dataclasses
import resource
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable, DelayedSubmission

from jobs.runtime.preemption import Preemption
from jobs.spec import TaskConfig
from profiling.folder.layout import JobFolder, meta_of
from slurm.basics import SettingError
from slurm.env import DistributedEnvError, DistributedIdentity, from_environment

# A rank with no progress for --dist-timeout plus this long is ended by its watchdog: by then
# the others' collectives have timed out, and nothing but this rank keeps the job alive.
WATCHDOG_GRACE_S = 30.0


class ProfiledTraining(Checkpointable):
    """The callable submitit runs in each task (and requeues after a preemption)."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self) -> dict[str, Any]:
        from jobs.options import describe

        try:
            return run_task(self.config, from_environment(), Preemption().install())
        except SettingError as error:  # submitit shows str(error): name the options, as submit.py does
            raise type(error)(describe(error)) from None

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:
        # submitit calls this on rank 0 when the job is preempted, after run_task has saved the
        # training state to the job folder: the requeued job is this same callable, which
        # resumes from that state. None (no requeue) once --max-restarts is used up.
        if not self.config.can_requeue(from_environment().restart_count):
            return None
        return DelayedSubmission(self, *args, **kwargs)


def _log(line: str) -> None:
    print(line, flush=True)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of the job on this rank (``SLURM_RESTART_COUNT`` = k): where it writes, what it did."""

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
            "launcher": identity.source,
            "nodes": identity.num_nodes,
            "master": f"{identity.master_addr}:{identity.master_port}",
            "backend": backend,
        }

    def record(self, outcome: str, next_step: int, error: str | None = None) -> dict[str, Any]:
        from profiling.folder.manifest import attempt_record

        return attempt_record(
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
    # Imported here so that ``submit.py`` (which imports this module to pickle the task)
    # never loads torch on a login node.
    from jobs.runtime.distributed import distributed, enable_flight_recorder
    from slurm.basics import utc_now
    from workload.resnet_ddp import Trainer, has_checkpoint

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
        trainer = Trainer(config.workload, ctx)
        if identity.restart_count and has_checkpoint(folder.checkpoint):
            attempt = dataclasses.replace(attempt, start_step=trainer.restore(folder.checkpoint))
        if identity.is_main:
            _log_start(attempt, ctx.backend, ctx.device.type)
            _write_running(attempt)
        profiler, hooks = _profiler(attempt, ctx, profiled)
        watchdog = _watchdog(attempt)
        try:
            with watchdog:
                result = trainer.run(
                    profiler,
                    start_step=attempt.start_step,
                    stop=preemption,
                    log=_log,
                    progress=watchdog.progress,
                )
        except Exception as error:
            _on_failure(attempt, ctx.backend, watchdog, error)
            raise
        if result.stopped:
            assert preemption is not None
            _stop_for_requeue(attempt, trainer, ctx.backend, result.next_step, preemption)
        record = _rank_record(attempt, ctx, profiler, result, profiled)
        records = _gather_and_write_manifest(attempt, ctx, record, result.next_step, hooks)
    # After leaving the group: the other ranks are done, and no collective timeout applies to
    # the report, which takes as long as the traces are big.
    if identity.is_main and config.report and any(r["trace_files"] for r in records):
        _report(attempt, _log)
    return record


def _check_shared_folder(attempt: Attempt, ctx: Any) -> None:
    """Stop every rank at once, with one line, if some cannot see the job folder rank 0 sees."""
    import torch.distributed as dist

    from profiling.folder.shared import UnsharedFolderError, leave_marker, unseen_ranks, unshared_error

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


def _profiler(attempt: Attempt, ctx: Any, profiled: bool) -> tuple[Any, dict[str, Any]]:
    """This rank's profiler, with the hooks that add windows while the job runs."""
    from profiling.recording.capture import CaptureWatcher
    from profiling.recording.profiler import StepProfiler, scheduled_windows
    from profiling.recording.slowest import SlowestRank

    config, identity = attempt.config, attempt.identity
    steps = config.workload.steps
    schedule = scheduled_windows(config.profiler, steps, attempt.start_step)
    hooks: dict[str, Any] = {
        "capture": CaptureWatcher(
            attempt.folder,
            rank=identity.rank,
            world_size=identity.world_size,
            agree=ctx.agree,
            schedule_windows=schedule,
            log=_log,
        )
    }
    if config.profiler.ranks.slowest:
        hooks["slowest"] = SlowestRank(
            rank=identity.rank, recording=profiled, windows=schedule, gather=ctx.gather
        )
    profiler = StepProfiler(
        config.profiler,
        rank=identity.rank,
        steps=steps,
        trace_dir=attempt.trace_dir,
        cuda=ctx.device.type == "cuda",
        start_step=attempt.start_step,
        scheduled=profiled,
        hooks=list(hooks.values()),
    )
    return profiler, hooks


def _watchdog(attempt: Attempt) -> Any:
    """Dumps at half the collective timeout, before the others give up; ends the rank a grace after it."""
    from jobs.runtime.watchdog import Watchdog

    timeout = attempt.config.dist_timeout_s
    return Watchdog(
        rank=attempt.identity.rank,
        node=attempt.identity.node_name,
        dump_dir=attempt.folder.hang,
        dump_after_s=max(5.0, timeout / 2),
        exit_after_s=timeout + WATCHDOG_GRACE_S,
    )


def _on_failure(attempt: Attempt, backend: str, watchdog: Any, error: Exception) -> None:
    """Keep what this attempt wrote listed; after a collective timed out, say where this rank was."""
    import torch.distributed as dist

    timed_out = isinstance(error, dist.DistError) or "timed out" in str(error).lower()
    if timed_out:
        first_line = next(iter(str(error).strip().splitlines()), "")
        watchdog.dump(f"{type(error).__name__}: {first_line}", error)
    if attempt.identity.is_main:
        _record_failure(attempt, backend, error)
        if timed_out:
            _explain_hang(attempt.folder)


def _explain_hang(folder: JobFolder) -> None:
    """Rank 0's verdict, into meta/hang/ and its log (a batch job has no ``--wait`` to print
    it). The ranks' first dumps, at half the timeout, are there by now; ``--wait`` and
    ``python -m profiling.hang`` redo it with every rank's last one."""
    from profiling.hang import HangError, explain

    try:
        verdict = explain(folder)
    except (HangError, OSError, ValueError) as reason:
        _log(f"no hang verdict: {reason}")
        return
    print("\n".join(verdict["verdict"]), file=sys.stderr, flush=True)


def _write_running(attempt: Attempt) -> None:
    """What a live capture needs to know of the running job (rank 0, at the start)."""
    from slurm.basics import write_json_atomically

    identity = attempt.identity
    attempt.folder.meta.mkdir(parents=True, exist_ok=True)
    write_json_atomically(
        attempt.folder.running,
        {
            "job_id": identity.job_id,
            "world_size": identity.world_size,
            "nodes": identity.num_nodes,
            "restart_count": identity.restart_count,
            "launcher": identity.source,
            "started_at": attempt.started_at,
        },
    )


def _log_start(attempt: Attempt, backend: str, device_type: str) -> None:
    identity = attempt.identity
    resumed = (
        f", restart {identity.restart_count} resuming at step {attempt.start_step}"
        if identity.restart_count
        else ""
    )
    _log(
        f"job {identity.job_id}: {identity.world_size} ranks on {identity.num_nodes} node(s), "
        f"{backend} on {device_type}{resumed}, traces in {attempt.trace_dir}"
    )


def _record_failure(attempt: Attempt, backend: str, error: Exception) -> None:
    from profiling.folder.manifest import record_attempt

    record_attempt(
        attempt.folder,
        attempt.facts(backend),
        attempt.record("failed", -1, f"{type(error).__name__}: {error}"),
    )


def _stop_for_requeue(
    attempt: Attempt, trainer: Any, backend: str, next_step: int, preemption: Preemption
) -> None:
    """Preempted: save the state to resume from, then requeue (or wait to be ended by the requeue)."""
    from profiling.folder.manifest import record_attempt

    trainer.save(attempt.folder.checkpoint, next_step)
    if attempt.identity.is_main:
        _log(f"preempted: saved the state of step {next_step} to {attempt.folder.checkpoint}; requeueing")
        record_attempt(attempt.folder, attempt.facts(backend), attempt.record("preempted", next_step))
    preemption.hand_over(attempt.identity, attempt.config)


def _rank_record(attempt: Attempt, ctx: Any, profiler: Any, result: Any, profiled: bool) -> dict[str, Any]:
    """What this rank did, as the manifest lists it under ``ranks``."""
    from profiling.folder.manifest import step_time_summary
    from profiling.recording.profiler import describe

    identity = attempt.identity
    return {
        "rank": identity.rank,
        "local_rank": identity.local_rank,
        "node_rank": identity.node_rank,
        "node": identity.node_name or socket.gethostname(),
        "hostname": socket.gethostname(),
        "device": str(ctx.device),
        "threads": ctx.threads,
        "launcher": identity.source,
        "profiled": profiled or bool(profiler.recorded),
        "trace_files": [path.name for path in profiler.trace_files],
        "windows": describe(profiler.recorded),  # what each trace holds, and why it was recorded
        "step_time": step_time_summary(
            result.step_seconds, first_step=attempt.start_step, windows=profiler.windows
        ),
        "trace_export_s": round(profiler.export_seconds, 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "started_at": attempt.started_at,
    }


def _gather_and_write_manifest(
    attempt: Attempt, ctx: Any, record: dict[str, Any], next_step: int, hooks: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every rank's record to rank 0, which writes the manifest; returns the records."""
    import torch.distributed as dist

    from profiling.folder.manifest import build_manifest, with_attempt, write_manifest
    from slurm.basics import utc_now

    identity = attempt.identity
    records = ctx.gather(record)
    if identity.is_main:
        attempts = with_attempt(attempt.folder, attempt.record("completed", next_step))
        manifest = build_manifest(
            facts={**attempt.facts(ctx.backend), "restart_count": identity.restart_count},
            ranks=records,
            attempts=attempts,
            profiler=attempt.config.profiler,
            workload=attempt.config.workload,
            started_at=min([attempts[0]["started_at"], *(r["started_at"] for r in records)]),
            ended_at=utc_now(),
        )
        manifest["captures"] = hooks["capture"].captures
        if "slowest" in hooks:
            manifest["slowest"] = hooks["slowest"].choices
        path = write_manifest(attempt.folder, manifest)
        attempt.folder.running.unlink(missing_ok=True)
        _log(f"wrote {len(manifest['trace_files'])} trace(s) and {path}")
    dist.barrier()
    return records


def _report(attempt: Attempt, log: Callable[[str], None]) -> None:
    from profiling.report import build_report

    try:
        report = build_report(attempt.trace_dir)
    except Exception as error:  # the traces are what the job is for; a report can be redone
        log(
            f"report failed ({type(error).__name__}: {error}); "
            f"rerun: python -m profiling.report {attempt.trace_dir}"
        )
        return
    verdict = f": {report['straggler']['text']}" if report["straggler"] else ""
    log(f"report in {meta_of(attempt.trace_dir)} ({report['seconds']:.1f}s){verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs.task [workload and profiler options]``, one per task under ``srun``."""
    from jobs.options import describe, parse_task_argv
    from jobs.runtime.distributed import RendezvousError

    config = parse_task_argv(argv, prog="python -m jobs.task")
    try:
        identity = from_environment()
    except DistributedEnvError as error:
        print(f"jobs.task: error: {error}", file=sys.stderr)
        return 2
    try:
        run_task(config, identity, Preemption().install())
    except SettingError as error:  # checked against the job's world size before joining it
        print(f"jobs.task: error: {describe(error)}", file=sys.stderr)
        return 2
    except RendezvousError as error:
        print(f"jobs.task: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
