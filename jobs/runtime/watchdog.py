"""A rank that stops making progress says where it is stuck, and then ends.

The training loop reports each step (:meth:`Watchdog.progress`: a clock read). A daemon thread
looks once a second: after ``dump_after_s`` without progress (half of ``--dist-timeout``, so
before the other ranks' collectives time out and srun kills everyone) it writes the rank's hang
dump (``JobFolder.hang_dump``, read by :mod:`profiling.analysis.dumps.hang`): the step, the node, the
Python stack of every thread and torch's flight recorder. After ``exit_after_s``
(``--dist-timeout`` plus a grace) it ends the process, so that a rank stuck outside any
collective (a hung data loader, a ``sleep``) cannot keep a job alive once the others have given
up: under srun the others' failure kills it sooner; under submitit's local executor nothing else
would. In a loop of the user's own (``exit_after_s`` None) it only dumps: ending is theirs.

A Python thread, not a C-level one (faulthandler): the stacks come out as data, with file,
line and code, and every blocking call torch or gloo makes releases the GIL.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from profiling.folder.layout import FLIGHT_RECORDER_PREFIX, JobFolder
from profiling.schema.dumps import HangDump
from profiling.schema.files import write_file
from slurm.common.mesh import Dims, mesh_dims
from slurm.identity import DistributedIdentity

_LOG = logging.getLogger(__name__)

EXIT_STATUS = 3  # a rank the watchdog ended
# A rank the watchdog ends (where it may) has had no step for the timeout plus this long: by then
# the others' collectives have timed out, and nothing but this rank keeps the job alive.
GRACE_S = 30.0
MIN_DUMP_AFTER_S = 5.0  # a rank's hang dump never comes sooner (a short timeout, a slow step)


def flight_recorder() -> dict[str, Any] | None:
    """torch's flight recorder of this process (its last collectives), or None where it is off.

    torch keeps two: one for NCCL (CUDA events) and one for every other backend (gloo); the
    entries of both go into one list, which is what :mod:`profiling.analysis.dumps.hang` reads.
    """
    try:
        # torch's private flight recorder, absent from its stubs
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
            _dump_fr_trace_json,
            _dump_nccl_trace_json,
        )
    except ImportError:  # torch without the flight recorder: the stacks still tell
        return None
    record: dict[str, Any] | None = None
    for dump in (_dump_nccl_trace_json, _dump_fr_trace_json):
        try:
            part = json.loads(dump())
        except Exception:  # NCCL not built in, or the recorder off
            continue
        if record is None:
            record = part
        else:
            record.setdefault("entries", []).extend(part.get("entries", []))
    return record


def write_torch_dump(path: Path) -> bool:
    """torch's flight recorder of this process in torch's own form (a pickle: entries, pg_config,
    version), as torch writes it on an NCCL timeout and ``torch.distributed.flight_recorder.fr_trace``
    reads it: NCCL's recorder where it has entries, else the one of every other backend (gloo).
    False where there is none."""
    try:
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
            _dump_fr_trace,
            _dump_nccl_trace,
        )
    except ImportError:
        return False
    for dump in (_dump_nccl_trace, _dump_fr_trace):  # NCCL's first: on a GPU, its collectives matter
        try:
            record = pickle.loads(dump())  # this process's own recorder, as torch pickled it
            if record.get("entries"):
                break
        except Exception:  # NCCL not built in, or the recorder off
            continue
    else:
        return False
    content = pickle.dumps(_with_groups(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    # written whole under a name fr_trace does not take for a rank's (it reads every file there)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".part")
    with os.fdopen(handle, "wb") as out:
        out.write(content)
    os.replace(temporary, path)
    return True


def _with_groups(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every process group of this process in its ``pg_config``. torch's gloo
    recorder (2.14) registers its groups before they are named, all under ``""``, and fr_trace
    then finds no group for the entries' names; NCCL's registers each. A group already there is
    left as torch wrote it."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_initialized():
        return record
    config = record.setdefault("pg_config", {})
    world = distributed_c10d._world
    default = distributed_c10d._get_default_group()
    for group, name in world.pg_names.items():
        if name not in config:
            desc = getattr(group, "group_desc", "") or ("default_pg" if group is default else "undefined")
            ranks = sorted(world.pg_group_ranks.get(group, {}))
            config[name] = {"name": name, "desc": desc, "ranks": str(ranks)}
    return record


def thread_stacks() -> dict[str, list[str]]:
    """Every thread's stack, outermost frame first: ``file:line in function: code``."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    return {
        "MainThread" if ident == main else names.get(ident, f"thread {ident}"): _lines(
            traceback.extract_stack(frame)
        )
        for ident, frame in sys._current_frames().items()
    }


def _lines(frames: traceback.StackSummary) -> list[str]:
    return [f"{_short(f.filename)}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames]


def _short(path: str) -> str:
    """Paths relative to the repository or to site-packages, which is what people read."""
    for marker in ("site-packages/", os.getcwd() + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


class Watchdog:
    def __init__(
        self,
        *,
        rank: int,
        node: str | None,
        dump_path: Path,
        dump_after_s: float,
        exit_after_s: float | None,
        torch_dump_path: Path | None = None,
        layout: Dims | None = None,
    ) -> None:
        self.rank, self.node, self.dump_path = rank, node or socket.gethostname(), dump_path
        self.dump_after_s, self.exit_after_s = dump_after_s, exit_after_s
        self.torch_dump_path, self.layout = torch_dump_path, layout
        self._step: int | None = None
        self._since = time.monotonic()
        self._dumped_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="progress-watchdog", daemon=True)

    @classmethod
    def for_timeout(
        cls,
        identity: DistributedIdentity,
        folder: JobFolder,
        timeout_s: float,
        end_stuck: bool,
        layout: Dims | None,
    ) -> Watchdog:
        """A rank's under ``--dist-timeout``: its dumps at half the timeout, before the others give
        up waiting for it (its own in ``meta/hang/``, torch's in ``meta/flight_recorder/``);
        ``end_stuck``: it ends the rank a grace after the timeout; ``layout``: ``--parallel``."""
        return cls(
            rank=identity.rank,
            node=identity.node_name,
            dump_path=folder.hang_dump(identity.rank),
            dump_after_s=max(MIN_DUMP_AFTER_S, timeout_s / 2),
            exit_after_s=timeout_s + GRACE_S if end_stuck else None,
            torch_dump_path=folder.flight_recorder / f"{FLIGHT_RECORDER_PREFIX}{identity.rank}",
            layout=mesh_dims(layout) if layout else None,
        )

    def __enter__(self) -> Watchdog:
        self._since = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def progress(self, step: int) -> None:
        """Step ``step`` starts."""
        self._step, self._since = step, time.monotonic()

    def dump(self, reason: str, error: BaseException | None = None) -> Path:
        """Write what this rank is doing, atomically (a reader never sees half a dump).

        With ``error`` (a collective that timed out), the main thread's stack is where the error
        came from: the main thread itself is only writing this dump by then.
        """
        path = self.dump_path
        path.parent.mkdir(parents=True, exist_ok=True)
        stacks = thread_stacks()
        if error is not None and error.__traceback__ is not None:
            stacks["MainThread"] = _lines(traceback.extract_tb(error.__traceback__))
        dump = HangDump(
            rank=self.rank,
            node=self.node,
            host=socket.gethostname(),
            pid=os.getpid(),
            step=self._step,
            reason=reason,
            written_at=time.time(),
            stacks=stacks,
            flight_recorder=flight_recorder(),
            layout=list(self.layout) if self.layout else None,
        )
        write_file(path, dump)
        if self.torch_dump_path is not None:
            write_torch_dump(self.torch_dump_path)
        return path

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            idle = time.monotonic() - self._since
            if self.exit_after_s is not None and idle > self.exit_after_s:
                self.dump(f"no progress for {idle:.0f} s at step {self._step}: ended by the watchdog")
                _LOG.error(
                    f"rank {self.rank}: no progress for {idle:.0f} s at step {self._step}; ending this rank "
                    f"(stacks in {self.dump_path})"
                )
                os._exit(EXIT_STATUS)
            if idle > self.dump_after_s and (self._dumped_at is None or self._dumped_at < self._since):
                self.dump(f"no progress for {idle:.0f} s at step {self._step}")
                self._dumped_at = time.monotonic()
