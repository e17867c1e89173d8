"""Is the job folder shared by every node? Each rank leaves a marker in it and rank 0 looks for
them all (:mod:`profiling.folder.shared`): a traces root some node cannot see stops every rank
at once, with one line, before any step runs."""

from __future__ import annotations

import socket

from jobs.runtime.group import JobGroup
from profiling.folder.layout import JobFolder
from profiling.folder.shared import UnsharedFolderError, leave_marker, unseen_ranks, unshared_error
from slurm.identity import DistributedIdentity


def check_shared_folder(identity: DistributedIdentity, folder: JobFolder, group: JobGroup) -> None:
    """Raise :class:`UnsharedFolderError` on every rank if some cannot see the folder rank 0 sees."""
    if identity.world_size == 1:
        return
    node = identity.node_name or socket.gethostname()
    written = leave_marker(folder, identity.rank, node)
    # each rank's (node, job folder, write error), once every marker is written
    where = group.gather((node, str(folder.path), written))
    missing = unseen_ranks(folder, identity.world_size) if identity.is_main else []
    message = group.broadcast(unshared_error(folder, missing, where) if missing and where else None)
    if message is not None:
        raise UnsharedFolderError(message)
