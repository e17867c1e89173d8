import pytest

from jobs.runtime.distributed import _gpu_index


def test_gpu_by_local_rank_not_global_rank() -> None:
    assert [_gpu_index(local_rank, 8) for local_rank in range(8)] == list(range(8))


def test_one_bound_gpu_per_task_is_cuda0() -> None:
    assert _gpu_index(5, 1) == 0


def test_more_tasks_than_gpus() -> None:
    with pytest.raises(RuntimeError, match="LOCAL_RANK=4 but this task sees 4 GPUs"):
        _gpu_index(4, 4)


def identity(source: str, gpus_on_node: int | None):
    from slurm.identity import DistributedIdentity
    from slurm.launchers import Launcher

    return DistributedIdentity(
        launcher=Launcher(source), rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0,
        num_nodes=1, master_addr="h", master_port=1234, job_id="1", gpus_on_node=gpus_on_node,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("source", "gpus_on_node", "device", "cuda_available", "expected"),
    [
        ("slurm", 4, "auto", True, True),  # SLURM gave this node's tasks GPUs
        ("slurm", None, "auto", True, False),  # a CPU job on a GPU node: GPUs seen, none given
        ("slurm", 0, "auto", True, False),
        ("submitit-local", None, "auto", True, True),
        ("torchrun", None, "auto", False, False),
        ("slurm", 4, "cpu", True, False),  # --gpus 0 / --device cpu
        ("slurm", None, "cuda", True, True),  # a site without GPU gres: --device cuda
    ],
)
def test_uses_gpu(monkeypatch, source, gpus_on_node, device, cuda_available, expected) -> None:
    from jobs.runtime import distributed

    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: cuda_available)
    assert distributed.uses_gpu(identity(source, gpus_on_node), device) is expected


def test_cuda_asked_for_where_there_is_none(monkeypatch) -> None:
    from jobs.runtime import distributed

    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="--device cuda but torch sees no GPU"):
        distributed.uses_gpu(identity("slurm", 2), "cuda")


def test_auto_dtype_is_bf16_only_where_the_device_computes_it(monkeypatch) -> None:
    import torch

    from workload.loop import choose_dtype

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert choose_dtype("auto", cpu) == (
        "fp32",
        "auto: the CPU has no native bf16 (no AVX-512 BF16 or AMX), where bf16 runs ~40x slower",
    )
    assert choose_dtype("bf16", cpu) == ("bf16", "--dtype bf16")  # forced: as asked
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert choose_dtype("auto", cpu) == ("bf16", "auto: the CPU computes bf16 natively (AMX)")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert choose_dtype("auto", gpu) == ("bf16", "auto: NVIDIA H200 computes bf16 natively")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert choose_dtype("auto", gpu)[0] == "fp32"
