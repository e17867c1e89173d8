"""The parallel LM's settings (``--workload-arg`` of ``--parallel``), checked whole: torch-free, so
that the login node refuses a job the ranks would refuse, before anything is queued, by the same
code the ranks run (:mod:`workload.parallel_lm`).

``layers`` (per stage, default 2), ``last_stage_layers`` (the last stage's, default ``layers``),
``dim`` (64), ``heads`` (4), ``seq`` (32), ``vocab`` (256), ``microbatches`` (1F1B's, at least 4;
by default the fewest from 4 up that split the batch: ``--parallel dp=2,pp=2`` with the default
batch of 10 runs 5 of 2). Each has a bound past which no test job fits a node.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm.common.mesh import Dims, mesh_dims
from workload.errors import WorkloadError

DEFAULTS = {"layers": 2, "dim": 64, "heads": 4, "seq": 32, "vocab": 256}
MIN_MICROBATCHES = 4  # 1F1B's steady state needs a few in flight
# beyond these a toy LM is no longer one: dim 10^9 was accepted, and failed in every rank
BOUNDS = {
    "layers": 1024,
    "last_stage_layers": 1024,
    "dim": 65536,
    "heads": 1024,
    "seq": 65536,
    "vocab": 1 << 20,
    "microbatches": 4096,
}


def lm_settings(args: Mapping[str, str], parallel: Dims | None, batch_size: int) -> dict[str, int]:
    """The model's settings from ``--workload-arg`` for a job of ``parallel`` sizes and
    ``batch_size`` sequences; raises :class:`WorkloadError` naming the one that cannot run, with
    a HINT."""
    for key in args:
        if key not in BOUNDS:
            raise WorkloadError(
                f"{{args}} {key}={args[key]}: the parallel LM has no setting {key}. "
                f"HINT: one of {', '.join(sorted(BOUNDS))}"
            )
    found: dict[str, int] = dict(DEFAULTS)
    for key, value in args.items():
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= BOUNDS[key]:
            raise WorkloadError(
                f"{{args}} {key}={value} must be an integer from 1 to {BOUNDS[key]}. HINT: "
                f"--workload-arg {key}={DEFAULTS.get(key, MIN_MICROBATCHES)}"
            )
        found[key] = int(value)
    found.setdefault("last_stage_layers", found["layers"])
    if found["dim"] % found["heads"]:
        raise WorkloadError(
            f"{{args}} dim={found['dim']} is not a multiple of heads={found['heads']}. "
            f"HINT: --workload-arg dim={found['heads'] * max(1, found['dim'] // found['heads'])}"
        )
    sizes = dict(mesh_dims(parallel)) if parallel else {}
    tp, pp = sizes.get("tp", 1), sizes.get("pp", 1)
    if found["heads"] % tp:
        raise WorkloadError(
            f"{{args}} heads={found['heads']} cannot be split over tp={tp}. HINT: heads a multiple of "
            f"{tp}, e.g. --workload-arg heads={tp * max(1, found['heads'] // tp)} --workload-arg "
            f"dim={tp * max(1, found['heads'] // tp) * 16}"
        )
    found["microbatches"] = _microbatches(found.get("microbatches"), batch_size, pp)
    return found


def _microbatches(asked: int | None, batch: int, stages: int) -> int:
    """1F1B's microbatches: as asked, where at least 4 that split the batch; else the fewest
    from 4 up that split it (one stage needs none: the batch is one)."""
    if stages == 1:
        return asked or MIN_MICROBATCHES
    if asked is not None:
        if asked < MIN_MICROBATCHES:
            raise WorkloadError(
                f"{{args}} microbatches={asked}: 1F1B needs at least {MIN_MICROBATCHES}. "
                f"HINT: --workload-arg microbatches={MIN_MICROBATCHES}"
            )
        if batch % asked:
            raise WorkloadError(
                f"{{batch_size}} {batch} does not split into microbatches={asked}. "
                f"HINT: a multiple of it, e.g. {{batch_size}} {MIN_MICROBATCHES * asked}"
            )
        return asked
    found = next((m for m in range(MIN_MICROBATCHES, batch + 1) if batch % m == 0), None)
    if found is None:
        raise WorkloadError(
            f"{{batch_size}} {batch} is too small to split into {MIN_MICROBATCHES} microbatches for "
            f"{stages} pipeline stages. HINT: {{batch_size}} {2 * MIN_MICROBATCHES}"
        )
    return found
