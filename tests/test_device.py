import pytest

from workload.distributed import _gpu_index


def test_gpu_by_local_rank_not_global_rank() -> None:
    assert [_gpu_index(local_rank, 8) for local_rank in range(8)] == list(range(8))


def test_one_bound_gpu_per_task_is_cuda0() -> None:
    assert _gpu_index(5, 1) == 0


def test_more_tasks_than_gpus() -> None:
    with pytest.raises(RuntimeError, match="LOCAL_RANK=4 but this task sees 4 GPUs"):
        _gpu_index(4, 4)
