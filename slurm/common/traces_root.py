"""Where the job folders go: the traces root, resolved one way by every reader and writer (the
job spec's default, :class:`jobs.profiled_run.ProfiledRun`'s, the commands' and the batch
script's)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TRACES_ROOT_ENV = "TRACES_ROOT"  # the shared folder, where the user keeps it set
DEFAULT_TRACES_ROOT = "traces"  # else this, in the folder the command runs in


def traces_root(given: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``given``, else ``$TRACES_ROOT`` (of ``env``, default this process's), else ``./traces``;
    absolute: tasks may start in another folder."""
    found = given or (os.environ if env is None else env).get(TRACES_ROOT_ENV) or DEFAULT_TRACES_ROOT
    return Path(found).expanduser().absolute()
