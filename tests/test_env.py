"""Distributed identity from faked environments: every launcher, every inconsistency."""

import os

import pytest

from slurm.identity import DistributedEnvError, derived_master_port, from_environment


def slurm_env(**overrides: str) -> dict[str, str]:
    """Rank 5 of a 2-node x 4-task srun step, as Slurm sets it."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "8",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu-[07-08]",
        "SLURM_TASKS_PER_NODE": "4(x2)",
    }
    env.update(overrides)
    return {key: value for key, value in env.items() if value is not None}


def test_slurm_identity() -> None:
    identity = from_environment(slurm_env())
    assert identity.launcher == "slurm"
    assert (identity.rank, identity.local_rank, identity.world_size) == (5, 1, 8)
    assert (identity.node_rank, identity.num_nodes, identity.local_world_size) == (1, 2, 4)
    assert identity.master_addr == "gpu-07"
    assert identity.hostnames == ("gpu-07", "gpu-08")
    assert identity.job_id == "4242"
    assert identity.restart_count == 0
    assert not identity.is_main and identity.is_distributed


@pytest.mark.parametrize(
    ("nodelist", "num_nodes", "master"),
    [
        ("gpu-[01-03,07],login5", "5", "gpu-01"),
        ("rack[1-2]-node[3-4]", "4", "rack1-node3"),
        ("a[0009-0011]", "3", "a0009"),
        ("single", "1", "single"),
        ("x1000c0s0b0n[0-1]", "2", "x1000c0s0b0n0"),
    ],
)
def test_master_addr_is_first_host_of_any_hostlist(nodelist: str, num_nodes: str, master: str) -> None:
    env = slurm_env(
        SLURM_JOB_NODELIST=nodelist,
        SLURM_JOB_NUM_NODES=num_nodes,
        SLURM_NODEID="0",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
        SLURM_NTASKS=num_nodes,
        SLURM_TASKS_PER_NODE=f"1(x{num_nodes})",
    )
    assert from_environment(env).master_addr == master


def test_uneven_tasks_per_node() -> None:
    env = slurm_env(SLURM_NTASKS="7", SLURM_TASKS_PER_NODE="4,3", SLURM_PROCID="6", SLURM_LOCALID="2")
    assert from_environment(env).local_world_size == 3


def test_step_variables_win_over_job_variables() -> None:
    env = slurm_env(
        SLURM_STEP_NODELIST="gpu-08",
        SLURM_STEP_NUM_NODES="1",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_STEP_TASKS_PER_NODE="4",
        SLURM_NODEID="0",
        SLURM_PROCID="3",
        SLURM_LOCALID="3",
    )
    identity = from_environment(env)
    assert (identity.world_size, identity.num_nodes, identity.master_addr) == (4, 1, "gpu-08")


def test_array_job_id_and_restart_count() -> None:
    env = slurm_env(SLURM_ARRAY_JOB_ID="4240", SLURM_ARRAY_TASK_ID="2", SLURM_RESTART_COUNT="3")
    identity = from_environment(env)
    assert identity.job_id == "4240_2"
    assert identity.restart_count == 3


def test_master_port_is_derived_from_job_id_and_same_on_every_rank() -> None:
    ports = {
        from_environment(
            slurm_env(SLURM_PROCID=str(r), SLURM_LOCALID=str(r % 4), SLURM_NODEID=str(r // 4))
        ).master_port
        for r in range(8)
    }
    assert ports == {derived_master_port("4242")}
    assert 15000 <= derived_master_port("4242") < 30000
    assert derived_master_port("4242") != derived_master_port("4243")


def test_user_master_port_wins() -> None:
    assert from_environment(slurm_env(MASTER_PORT="29512")).master_port == 29512


def test_gpus_on_node() -> None:
    assert from_environment(slurm_env(SLURM_GPUS_ON_NODE="4")).gpus_on_node == 4
    assert from_environment(slurm_env()).gpus_on_node is None  # a job that asked for no GPU


def test_cpus_per_task() -> None:
    assert from_environment(slurm_env(SLURM_CPUS_PER_TASK="6")).cpus_per_task == 6
    assert from_environment(slurm_env()).cpus_per_task is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLURM_PROCID": "8"}, r"SLURM_PROCID=8 is not below SLURM_NTASKS=8.*HINT"),
        ({"SLURM_PROCID": "x"}, r"SLURM_PROCID='x' is not an integer"),
        ({"SLURM_PROCID": "-1"}, r"SLURM_PROCID=-1 must be at least 0"),
        ({"SLURM_NTASKS": None}, r"SLURM_STEP_NUM_TASKS / SLURM_NTASKS is not set. HINT: srun"),
        ({"SLURM_LOCALID": None}, r"SLURM_LOCALID is not set"),
        ({"SLURM_LOCALID": "4"}, r"SLURM_LOCALID=4 is not below the tasks on node 1=4"),
        ({"SLURM_NODEID": "2"}, r"SLURM_NODEID=2 is not below SLURM_JOB_NUM_NODES=2"),
        ({"SLURM_JOB_NODELIST": "gpu-[07"}, r"SLURM_JOB_NODELIST='gpu-\[07'.*not a valid Slurm hostlist"),
        ({"SLURM_JOB_NODELIST": "gpu-07"}, r"names 1 hosts but SLURM_JOB_NUM_NODES=2"),
        ({"SLURM_JOB_NODELIST": None}, r"NODELIST is not set"),
        ({"SLURM_TASKS_PER_NODE": "4"}, r"SLURM_TASKS_PER_NODE='4' describes 1 nodes and 4 tasks"),
        ({"SLURM_TASKS_PER_NODE": "four"}, r"SLURM_TASKS_PER_NODE='four'.*format"),
        (
            {"SLURM_TASKS_PER_NODE": None, "SLURM_NTASKS": "7", "SLURM_PROCID": "1"},
            r"does not divide evenly.*--ntasks-per-node",
        ),
        ({"SLURM_JOB_ID": None}, r"SLURM_JOB_ID is not set"),
        ({"SLURM_RESTART_COUNT": "again"}, r"SLURM_RESTART_COUNT='again' is not an integer"),
        ({"MASTER_PORT": "70000"}, r"master_port=70000 is not a TCP port"),
    ],
)
def test_slurm_errors_name_the_variable_and_value(overrides: dict, message: str) -> None:
    with pytest.raises(DistributedEnvError, match=message):
        from_environment(slurm_env(**overrides))


def test_batch_shell_without_srun_is_refused() -> None:
    env = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n[1-2]"}
    with pytest.raises(
        DistributedEnvError, match=r"SLURM_NTASKS=4 but SLURM_PROCID is not set.*HINT: .*srun"
    ):
        from_environment(env)


def test_torchrun_variables_come_first() -> None:
    env = slurm_env(
        RANK="3",
        LOCAL_RANK="1",
        WORLD_SIZE="4",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="1",
        MASTER_ADDR="10.0.0.1",
        MASTER_PORT="29500",
        TORCHELASTIC_RESTART_COUNT="1",
    )
    identity = from_environment(env)
    assert identity.launcher == "torchrun"
    assert (identity.rank, identity.local_rank, identity.world_size, identity.node_rank) == (3, 1, 4, 1)
    assert (identity.num_nodes, identity.master_addr, identity.master_port) == (2, "10.0.0.1", 29500)
    assert identity.job_id == "4242"  # the SLURM job around torchrun names the folder
    assert identity.restart_count == 1


def test_torchrun_without_master_addr() -> None:
    with pytest.raises(DistributedEnvError, match="MASTER_ADDR is not set. HINT"):
        from_environment({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1234"})


def test_torchrun_rank_outside_world() -> None:
    env = {"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1234", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(DistributedEnvError, match="rank=2 is not below world_size=2"):
        from_environment(env)


def submitit_local_env(**overrides: str) -> dict[str, str]:
    env = {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": "777",
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_NODEID": "0",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
    }
    env.update(overrides)
    return env


def test_submitit_local_identity_ignores_inherited_slurm_variables() -> None:
    identity = from_environment({**slurm_env(), **submitit_local_env()})
    assert identity.launcher == "submitit-local"
    assert (identity.rank, identity.world_size, identity.local_world_size, identity.job_id) == (
        1,
        2,
        2,
        "777",
    )
    assert identity.master_addr == "127.0.0.1"


def test_submitit_local_inconsistent() -> None:
    with pytest.raises(
        DistributedEnvError, match="SUBMITIT_LOCAL_GLOBALID=2 is not below SUBMITIT_LOCAL_NTASKS=2"
    ):
        from_environment(submitit_local_env(SUBMITIT_LOCAL_GLOBALID="2"))


def test_single_process_without_any_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    identity = from_environment({})
    assert identity.launcher == "single"
    assert (identity.rank, identity.world_size, identity.num_nodes) == (0, 1, 1)
    assert identity.job_id.startswith("local-")
    assert identity.is_main and not identity.is_distributed


def test_submitit_debug_job_id() -> None:
    assert from_environment({"SUBMITIT_DEBUG_JOB_ID": "DEBUG_1"}).job_id == "DEBUG_1"


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in slurm_env().items():
        monkeypatch.setenv(key, value)
    assert from_environment().rank == 5


def test_reading_the_environment_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    env = slurm_env()
    before = dict(env)
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    environ_before = dict(os.environ)
    from_environment(env)
    assert env == before
    assert dict(os.environ) == environ_before  # e.g. no MASTER_ADDR exported for torch
