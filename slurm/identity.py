"""One task's distributed identity, derived once from the environment.

The launcher decides where the ranks come from, checked in this order:

1. torchrun (or any launcher speaking its protocol): ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``
   and ``MASTER_ADDR``/``MASTER_PORT`` are already set, so they are taken as they are.
2. submitit's local executor (``SUBMITIT_EXECUTOR=local``). It is checked before SLURM because
   its tasks are spawned on the submitting host and inherit whatever ``SLURM_*`` variables that
   shell had (an ``salloc`` session, say); those describe the allocation, not these tasks.
3. SLURM: a task started by ``srun`` (``SLURM_PROCID`` is set).
4. Otherwise a single process (plain ``python``, submitit's debug executor).

Every reader gets the environment as a mapping, so tests pass plain dicts and nothing here
reads or writes ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Mapping

from slurm import hostnames
from slurm.launchers import Executor, Launcher

# SLURM's variable names, in one table. Step variables come first where both exist: inside
# ``srun`` they describe the tasks actually launched, which is what the ranks must match.
SLURM_VARS: Mapping[str, tuple[str, ...]] = {
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "job_name": ("SLURM_JOB_NAME",),
    "array_job_id": ("SLURM_ARRAY_JOB_ID",),
    "array_task_id": ("SLURM_ARRAY_TASK_ID",),
    "rank": ("SLURM_PROCID",),
    "local_rank": ("SLURM_LOCALID",),
    "world_size": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
    "node_rank": ("SLURM_NODEID",),
    "num_nodes": ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "nodelist": ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "tasks_per_node": ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    "restart_count": ("SLURM_RESTART_COUNT",),
    "cpus_per_task": ("SLURM_CPUS_PER_TASK",),
    "gpus_on_node": ("SLURM_GPUS_ON_NODE",),  # set when the job asked for GPUs (gres)
}

TORCHRUN_VARS: Mapping[str, str] = {
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "world_size": "WORLD_SIZE",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "GROUP_RANK",
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
    "run_id": "TORCHELASTIC_RUN_ID",
    "restart_count": "TORCHELASTIC_RESTART_COUNT",
}

SUBMITIT_LOCAL_VARS: Mapping[str, str] = {
    "executor": "SUBMITIT_EXECUTOR",
    "job_id": "SUBMITIT_LOCAL_JOB_ID",
    "rank": "SUBMITIT_LOCAL_GLOBALID",
    "local_rank": "SUBMITIT_LOCAL_LOCALID",
    "world_size": "SUBMITIT_LOCAL_NTASKS",
    "node_rank": "SUBMITIT_LOCAL_NODEID",
    "num_nodes": "SUBMITIT_LOCAL_JOB_NUM_NODES",
}

SUBMITIT_DEBUG_JOB_ID = "SUBMITIT_DEBUG_JOB_ID"
# Set by the user to override what is derived (e.g. a node's name on the fast network).
USER_MASTER_ADDR = "MASTER_ADDR"
USER_MASTER_PORT = "MASTER_PORT"

# Derived ports stay below Linux's ephemeral range (32768+) so that they do not collide with
# the client side of other connections on the node.
_PORT_BASE, _PORT_SPAN = 15000, 15000


class DistributedEnvError(ValueError):
    """The environment describes no consistent set of ranks."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedIdentity:
    """Who this process is in the job. Immutable; built once per task by :func:`from_environment`."""

    launcher: Launcher  # what started the job: slurm, submitit-local, torchrun or single
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    job_id: str
    restart_count: int = 0
    hostnames: tuple[str, ...] = ()
    cpus_per_task: int | None = None
    gpus_on_node: int | None = None  # GPUs SLURM gave this node's tasks; None: not under SLURM, or none asked
    job_name: str | None = None  # SLURM's; None outside SLURM

    def __post_init__(self) -> None:
        _check_below("rank", self.rank, "world_size", self.world_size)
        _check_below("local_rank", self.local_rank, "local_world_size", self.local_world_size)
        _check_below("node_rank", self.node_rank, "num_nodes", self.num_nodes)
        if not 0 < self.master_port < 65536:
            raise DistributedEnvError(f"master_port={self.master_port} is not a TCP port (1-65535)")
        if not self.job_id:
            raise DistributedEnvError("job_id is empty")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def node_name(self) -> str | None:
        """This task's node as the scheduler names it (None where no node list is known)."""
        return self.hostnames[self.node_rank] if self.hostnames else None


def from_environment(env: Mapping[str, str] | None = None) -> DistributedIdentity:
    """Derive the identity of this process; ``env`` defaults to the process environment."""
    env = os.environ if env is None else env
    if TORCHRUN_VARS["rank"] in env and TORCHRUN_VARS["world_size"] in env:
        return _from_torchrun(env)
    if env.get(SUBMITIT_LOCAL_VARS["executor"]) == Executor.LOCAL and SUBMITIT_LOCAL_VARS["job_id"] in env:
        return _from_submitit_local(env)
    if "SLURM_PROCID" in env:
        return _from_slurm(env)
    ntasks = _first(env, SLURM_VARS["world_size"])
    if ntasks is not None and ntasks.strip() not in ("", "1"):
        raise DistributedEnvError(
            f"SLURM_NTASKS={ntasks} but SLURM_PROCID is not set: this process was not started by "
            "srun, so it cannot know its rank. HINT: launch the tasks with `srun python -m jobs.task ...`"
        )
    return _single_process(env)


def derived_master_port(job_id: str) -> int:
    """A port every task of ``job_id`` computes alike, without talking to the others."""
    return _PORT_BASE + zlib.crc32(job_id.encode()) % _PORT_SPAN


def _from_torchrun(env: Mapping[str, str]) -> DistributedIdentity:
    v = TORCHRUN_VARS
    world_size = _int(env, v["world_size"], minimum=1)
    local_world_size = _int(env, v["local_world_size"], default=world_size, minimum=1)
    if world_size % local_world_size:
        raise DistributedEnvError(
            f"WORLD_SIZE={world_size} is not a multiple of LOCAL_WORLD_SIZE={local_world_size}. "
            "HINT: start the same number of processes on every node (torchrun --nproc-per-node)"
        )
    slurm_job = _first(env, SLURM_VARS["job_id"])
    job_id = slurm_job or env.get(v["run_id"]) or f"torchrun-{os.getppid()}"
    return DistributedIdentity(
        launcher=Launcher.TORCHRUN,
        rank=_int(env, v["rank"], minimum=0),
        local_rank=_int(env, v["local_rank"], default=0, minimum=0),
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=_int(env, v["node_rank"], default=0, minimum=0),
        num_nodes=world_size // local_world_size,
        master_addr=_required(env, v["master_addr"], "torchrun sets it; set it to the host of rank 0"),
        master_port=_int(env, v["master_port"], minimum=1),
        job_id=job_id,
        restart_count=_int(env, v["restart_count"], default=0, minimum=0),
        cpus_per_task=_optional_int(env, SLURM_VARS["cpus_per_task"]),
    )


def _from_submitit_local(env: Mapping[str, str]) -> DistributedIdentity:
    v = SUBMITIT_LOCAL_VARS
    world_size = _int(env, v["world_size"], minimum=1)
    rank = _int(env, v["rank"], minimum=0)
    _check_below(v["rank"], rank, v["world_size"], world_size, hint="these come from submitit")
    job_id = env[v["job_id"]]
    return DistributedIdentity(
        launcher=Launcher.LOCAL,
        rank=rank,
        local_rank=_int(env, v["local_rank"], minimum=0),
        world_size=world_size,
        local_world_size=world_size,  # the local executor runs a single node
        node_rank=0,
        num_nodes=1,
        master_addr="127.0.0.1",
        master_port=_master_port(env, job_id),
        job_id=job_id,
    )


def _from_slurm(env: Mapping[str, str]) -> DistributedIdentity:
    names = {key: _name_in(env, candidates) for key, candidates in SLURM_VARS.items()}
    srun_hint = "srun sets it for every task; launch the tasks with `srun`, inside `sbatch` or `salloc`"

    def required_int(key: str, minimum: int) -> int:
        if _first(env, SLURM_VARS[key]) is None:
            raise DistributedEnvError(f"{names[key]} is not set. HINT: {srun_hint}")
        return _int(env, names[key], minimum=minimum)

    rank = required_int("rank", 0)
    world_size = required_int("world_size", 1)
    _check_below(names["rank"], rank, names["world_size"], world_size, hint=srun_hint)
    local_rank = required_int("local_rank", 0)
    node_rank = required_int("node_rank", 0)
    num_nodes = required_int("num_nodes", 1)
    _check_below(names["node_rank"], node_rank, names["num_nodes"], num_nodes, hint=srun_hint)

    nodelist = _first(env, SLURM_VARS["nodelist"])
    if nodelist is None:
        raise DistributedEnvError(f"{names['nodelist']} is not set. HINT: {srun_hint}")
    try:
        hosts = tuple(hostnames.expand(nodelist))
    except hostnames.HostlistError as error:
        raise DistributedEnvError(f"{names['nodelist']}={nodelist!r}: {error}") from error
    if len(hosts) != num_nodes:
        raise DistributedEnvError(
            f"{names['nodelist']}={nodelist!r} names {len(hosts)} hosts but "
            f"{names['num_nodes']}={num_nodes}. HINT: {srun_hint}"
        )

    local_world_size = _slurm_local_world_size(env, names["tasks_per_node"], node_rank, num_nodes, world_size)
    _check_below(
        names["local_rank"], local_rank, f"the tasks on node {node_rank}", local_world_size, hint=srun_hint
    )

    job_id = _first(env, SLURM_VARS["job_id"])
    if not job_id:
        raise DistributedEnvError(f"SLURM_JOB_ID is not set. HINT: {srun_hint}")
    array_job, array_task = _first(env, SLURM_VARS["array_job_id"]), _first(env, SLURM_VARS["array_task_id"])
    if array_job and array_task:
        job_id = f"{array_job}_{array_task}"  # the id users see in squeue and sacct

    return DistributedIdentity(
        launcher=Launcher.SLURM,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=env.get(USER_MASTER_ADDR) or hosts[0],
        master_port=_master_port(env, job_id),
        job_id=job_id,
        restart_count=_int(env, "SLURM_RESTART_COUNT", default=0, minimum=0),
        hostnames=hosts,
        cpus_per_task=_optional_int(env, SLURM_VARS["cpus_per_task"]),
        gpus_on_node=_optional_int(env, SLURM_VARS["gpus_on_node"], minimum=0),
        job_name=_first(env, SLURM_VARS["job_name"]) or None,
    )


def _slurm_local_world_size(
    env: Mapping[str, str], name: str, node_rank: int, num_nodes: int, world_size: int
) -> int:
    value = env.get(name)
    if value is None:  # old Slurm versions; only an even spread is then possible
        if world_size % num_nodes:
            raise DistributedEnvError(
                f"SLURM_TASKS_PER_NODE is not set and SLURM_NTASKS={world_size} does not divide evenly "
                f"over {num_nodes} nodes. HINT: use --ntasks-per-node"
            )
        return world_size // num_nodes
    try:
        counts = hostnames.expand_tasks_per_node(value)
    except ValueError as error:
        raise DistributedEnvError(f"{name}={value!r}: {error}") from error
    if len(counts) != num_nodes or sum(counts) != world_size:
        raise DistributedEnvError(
            f"{name}={value!r} describes {len(counts)} nodes and {sum(counts)} tasks, but the job has "
            f"{num_nodes} nodes and {world_size} tasks. HINT: launch the tasks with `srun`"
        )
    return counts[node_rank]


def _single_process(env: Mapping[str, str]) -> DistributedIdentity:
    job_id = env.get(SUBMITIT_DEBUG_JOB_ID) or env.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    return DistributedIdentity(
        launcher=Launcher.SINGLE,
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        master_addr="127.0.0.1",
        master_port=_master_port(env, job_id),
        job_id=job_id,
        cpus_per_task=_optional_int(env, SLURM_VARS["cpus_per_task"]),
    )


def _master_port(env: Mapping[str, str], job_id: str) -> int:
    if USER_MASTER_PORT in env:
        return _int(env, USER_MASTER_PORT, minimum=1)
    return derived_master_port(job_id)


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in env:
            return env[name]
    return None


def _name_in(env: Mapping[str, str], names: tuple[str, ...]) -> str:
    """The first of ``names`` that is set, else all of them (for the error message)."""
    return next((name for name in names if name in env), " / ".join(names))


def _required(env: Mapping[str, str], name: str, hint: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise DistributedEnvError(f"{name} is not set. HINT: {hint}")
    return value


def _int(env: Mapping[str, str], name: str, *, minimum: int, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        if default is None:
            raise DistributedEnvError(f"{name} is not set")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise DistributedEnvError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise DistributedEnvError(f"{name}={value} must be at least {minimum}")
    return value


def _optional_int(env: Mapping[str, str], names: tuple[str, ...], minimum: int = 1) -> int | None:
    name = _name_in(env, names)
    return _int(env, name, minimum=minimum) if name in env else None


def _check_below(name: str, value: int, limit_name: str, limit: int, hint: str = "") -> None:
    if not 0 <= value < limit:
        message = f"{name}={value} is not below {limit_name}={limit}: valid values are 0 to {limit - 1}"
        raise DistributedEnvError(f"{message}. HINT: {hint}" if hint else message)
