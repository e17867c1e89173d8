"""Settings of the ResNet18 training-step workload (torch-free: the submit path validates them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from slurm.common.mesh import MESH_ORDER, Dims, layout_size, layout_text, parse_layout
from slurm.common.settings import at_least, check_fields, one_of, positive_integer, setting
from workload.errors import WorkloadError
from workload.lm_settings import lm_settings

# --dtype -> the name of the torch dtype (resolved where torch is imported); "auto" chooses one
# of them for the device (workload.loop.choose_dtype)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
AUTO_DTYPE = "auto"
DTYPE_CHOICES = (AUTO_DTYPE, *DTYPES)


DEFAULT_FACTORY = "workload.resnet18:build"  # the tutorial's ResNet18 (workload.contract)
PARALLEL_FACTORY = "workload.parallel_lm:parallel_lm"  # the job of many groups (--parallel)


def split(spec: str) -> tuple[str, str]:
    """``mypkg.model:build`` -> (``mypkg.model``, ``build``); refuses anything else."""
    module, colon, factory = spec.partition(":")
    names = [*module.split("."), factory]
    if not colon or not all(name.isidentifier() for name in names):
        raise WorkloadError(
            f"{{factory}} {spec!r} is not MODULE:FACTORY. HINT: name a module and a function of it, "
            "e.g. {factory} mypkg.model:build"
        )
    return module, factory


def key_value(item: str) -> tuple[str, str]:
    """``--workload-arg KEY=VALUE``."""
    key, equals, value = item.partition("=")
    if not equals or not key.strip():
        raise WorkloadError(f"{{args}} {item!r} is not KEY=VALUE. HINT: {{args}} hidden=512")
    return key.strip(), value


@dataclasses.dataclass(frozen=True)
class RankAndStep:
    """An injected fault: ``rank`` does something at ``step``."""

    rank: int
    step: int

    def __str__(self) -> str:
        return f"{self.rank}:{self.step}"


@dataclasses.dataclass(frozen=True)
class RankAndMs:
    """An injected slowdown: ``rank`` does ``ms`` milliseconds of extra CPU work every step, or
    in steps ``first`` to ``last`` (both included; ``last`` None: to the end)."""

    rank: int
    ms: int
    first: int = 0
    last: int | None = None

    @property
    def windowed(self) -> bool:
        return self.first > 0 or self.last is not None

    def applies(self, step: int) -> bool:
        return self.first <= step and (self.last is None or step <= self.last)

    def __str__(self) -> str:
        steps = f"@{self.first}-{'' if self.last is None else self.last}" if self.windowed else ""
        return f"{self.rank}:{self.ms}{steps}"


_GROUP = "workload"


def _rank_and(kind: type, what: str) -> Callable[[str], Any]:
    """A reader of ``RANK:<what>`` (two integers) into ``kind(rank, value)``."""

    def parse(text: str) -> Any:
        rank, colon, value = text.partition(":")
        if not (colon and rank.strip().isdigit() and value.strip().isdigit()):
            raise ValueError(f"{text!r} is not RANK:{what}, e.g. 1:5")
        return kind(int(rank), int(value))

    return parse


def parse_slowdown(text: str) -> RankAndMs:
    """``RANK:MS`` or ``RANK:MS@FIRST-LAST`` (``FIRST-`` alone: to the end)."""
    rank_ms, at, steps = text.partition("@")
    slowdown = _rank_and(RankAndMs, "MS")(rank_ms)
    if not at:
        return slowdown
    first, dash, last = steps.partition("-")
    if not (dash and first.strip().isdigit() and (not last.strip() or last.strip().isdigit())):
        raise ValueError(f"{text!r} is not RANK:MS@FIRST-LAST, e.g. 2:40@30-60")
    return RankAndMs(slowdown.rank, slowdown.ms, int(first), int(last) if last.strip() else None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """The training each rank runs: which workload, for how many steps, with what. The batch,
    image and class sizes are the tutorial's ResNet18's; a workload of your own reads what it
    needs of them, and its own settings from ``args``."""

    factory: str | None = setting(
        None,
        flag="--workload",
        help="the training to run: a function of yours, MODULE:FACTORY, importable from the folder you "
        f"submit from or PYTHONPATH (default: the tutorial's ResNet18, {DEFAULT_FACTORY}; the "
        "parallel LM with --parallel)",
        group="workload",
        metavar="MODULE:FACTORY",
        parse=lambda text: ":".join(split(text)),
    )
    args: tuple[tuple[str, str], ...] = setting(
        (),
        flag="--workload-arg",
        help="a setting for the workload's factory, repeatable: --workload-arg hidden=512",
        group="workload",
        metavar="KEY=VALUE",
        parse=key_value,
        show=lambda item: f"{item[0]}={item[1]}",
        repeat=True,
    )
    parallel: Dims | None = setting(
        None,
        flag="--parallel",
        help="run the toolkit's job of many groups, a small transformer LM data (FSDP2) x pipeline "
        "(1F1B) x tensor parallel, over these sizes, whose product is the world size: dp=2,pp=2,tp=2",
        group="workload",
        metavar="dp=N,pp=N,tp=N",
        parse=lambda text: parse_layout(text, "--parallel"),
        show=layout_text,
    )
    steps: int = setting(100, flag="--steps", help="training steps", group=_GROUP, check=positive_integer)
    batch_size: int = setting(
        10,
        flag="--batch-size",
        help="images per step (the tutorial's ResNet18)",
        group=_GROUP,
        check=positive_integer,
    )
    image_size: int = setting(
        224,
        flag="--image-size",
        help="height and width of its random images",
        group=_GROUP,
        check=positive_integer,
    )
    num_classes: int = setting(
        1000, flag="--num-classes", help="outputs of its model", group=_GROUP, check=positive_integer
    )
    dtype: str = setting(
        AUTO_DTYPE,
        flag="--dtype",
        help="auto: bf16 where the device computes it natively (CUDA with bf16, CPUs with AVX-512 BF16 "
        "or AMX), else fp32",
        group=_GROUP,
        choices=DTYPE_CHOICES,
        check=one_of(DTYPE_CHOICES),
    )
    lr: float = 1e-3
    seed: int = 0
    log_every: int = 10
    threads: int | None = setting(
        None,
        flag="--threads-per-rank",
        help="CPU threads per rank (default: the rank's share of the node)",
        group=_GROUP,
        metavar="N",
        parse=int,
        check=at_least(1),
    )
    # Fault injection, to see how the job, the cluster and the report deal with it.
    inject_failure: RankAndStep | None = setting(
        None,
        flag="--inject-failure",
        help="make RANK raise at STEP, to test how a job with a dead rank ends",
        group=_GROUP,
        metavar="RANK:STEP",
        parse=_rank_and(RankAndStep, "STEP"),
    )
    inject_slowdown: tuple[RankAndMs, ...] = setting(
        (),
        flag="--inject-slowdown",
        help="make RANK do MS ms of extra CPU work every step (or in steps FIRST to LAST), to see a "
        "straggler in the report; repeatable (a slow node: each of its ranks)",
        group=_GROUP,
        metavar="RANK:MS[@FIRST-LAST]",
        parse=parse_slowdown,
        show=str,
        repeat=True,
    )
    inject_hang: RankAndStep | None = setting(
        None,
        flag="--inject-hang",
        help="make RANK stop making progress at STEP, to see what a hang leaves behind (meta/hang/)",
        group=_GROUP,
        metavar="RANK:STEP",
        parse=_rank_and(RankAndStep, "STEP"),
    )

    def __post_init__(self) -> None:
        check_fields(self, WorkloadError)
        if self.parallel is not None:
            self._check_parallel(self.parallel)
        if not isinstance(self.log_every, int) or self.log_every < 1:
            raise WorkloadError(f"{{log_every}} {self.log_every!r} must be a positive integer")
        if self.workload == DEFAULT_FACTORY and self.image_size < 32:
            # ResNet18 downsamples 32x; smaller inputs fail inside the network, on the node.
            raise WorkloadError(f"{{image_size}} {self.image_size} is below ResNet18's minimum of 32")
        if not self.lr > 0:
            raise WorkloadError(f"{{lr}} {self.lr!r} must be positive")
        for name in ("inject_failure", "inject_hang"):
            fault = getattr(self, name)
            if fault is not None and (fault.rank < 0 or not 0 <= fault.step < self.steps):
                raise WorkloadError(
                    f"{{{name}}} {fault} needs a rank >= 0 and a step below {{steps}} {self.steps}"
                )
        for slowdown in self.inject_slowdown:
            self._check_slowdown(slowdown)

    @property
    def workload(self) -> str:
        """The factory the ranks run: ``--workload``, or the parallel LM where ``--parallel`` asks
        for it."""
        if self.factory is not None:
            return self.factory
        return PARALLEL_FACTORY if self.parallel is not None else DEFAULT_FACTORY

    def _check_parallel(self, dims: Dims) -> None:
        unknown = [name for name, _ in dims if name not in MESH_ORDER]
        if unknown:
            raise WorkloadError(
                f"{{parallel}} {layout_text(dims)} names {', '.join(unknown)}. HINT: split over "
                f"{', '.join(MESH_ORDER)} only, e.g. {{parallel}} dp=2,pp=2,tp=2"
            )
        if self.factory not in (None, PARALLEL_FACTORY):
            raise WorkloadError(
                f"{{parallel}} {layout_text(dims)} runs the toolkit's parallel LM, not {{factory}} "
                f"{self.factory}. HINT: drop one of them"
            )
        lm_settings(dict(self.args), dims, self.batch_size)  # as its ranks check them

    def _check_slowdown(self, slowdown: RankAndMs) -> None:
        if slowdown.rank < 0 or not 0 < slowdown.ms <= 60_000:
            raise WorkloadError(
                f"{{inject_slowdown}} {slowdown} needs a rank >= 0 and 1 to 60000 ms of extra work per step"
            )
        if slowdown.windowed:
            last = self.steps - 1 if slowdown.last is None else slowdown.last
            if not 0 <= slowdown.first <= last < self.steps:
                raise WorkloadError(
                    f"{{inject_slowdown}} {slowdown}: steps {slowdown.first}-{last} are not within the "
                    f"run's steps 0-{self.steps - 1}. HINT: write RANK:MS@FIRST-LAST with "
                    f"FIRST <= LAST < {{steps}} {self.steps}"
                )

    def check_ranks(self, world_size: int) -> None:
        """Refuse an injected fault on a rank the job does not have, and a ``--parallel`` that
        does not make the job's ranks."""
        if self.parallel is not None and layout_size(self.parallel) != world_size:
            raise WorkloadError(
                f"{{parallel}} {layout_text(self.parallel)} makes {layout_size(self.parallel)} ranks, the "
                f"job has {world_size}. HINT: sizes whose product is {world_size} (nodes x tasks per node)"
            )
        faults: list[tuple[str, RankAndStep | RankAndMs | None]] = [
            ("inject_failure", self.inject_failure),
            ("inject_hang", self.inject_hang),
        ]
        faults += [("inject_slowdown", slowdown) for slowdown in self.inject_slowdown]
        for name, fault in faults:
            if fault is not None and fault.rank >= world_size:
                raise WorkloadError(
                    f"{{{name}}} {fault} names rank {fault.rank}, but the job has {world_size} ranks "
                    f"(0-{world_size - 1})"
                )
