"""Settings of the ResNet18 training-step workload (torch-free: the submit path validates them)."""

from __future__ import annotations

import dataclasses

DTYPES = ("bf16", "fp16", "fp32")


class WorkloadError(ValueError):
    """A workload setting that cannot run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    steps: int = 100
    batch_size: int = 10
    image_size: int = 224
    num_classes: int = 1000
    dtype: str = "bf16"
    lr: float = 1e-3
    seed: int = 0
    log_every: int = 10
    threads: int | None = None  # CPU threads per rank; None: the rank's share of its CPUs
    # Fault injection (--inject-failure RANK:STEP): that rank raises at that step, to see how
    # the job and the cluster deal with a dead rank.
    fail_rank: int | None = None
    fail_step: int = 0

    def __post_init__(self) -> None:
        for option, value in (
            ("--steps", self.steps),
            ("--batch-size", self.batch_size),
            ("--image-size", self.image_size),
            ("--num-classes", self.num_classes),
            ("--log-every", self.log_every),
        ):
            if not isinstance(value, int) or value < 1:
                raise WorkloadError(f"{option} {value!r} must be a positive integer")
        if self.image_size < 32:
            # ResNet18 downsamples 32x; smaller inputs fail inside the network, on the node.
            raise WorkloadError(f"--image-size {self.image_size} is below ResNet18's minimum of 32")
        if self.dtype not in DTYPES:
            raise WorkloadError(f"--dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if not self.lr > 0:
            raise WorkloadError(f"--lr {self.lr!r} must be positive")
        if self.fail_rank is not None and (self.fail_rank < 0 or not 0 <= self.fail_step < self.steps):
            raise WorkloadError(
                f"--inject-failure {self.fail_rank}:{self.fail_step} needs a rank >= 0 and a step below --steps {self.steps}"
            )
        if self.threads is not None and self.threads < 1:
            raise WorkloadError(f"--threads-per-rank {self.threads} must be at least 1")
