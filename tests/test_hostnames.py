import pytest

from slurm.hostnames import HostlistError, expand, expand_tasks_per_node


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("node1", ["node1"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("gpu-[01-03,07],login5", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login5"]),
        ("rack[1-2]-node[3-4]", ["rack1-node3", "rack1-node4", "rack2-node3", "rack2-node4"]),
        ("a[0009-0011]", ["a0009", "a0010", "a0011"]),
        ("n[1,3],m[05-06]", ["n1", "n3", "m05", "m06"]),
        ("host.example.org", ["host.example.org"]),
        ("dgx-h100-[0098-0099]", ["dgx-h100-0098", "dgx-h100-0099"]),
    ],
)
def test_expand_keeps_slurm_order_and_padding(expression: str, hosts: list[str]) -> None:
    assert expand(expression) == hosts


@pytest.mark.parametrize("expression", ["gpu-[01", "node[3-1]", "", "  "])
def test_expand_rejects_what_slurm_rejects(expression: str) -> None:
    with pytest.raises(HostlistError):
        expand(expression)


@pytest.mark.parametrize(
    ("expression", "counts"),
    [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("8(x4)", [8, 8, 8, 8]), ("1,2", [1, 2])],
)
def test_tasks_per_node(expression: str, counts: list[int]) -> None:
    assert expand_tasks_per_node(expression) == counts


@pytest.mark.parametrize("expression", ["", "2(x", "x3", "2(x3", "2(3)"])
def test_tasks_per_node_rejects_garbage(expression: str) -> None:
    with pytest.raises(ValueError, match="tasks-per-node format"):
        expand_tasks_per_node(expression)
