"""Property tests of what the scheduler feeds: hostlists, tasks per node and SLURM environments
either parse to something consistent or are refused with our one-line error, fast, never a
traceback (the command line's values: tests/test_properties.py, whose helpers these share)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from slurm import hostnames
from slurm.identity import DistributedEnvError, from_environment
from tests.test_properties import PROPERTIES, accepting, number, refused, small_text, timed

# --- what the scheduler feeds: hostlists, tasks per node ---------------------------------------------

hostlist_text = st.one_of(
    small_text,
    st.lists(
        st.tuples(
            st.sampled_from(["n", "gpu-", "node", "a1b", ""]),
            st.one_of(
                st.just(""),
                st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)).map(lambda ab: f"[{ab[0]}-{ab[1]}]"),
                st.text(alphabet="[]0123456789-,", max_size=12),
            ),
        ).map("".join),
        max_size=20,
    ).map(",".join),
)


@accepting(0.2)
@PROPERTIES
@given(expression=hostlist_text)
def test_hostlists(expression: str) -> None:
    hosts, error = timed(lambda: hostnames.expand(expression))
    if refused(error, hostnames.HostlistError):
        return
    assert hosts and all(hosts) and len(hosts) <= hostnames.MAX_HOSTS


tasks_per_node_text = st.one_of(
    small_text,
    st.lists(
        st.tuples(
            st.integers(-1, 10**6), st.one_of(st.just(""), st.integers(-1, 10**9).map(lambda n: f"(x{n})"))
        ).map(lambda cx: f"{cx[0]}{cx[1]}"),
        max_size=20,
    ).map(",".join),
)


@accepting(0.2)
@PROPERTIES
@given(expression=tasks_per_node_text)
def test_tasks_per_node(expression: str) -> None:
    counts, error = timed(lambda: hostnames.expand_tasks_per_node(expression))
    if refused(error, hostnames.HostlistError):
        return
    assert all(isinstance(count, int) and count >= 0 for count in counts)


@st.composite
def consistent_slurm(draw: st.DrawFn) -> tuple[str, str, int, int]:
    """(node list, tasks per node, tasks, process id) of rank 0 of a 2-node job, as srun sets them."""
    prefix, number = draw(st.sampled_from(["node", "gpu-", "a1b", "n"])), draw(st.integers(0, 10**6))
    nodelist = draw(
        st.sampled_from([f"{prefix}[{number}-{number + 1}]", f"{prefix}{number},{prefix}{number + 7}"])
    )
    first, second = draw(st.integers(1, 64)), draw(st.integers(1, 64))
    tasks_per_node = f"{first}(x2)" if first == second else f"{first},{second}"
    return nodelist, tasks_per_node, first + second, 0


@accepting(0.2)
@PROPERTIES
@given(job=st.one_of(consistent_slurm(), st.tuples(hostlist_text, tasks_per_node_text, number, number)))
def test_slurm_environment(job: tuple[str, str, Any, Any]) -> None:
    nodelist, tasks_per_node, ntasks, procid = job
    env = {
        "SLURM_JOB_ID": "12",
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NTASKS": str(ntasks),
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
    }
    identity, error = timed(lambda: from_environment(env))
    if refused(error, DistributedEnvError):
        return
    assert 0 <= identity.rank < identity.world_size
    assert len(identity.hostnames) == identity.num_nodes == 2
    assert identity.node_name == identity.hostnames[0]
