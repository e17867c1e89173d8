"""Each node's publisher of live metrics (:mod:`jobs.runtime.live_metrics`), and on rank 0's node
the trigger of ``--auto-capture`` (:mod:`jobs.runtime.auto_capture`): started by the node's
first rank beside the ranks, as a process of its own at the lowest priority (its reading of step
logs holds no rank's GIL, and takes the CPU the ranks leave), and stopped when that rank's loop
ends."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys

from jobs.runtime.live_metrics import Sinks, remove_textfile
from jobs.runtime.output import say
from profiling.folder.layout import JobFolder
from profiling.recording.config import AutoCaptureConfig
from slurm.common.mesh import Dims, layout_text, mesh_dims
from slurm.identity import DistributedIdentity

STOP_WAIT_S = 15.0  # its last push, bounded by its timeout: then it is killed


class MetricsPublisher:
    """The node's publisher process, or nothing (not asked, or not the node's first rank)."""

    def __init__(self, process: subprocess.Popen | None, sinks: Sinks, job_id: str, node: str) -> None:
        self._process, self._sinks, self._job_id, self._node = process, sinks, job_id, node

    @classmethod
    def start(
        cls,
        identity: DistributedIdentity,
        folder: JobFolder,
        sinks: Sinks,
        layout: Dims | None,
        auto_capture: AutoCaptureConfig,
    ) -> MetricsPublisher:
        node = identity.node_name or socket.gethostname()
        triggers = auto_capture.enabled and identity.rank == 0  # rank 0's node reads every rank's log
        if not (sinks.any or triggers) or identity.local_rank != 0:
            return cls(None, sinks, identity.job_id, node)
        # the node's ranks: launchers number a node's tasks in a block (srun's default
        # distribution with --ntasks-per-node, torchrun, submitit's local executor)
        first = identity.rank - identity.local_rank
        # at the lowest priority: on a node whose cores the ranks keep busy, it takes what they leave
        command = [
            *(["nice", "-n", "19"] if shutil.which("nice") else []),
            sys.executable, "-m", "jobs.commands.metrics", str(folder.path),
            "--node", node, "--job", identity.job_id,
            "--ranks", f"{first}-{first + identity.local_world_size - 1}", "--every", str(sinks.every_s),
        ]  # fmt: skip
        if identity.rank == 0:
            command.append("--whole-job")
        if triggers:
            command += ["--auto-capture", str(auto_capture.max_captures)]
        if sinks.push_url:
            command += ["--push", sinks.push_url]
        if sinks.textfile_dir:
            command += ["--textfile", str(sinks.textfile_dir)]
        if layout:  # the coordinates of the mesh the job builds, whatever order --parallel gave
            command += ["--layout", layout_text(mesh_dims(layout))]
        return cls(subprocess.Popen(command), sinks, identity.job_id, node)

    @property
    def running(self) -> bool:
        """This rank started the node's process, and it has not ended."""
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Its last publication, then its end; the node's textfile gone either way."""
        if self._process is None:
            return
        process, self._process = self._process, None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_WAIT_S)
                say(f"metrics publisher did not end in {STOP_WAIT_S:g} s: killed")
        remove_textfile(self._sinks, self._job_id, self._node)
