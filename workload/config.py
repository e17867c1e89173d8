"""Settings of the ResNet18 training-step workload (torch-free: the submit path validates them)."""

from __future__ import annotations

import dataclasses

from slurm.basics import SettingError

# --dtype -> the name of the torch dtype (resolved where torch is imported); "auto" chooses one
# of them for the device (workload.resnet_ddp.choose_dtype)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
AUTO_DTYPE = "auto"
DTYPE_CHOICES = (AUTO_DTYPE, *DTYPES)


class WorkloadError(SettingError):
    """A workload setting that cannot run."""


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    steps: int = 100
    batch_size: int = 10
    image_size: int = 224
    num_classes: int = 1000
    dtype: str = AUTO_DTYPE  # bf16 where the device computes it natively, else fp32
    lr: float = 1e-3
    seed: int = 0
    log_every: int = 10
    threads: int | None = None  # CPU threads per rank; None: the rank's share of its CPUs
    # Fault injection, to see how the job, the cluster and the report deal with it: that rank
    # raises at that step; that rank works that much longer every step (a slow host, say).
    inject_failure: RankAndStep | None = None
    inject_slowdown: RankAndMs | None = None
    inject_hang: RankAndStep | None = None  # that rank stops making progress at that step

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "image_size", "num_classes", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise WorkloadError(f"{{{name}}} {value!r} must be a positive integer")
        if self.image_size < 32:
            # ResNet18 downsamples 32x; smaller inputs fail inside the network, on the node.
            raise WorkloadError(f"{{image_size}} {self.image_size} is below ResNet18's minimum of 32")
        if self.dtype not in DTYPE_CHOICES:
            raise WorkloadError(f"{{dtype}} {self.dtype!r} is not one of {', '.join(DTYPE_CHOICES)}")
        if not self.lr > 0:
            raise WorkloadError(f"{{lr}} {self.lr!r} must be positive")
        for name in ("inject_failure", "inject_hang"):
            fault = getattr(self, name)
            if fault is not None and (fault.rank < 0 or not 0 <= fault.step < self.steps):
                raise WorkloadError(
                    f"{{{name}}} {fault} needs a rank >= 0 and a step below {{steps}} {self.steps}"
                )
        slowdown = self.inject_slowdown
        if slowdown is not None and (slowdown.rank < 0 or not 0 < slowdown.ms <= 60_000):
            raise WorkloadError(
                f"{{inject_slowdown}} {slowdown} needs a rank >= 0 and 1 to 60000 ms of extra work per step"
            )
        if slowdown is not None and slowdown.windowed:
            last = self.steps - 1 if slowdown.last is None else slowdown.last
            if not 0 <= slowdown.first <= last < self.steps:
                raise WorkloadError(
                    f"{{inject_slowdown}} {slowdown}: steps {slowdown.first}-{last} are not within the "
                    f"run's steps 0-{self.steps - 1}. HINT: write RANK:MS@FIRST-LAST with "
                    f"FIRST <= LAST < {{steps}} {self.steps}"
                )
        if self.threads is not None and self.threads < 1:
            raise WorkloadError(f"{{threads}} {self.threads} must be at least 1")

    def check_ranks(self, world_size: int) -> None:
        """Refuse an injected fault on a rank the job does not have."""
        for name in ("inject_failure", "inject_slowdown", "inject_hang"):
            fault = getattr(self, name)
            if fault is not None and fault.rank >= world_size:
                raise WorkloadError(
                    f"{{{name}}} {fault} names rank {fault.rank}, but the job has {world_size} ranks "
                    f"(0-{world_size - 1})"
                )
