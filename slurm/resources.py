"""What a job asks SLURM for, and the one builder of submitit's SLURM executors.

:class:`SlurmResources` is declared once (its fields carry their options, :mod:`slurm.common.settings`)
and used by ``submit.py`` and by the report's job array. Each field also declares the sbatch
option it becomes (:class:`Sbatch`); :data:`SUBMITIT_PARAMETERS`, :data:`OWNED_SBATCH_OPTIONS`
and :data:`SBATCH_SHORT_OPTIONS` are made from those, as submitit makes its parameters from one
signature: a new field reaches the script, and is refused through ``--sbatch``, by its
declaration alone.
Torch-free; submitit is imported where an executor is made.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from slurm.common.errors import SettingError
from slurm.common.settings import at_least, check_fields, setting

_GROUP = "SLURM resources"
_SBATCH_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
# Seconds between the preemption signal and SIGKILL at the time limit: room to write a
# checkpoint on a shared filesystem.
SIGNAL_DELAY_S = 120


_LOGS = (
    "the job's logs, which --wait follows and submitit reads results from, go to <job id>/logs/ under "
    "{traces_root}"
)
_PREEMPTION = "the warning before preemption or the time limit, for the checkpoint"
# sbatch options the job's shape and the toolkit's own mechanics set (those of SlurmResources'
# fields are added from the fields: :data:`OWNED_SBATCH_OPTIONS`) -> (what it is to us, the fix)
_SHAPE_AND_MECHANICS: dict[str, tuple[str, str]] = {
    "nodes": ("", "use {nodes}"),
    "ntasks": ("", "use {gpus_per_node}, or {tasks_per_node} for CPU tasks"),
    "ntasks-per-node": ("", "use {gpus_per_node}, or {tasks_per_node} for CPU tasks"),
    "ntasks-per-gpu": ("", "use {gpus_per_node}: one task per GPU"),
    "ntasks-per-core": ("", "use {tasks_per_node}"),
    "ntasks-per-socket": ("", "use {tasks_per_node}"),
    "gpus": ("", "use {gpus_per_node} (GPUs per node)"),
    "gpus-per-node": ("", "use {gpus_per_node}"),
    "gpus-per-task": ("", "use {gpus_per_node}: one task per GPU"),
    "gpus-per-socket": ("", "use {gpus_per_node}"),
    "gres": ("GPUs, as --gpus-per-node", "use {gpus_per_node}"),  # only when it asks for GPUs
    "output": (_LOGS, "use {traces_root}"),
    "error": (_LOGS, "use {traces_root}"),
    "open-mode": (_LOGS, "remove it"),
    "signal": (_PREEMPTION, "remove it"),
    "requeue": ("requeue after preemption", "use {max_restarts}"),
    "no-requeue": ("requeue after preemption", "use {max_restarts} 0"),
}
_SHAPE_SHORT_OPTIONS = {"N": "nodes", "n": "ntasks", "G": "gpus", "o": "output", "e": "error"}
_SBATCH = "sbatch"  # the metadata key of a field's Sbatch


@dataclasses.dataclass(frozen=True)
class Sbatch:
    """How a :class:`SlurmResources` field reaches the batch script: submitit's parameter, which
    submitit writes as ``#SBATCH --<parameter with dashes>``, and sbatch's one-letter form."""

    submitit: str
    short: str | None = None
    unit: str = ""  # said in the hint to the option of ours: " (minutes)"

    @property
    def option(self) -> str:
        return self.submitit.replace("_", "-")


def slurm_setting(default: Any, *, sbatch: Sbatch, **option: Any) -> Any:
    """A :class:`SlurmResources` field: its option (:func:`slurm.common.settings.setting`) and the sbatch
    option it becomes; the tables below are made from these."""
    declared = setting(default, **option)
    return dataclasses.field(default=declared.default, metadata={**declared.metadata, _SBATCH: sbatch})


def owned_sbatch_option(key: str, value: str) -> str | None:
    """The option of ours that ``--sbatch KEY=VALUE`` would fight, if any.

    sbatch also takes a long option by any unambiguous prefix (``--part``): a prefix of one of
    ours is either that option or ambiguous, and is refused too.
    """
    name = SBATCH_SHORT_OPTIONS.get(key, key)
    if name == "gres" and "gpu" not in value.lower():
        return None  # other generic resources (a local disk, say) are the user's to ask for
    if name in OWNED_SBATCH_OPTIONS:
        return name
    return next((owned for owned in OWNED_SBATCH_OPTIONS if len(name) > 1 and owned.startswith(name)), None)


class ResourceError(SettingError):
    """Resources SLURM must not be asked for; the message names the setting and the fix."""


def parse_sbatch_option(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` (``--sbatch constraint=a100``) -> ``("constraint", "a100")``."""
    key, equals, value = item.partition("=")
    if not equals:
        raise ResourceError(f"{{extra}} {item!r} is not KEY=VALUE. HINT: {{extra}} constraint=a100")
    return key.strip().lstrip("-"), value


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlurmResources:
    partition: str | None = slurm_setting(
        None, sbatch=Sbatch("partition", "p"), flag="--partition", help="SLURM partition", group=_GROUP
    )
    account: str | None = slurm_setting(
        None, sbatch=Sbatch("account", "A"), flag="--account", help="account charged", group=_GROUP
    )
    qos: str | None = slurm_setting(
        None, sbatch=Sbatch("qos", "q"), flag="--qos", help="quality of service", group=_GROUP
    )
    time_min: int = slurm_setting(
        60,
        sbatch=Sbatch("time", "t", unit=" (minutes)"),
        flag="--time",
        help="time limit",
        group=_GROUP,
        metavar="MINUTES",
        check=at_least(1, " minute"),
    )
    cpus_per_task: int | None = slurm_setting(
        None,
        sbatch=Sbatch("cpus_per_task", "c"),
        flag="--cpus-per-task",
        help="CPUs per task (default: the partition's)",
        group=_GROUP,
        parse=int,
        metavar="N",
        check=at_least(1),
    )
    job_name: str = slurm_setting(
        "profile-resnet18",
        sbatch=Sbatch("job_name", "J"),
        flag="--job-name",
        help="the job's name",
        group=_GROUP,
    )
    extra: tuple[tuple[str, str], ...] = setting(
        (),
        flag="--sbatch",
        help="any other sbatch option, repeatable: --sbatch constraint=a100 --sbatch mail-type=END",
        group=_GROUP,
        metavar="KEY=VALUE",
        parse=parse_sbatch_option,
        show=lambda item: f"{item[0]}={item[1]}",
        repeat=True,
    )

    def __post_init__(self) -> None:
        check_fields(self, ResourceError)
        if not self.job_name.strip():
            raise ResourceError("{job_name} is empty")
        strings = [
            (f"{{{field.name}}}", getattr(self, field.name))
            for field in dataclasses.fields(self)
            if isinstance(getattr(self, field.name), str)
        ]
        for name, value in (*strings, *((f"{{extra}} {key}", value) for key, value in self.extra)):
            # sbatch reads '#SBATCH' lines one by one: a newline in a value would end the
            # comment and run the rest as shell, whatever the quoting.
            if value is not None and any(ord(char) < 32 or ord(char) == 127 for char in value):
                raise ResourceError(
                    f"{name} {value!r} contains a control character (newline, tab...); remove it"
                )
        for key, value in self.extra:
            owned = owned_sbatch_option(key, value)
            if owned is not None:
                what, fix = OWNED_SBATCH_OPTIONS[owned]
                raise ResourceError(
                    f"{{extra}} {key}={value}: the toolkit sets --{owned} itself"
                    + (f" ({what})" if what else "")
                    + f". HINT: {fix}"
                )
            if not _SBATCH_KEY.match(key):
                raise ResourceError(
                    f"{{extra}} {key!r} is not an sbatch option name. HINT: write it as in "
                    "`sbatch --help` without the dashes, e.g. {extra} constraint=a100"
                )


# SlurmResources field -> how it reaches the script, as its field declares it
_SBATCH_OF: dict[str, Sbatch] = {
    field.name: field.metadata[_SBATCH]
    for field in dataclasses.fields(SlurmResources)
    if _SBATCH in field.metadata
}
# SlurmResources field -> submitit's parameter (None values are not passed: SLURM's defaults)
SUBMITIT_PARAMETERS = {name: sbatch.submitit for name, sbatch in _SBATCH_OF.items()}
# every sbatch option the toolkit sets itself -> (what it is to us, the fix). One set through
# --sbatch too would win in the script while the tasks are planned from ours (nodes=5 next to
# --nodes 2), or move the logs that --wait follows and submitit reads its results from.
OWNED_SBATCH_OPTIONS: dict[str, tuple[str, str]] = {
    **_SHAPE_AND_MECHANICS,
    **{sbatch.option: ("", f"use {{{name}}}{sbatch.unit}") for name, sbatch in _SBATCH_OF.items()},
}
# sbatch's one-letter forms of those
SBATCH_SHORT_OPTIONS = {
    **_SHAPE_SHORT_OPTIONS,
    **{sbatch.short: sbatch.option for sbatch in _SBATCH_OF.values() if sbatch.short},
}
