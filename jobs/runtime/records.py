"""What one attempt writes about itself: ``running.json`` while it runs, its rank's record, and
the manifest that rank 0 writes from every rank's record."""

from __future__ import annotations

import dataclasses
import os
import pwd
import socket
from pathlib import Path
from typing import Any

import msgspec

from jobs.runtime import auto_capture
from jobs.runtime.group import JobGroup
from jobs.runtime.output import say
from profiling.folder import manifest
from profiling.folder.layout import JobFolder
from profiling.recording.config import ProfilerConfig
from profiling.recording.process_memory import peak_resident_bytes
from profiling.recording.profiler import StepHook, StepProfiler, windows_record
from profiling.recording.step_timing import StepTiming
from profiling.schema.manifest import AttemptRecord, DtypeChoice, JobFacts, RankRecord
from slurm.common.clock import utc_now
from slurm.common.files import write_json_atomically
from slurm.identity import DistributedIdentity


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of the job on this rank: where it writes, what it runs, what it did."""

    identity: DistributedIdentity
    folder: JobFolder
    profiler: ProfilerConfig
    workload: dict[str, Any]  # the manifest's "workload": what the loop ran, and its settings
    backend: str
    started_at: str
    start_step: int = 0

    @property
    def trace_dir(self) -> Path:
        return self.folder.attempt(self.identity.restart_count)

    def facts(self) -> JobFacts:
        """What the manifest says about the job as a whole."""
        identity = self.identity
        return JobFacts(
            job_id=identity.job_id,
            launcher=str(identity.launcher),
            nodes=identity.num_nodes,
            master=f"{identity.master_addr}:{identity.master_port}",
            backend=self.backend,
            job_name=identity.job_name,
            user=pwd.getpwuid(os.getuid()).pw_name,
        )

    def record(self, outcome: str, next_step: int, error: str | None = None) -> AttemptRecord:
        return manifest.attempt_record(
            self.folder,
            restart_count=self.identity.restart_count,
            resumed_from_step=self.start_step,
            next_step=next_step,
            outcome=outcome,
            started_at=self.started_at,
            error=error,
        )

    def ended(self, outcome: str, next_step: int, error: str | None = None) -> None:
        """Rank 0: this attempt ended without a manifest of its own (failed, preempted)."""
        manifest.record_attempt(self.folder, self.facts(), self.record(outcome, next_step, error))
        self.folder.running.unlink(missing_ok=True)  # the next attempt writes its own


def process_start(pid: int | None = None) -> str:
    """This process's start time in clock ticks since boot (/proc): with its pid, what identifies it."""
    return Path(f"/proc/{pid or os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]


def write_running(attempt: Attempt) -> None:
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


def rank_record(
    attempt: Attempt,
    profiler: StepProfiler,
    timing: StepTiming,
    *,
    device: str,
    threads: int,
    profiled: bool,
    about: dict[str, Any],
) -> RankRecord:
    """What this rank did, as the manifest lists it under ``ranks`` (``about``: what the loop
    adds, the dtype it chose, say)."""
    identity = attempt.identity
    about = dict(about)
    dtype = about.pop("dtype", None)
    return RankRecord(
        rank=identity.rank,
        local_rank=identity.local_rank,
        node_rank=identity.node_rank,
        node=identity.node_name or socket.gethostname(),
        hostname=socket.gethostname(),
        device=device,
        dtype=msgspec.convert(dtype, DtypeChoice) if dtype is not None else None,
        about=about,
        threads=threads,
        launcher=str(identity.launcher),
        profiled=profiled or bool(profiler.recorded),
        trace_files=[path.name for path in profiler.trace_files],
        windows=windows_record(profiler.recorded),  # what each trace holds, and why it was recorded
        step_time=manifest.step_time_summary(
            timing.step_seconds, first_step=attempt.start_step, windows=profiler.windows
        ),
        trace_export_s=round(profiler.export_seconds, 4),
        peak_rss_mib=round(peak_resident_bytes() / 2**20, 1),
        started_at=attempt.started_at,
    )


def gather_and_write_manifest(
    attempt: Attempt, group: JobGroup, record: RankRecord, next_step: int, hooks: list[StepHook]
) -> None:
    """Every rank's record to rank 0, which writes the manifest."""
    identity = attempt.identity
    records = group.gather(record)
    if records is not None and identity.is_main:
        attempts = manifest.with_attempt(attempt.folder, attempt.record("completed", next_step))
        written = manifest.build_manifest(
            facts=msgspec.structs.replace(attempt.facts(), restart_count=identity.restart_count),
            ranks=records,
            attempts=attempts,
            schedule=attempt.profiler.schedule_record(),
            profiler=msgspec.structs.replace(
                attempt.profiler.record(),
                auto_capture=auto_capture.manifest_record(attempt.profiler.auto_capture),
            ),
            workload=attempt.workload,
            hooks={hook.manifest_key: hook.manifest_section() for hook in hooks},
            started_at=min([attempts[0].started_at, *(r.started_at for r in records)]),
            ended_at=utc_now(),
        )
        path = manifest.write_manifest(attempt.folder, written)
        attempt.folder.running.unlink(missing_ok=True)
        say(f"wrote {len(written.trace_files)} trace(s) and {path}")
    group.barrier()
