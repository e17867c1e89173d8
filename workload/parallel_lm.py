"""The toolkit's own job of many groups (``--parallel dp=2,pp=2,tp=2``): a small decoder-only
transformer LM, data x pipeline x tensor parallel with torch's own APIs, as torchtitan lays
them out:

- a DeviceMesh with named dimensions, ``pp`` outermost, then ``dp``, then ``tp`` (a dimension
  of size 1 is left out of the mesh);
- ``parallelize_module`` over ``tp``: each block's attention and MLP projections split by
  columns, then rows (Megatron's layout: one all-reduce after each);
- ``fully_shard`` (FSDP2) over ``dp``: each block and the stage;
- ``torch.distributed.pipelining`` over ``pp``: each stage holds a contiguous run of blocks
  (the first the embedding, the last the norm and the head), under the 1F1B schedule with
  ``microbatches`` (>= 4) microbatches. The stage is given its shapes (``input_args``,
  ``output_args``): a 2-rank pipeline that infers them at run time hung on gloo.

Settings, by ``--workload-arg``, checked at submit and here by :mod:`workload.lm_settings`:
``layers`` (per stage, default 2), ``last_stage_layers`` (the last stage's: more makes a stage
imbalance), ``dim``, ``heads``, ``seq``, ``vocab``, ``microbatches``. The batch is
``--batch-size`` sequences.

``--parallel`` gives the sizes (:class:`workload.config.WorkloadConfig`). Each collective is
labelled with its process group in the trace (:mod:`profiling.recording.group_labels`), since
gloo records none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from slurm.common.mesh import MESH_ORDER, mesh_dims
from workload.config import DTYPES
from workload.contract import WorkloadContext
from workload.lm_settings import lm_settings


class Block(nn.Module):
    """Pre-norm attention and MLP; under TP each projection holds its shard of the heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.attention_norm = nn.LayerNorm(dim)
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        h = self.attention_norm(x)
        # -1: the heads this tensor-parallel rank holds
        q, k, v = (
            w(h).view(batch, seq, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attended.transpose(1, 2).reshape(batch, seq, -1))
        return x + self.w2(F.gelu(self.w1(self.mlp_norm(x))))


class Stage(nn.Module):
    """One pipeline stage: its blocks, with the embedding on the first and the head on the last."""

    def __init__(self, settings: Mapping[str, int], *, first: bool, last: bool, layers: int) -> None:
        super().__init__()
        dim, vocab = settings["dim"], settings["vocab"]
        self.embedding = nn.Embedding(vocab, dim) if first else None
        self.blocks = nn.ModuleList(Block(dim, settings["heads"]) for _ in range(layers))
        self.norm = nn.LayerNorm(dim) if last else None
        self.head = nn.Linear(dim, vocab, bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for block in self.blocks:
            x = block(x)
        if self.head is not None and self.norm is not None:
            x = self.head(self.norm(x))
        return x


class ParallelLM:
    """One rank's stage of the LM, its optimizer, its fixed batch and its pipeline schedule."""

    replicated = False  # every rank holds its own shard: each saves and loads its own

    def __init__(self, context: WorkloadContext) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        parallel = context.settings.parallel or (("dp", context.identity.world_size),)
        settings = lm_settings(context.args, parallel, context.settings.batch_size)  # as at submit
        dims = mesh_dims(parallel)
        sizes = {name: 1 for name in MESH_ORDER} | dict(dims)
        names = tuple(name for name, _ in dims)
        mesh = init_device_mesh(context.device.type, tuple(size for _, size in dims), mesh_dim_names=names)
        stage = mesh.get_local_rank("pp") if "pp" in names else 0
        stages = sizes["pp"]
        last = stage == stages - 1
        torch.manual_seed(context.settings.seed + stage)  # a stage's replicas start alike
        dtype = getattr(torch, DTYPES[context.dtype])
        layers = settings["last_stage_layers"] if last else settings["layers"]
        self.module = Stage(settings, first=stage == 0, last=last, layers=layers).to(context.device, dtype)
        if "tp" in names:
            _tensor_parallel(self.module, mesh["tp"])
        if "dp" in names:
            _fully_shard(self.module, mesh["dp"])
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=context.settings.lr)
        batch, seq = context.settings.batch_size, settings["seq"]
        micro = batch // settings["microbatches"]
        generator = torch.Generator().manual_seed(
            context.settings.seed + 1 + (mesh.get_local_rank("dp") if "dp" in names else 0)
        )
        self.tokens = torch.randint(settings["vocab"], (batch, seq), generator=generator).to(context.device)
        self.labels = torch.randint(settings["vocab"], (batch, seq), generator=generator).to(context.device)
        self.first, self.last = stage == 0, last
        self.schedule = None
        if stages > 1:
            # the activations a stage receives need their gradient, which it sends back
            hidden = torch.empty(
                micro, seq, settings["dim"], device=context.device, dtype=dtype, requires_grad=True
            )
            tokens = torch.empty(micro, seq, dtype=torch.long, device=context.device)
            logits = torch.empty(micro, seq, settings["vocab"], device=context.device, dtype=dtype)
            pipeline = PipelineStage(
                self.module,
                stage,
                stages,
                context.device,
                input_args=tokens if stage == 0 else hidden,
                output_args=logits if last else hidden,
                group=mesh["pp"].get_group(),
            )
            self.schedule = Schedule1F1B(pipeline, settings["microbatches"], loss_fn=_loss)

    def step(self, step: int) -> torch.Tensor | None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.schedule is None:
            loss = _loss(self.module(self.tokens), self.labels)
            loss.backward()
        else:
            losses: list[torch.Tensor] = []
            if self.first:
                self.schedule.step(self.tokens, target=self.labels if self.last else None, losses=losses)
            else:
                self.schedule.step(target=self.labels if self.last else None, losses=losses)
            loss = torch.stack(losses).mean().detach() if losses else None
        self.optimizer.step()
        return loss.detach() if loss is not None else None

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def _tensor_parallel(stage: Stage, mesh: Any) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = {
        "wq": ColwiseParallel(),
        "wk": ColwiseParallel(),
        "wv": ColwiseParallel(),
        "wo": RowwiseParallel(),
        "w1": ColwiseParallel(),
        "w2": RowwiseParallel(),
    }
    for block in stage.blocks:
        parallelize_module(block, mesh, plan)


def _fully_shard(stage: Stage, mesh: Any) -> None:
    from torch.distributed.fsdp import fully_shard

    for block in stage.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(stage, mesh=mesh)


def parallel_lm(context: WorkloadContext) -> ParallelLM:
    return ParallelLM(context)
