"""A function over chunks, the others forked (slurm/common/forked.py): results in order,
each chunk's made in a child that shares this process's memory, a child's exception raised
here, a child that dies said, and nothing forked once torch is imported."""

from __future__ import annotations

import os
import sys

import pytest

from slurm.common.forked import forked_map


@pytest.fixture
def fork_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite has imported torch (other tests): this process forks as if it had not (the
    children run no torch)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)


@pytest.mark.usefixtures("fork_safe")
def test_each_chunk_after_the_first_is_made_in_a_child_and_the_results_come_in_order() -> None:
    here = os.getpid()
    shared = {"made before the fork": 41}  # read in the children as it is here: nothing pickled

    def made(chunk: list[int]) -> tuple[int, int, int]:
        return sum(chunk) + shared["made before the fork"], os.getpid(), os.getppid()

    found = forked_map(made, [[1], [2, 3], [4]])
    assert [total for total, _, _ in found] == [42, 46, 45]
    assert found[0][1] == here
    assert all(pid != here and parent == here for _, pid, parent in found[1:])
    assert len({pid for _, pid, _ in found}) == 3


@pytest.mark.usefixtures("fork_safe")
def test_a_childs_exception_is_raised_here() -> None:
    def made(chunk: int) -> int:
        if chunk == 2:
            raise ValueError(f"chunk {chunk} is bad")
        return chunk

    with pytest.raises(ValueError, match="chunk 2 is bad"):
        forked_map(made, [1, 2])


@pytest.mark.usefixtures("fork_safe")
def test_a_child_that_dies_without_its_result_is_said() -> None:
    def made(chunk: int) -> int:
        if chunk == 2:
            os._exit(3)
        return chunk

    with pytest.raises(ChildProcessError, match="ended without its result \\(exit code 3\\)"):
        forked_map(made, [1, 2])


def test_nothing_is_forked_once_torch_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())  # type: ignore[arg-type]
    assert forked_map(lambda chunk: (chunk, os.getpid()), [1, 2]) == [(1, os.getpid()), (2, os.getpid())]
