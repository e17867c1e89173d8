"""The command lines of the job: ``submit.py`` and ``python -m jobs.task`` (what the batch script
runs under ``srun``), both made from the config fields' own declarations (:mod:`slurm.common.settings`).

A task's options are :class:`~jobs.spec.TaskConfig`'s and its sections'; ``submit.py`` adds
:class:`~jobs.spec.JobSpec`'s and :class:`~slurm.resources.SlurmResources`'. Adding an option
is adding a field.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jobs.spec import TaskConfig
from slurm.common.command_line import OneLineParser
from slurm.common.settings import argv_of, from_namespace
from slurm.common.traces_root import TRACES_ROOT_ENV, traces_root

TASK_PROG = "python -m jobs.task"


def default_traces_root() -> Path:
    """The traces root of a command that takes it as an argument (``python -m jobs.commands.list [ROOT]``)."""
    return traces_root()


def add_traces_root(parser: OneLineParser) -> None:
    """The optional ``ROOT`` argument of a command that reads every job under a traces root."""
    parser.add_argument(
        "root",
        nargs="?",
        type=Path,
        default=default_traces_root(),
        help=f"the traces root (default: ${TRACES_ROOT_ENV} or ./traces)",
    )


def not_a_traces_root(root: Path) -> str | None:
    """What is wrong with ``root`` as a traces root, with the fix; None where it is a folder."""
    if root.is_dir():
        return None
    return (
        f"traces root {root} is not a folder. HINT: pass as ROOT the traces root the jobs were "
        f"submitted with, or set {TRACES_ROOT_ENV}"
    )


def task_parser(prog: str = TASK_PROG) -> OneLineParser:
    parser = OneLineParser(prog=prog, description="One task of the profiled ResNet18 DDP job.")
    parser.add_settings(TaskConfig)
    return parser


def parse_task_argv(argv: Sequence[str] | None, prog: str = TASK_PROG) -> TaskConfig:
    """For ``python -m jobs.task``: exits with status 2 and one line on a bad option."""
    parser = task_parser(prog)
    args = parser.parse_args(argv)
    try:
        return from_namespace(TaskConfig, args)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {parser.describe(error)}\n")


def task_argv(config: TaskConfig) -> list[str]:
    """The options of ``python -m jobs.task`` that make ``config``: what the batch script is given."""
    return argv_of(config)
