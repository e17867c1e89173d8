"""The controller of a local job (submitit's LocalExecutor), with the job's logs in its own folder.

submitit's controller makes its log folder with one ``mkdir`` of the folder as it is given,
``%j`` and all, so ``<root>/%j/logs`` fails: there is no ``<root>/%j``. This one fills in the job
id first. :func:`jobs.submission.make_executor` has it run instead of submitit's: the local
executor's setup line ``exec``s it, so that it runs as the job's own process, whose pid is the
job's id.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from submitit.core.utils import JobPaths
from submitit.local.local import Controller


class JobFolderController(Controller):
    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.pid = str(os.getpid())  # exec'd in place of the setup shell: the job's own process
        self.folder = JobPaths(folder, self.pid).folder
        self.folder.mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    JobFolderController(Path(sys.argv[1])).run()
