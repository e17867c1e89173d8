"""Lay out a job folder as a job of thousands of ranks would leave it, without running one.

    .venv/bin/python tests/bench/simulate_job.py OUT --ranks 4096 --steps 100000 [--per-node 8]

What a real job leaves, made by the toolkit's own writers from a real template:

- a manifest (:func:`profiling.folder.manifest.build_manifest`) whose rank records are a real
  job's (a 2-rank tiny-MLP job run here on the local executor), one per rank with its rank,
  node and local rank;
- a step log per rank (:class:`profiling.folder.step_log.StepLogWriter` writes one of
  ``--steps`` steps; every other rank's is that file with its own header and times), the ranks
  of one node (``--slow-node``) 1.5 times slower in the middle fifth of the run;
- a trace per rank and its analysis record: every trace a hard link to one real GPU trace
  (tests/data, ``nccl_data``: it costs its size once), every record the real analysis of it
  (:func:`profiling.analysis.per_trace.record.analyse_trace`) with the rank's own rank, host and file,
  saved where a rank would save it: the report combines them and reads no trace.

With ``--layout pp=8,dp=64,tp=8`` (outermost first) the job is one of many groups: each record
lists its rank's DeviceMesh groups (``mesh_pp``, ``mesh_dp``, ``mesh_tp``; the whole job's group
is not kept, as the reader keeps none), and its collectives are, in turn, one of its
tensor-parallel group, one of its data-parallel group, and a send to and a receive from its
pipeline neighbours (forward, then backward), numbered within their group and pair as the
reader numbers them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from profiling.analysis.per_trace import record as records  # noqa: E402
from profiling.analysis.per_trace.groups import Group  # noqa: E402
from profiling.analysis.reading.collectives import SEQUENCED, Instance, sequence_key  # noqa: E402
from profiling.folder import manifest  # noqa: E402
from profiling.folder.layout import JobFolder  # noqa: E402
from profiling.folder.step_log import BUCKET, EXACT, HEADER_BYTES, StepLogHeader, StepLogWriter  # noqa: E402
from profiling.folder.traces import TraceSource  # noqa: E402
from profiling.schema.manifest import (  # noqa: E402
    AttemptRecord,
    JobFacts,
    ProfilerRecord,
    RankRecord,
    Schedule,
)
from slurm.common.mesh import Dims, coordinates, layout_size, parse_layout  # noqa: E402

TRACE = REPO / "tests" / "data" / "gpu_traces" / "nccl_data.json.gz"  # ProfilerStep#4-6
TRACE_NAME = "rank{rank}_iter4_6.json.gz"


def template_manifest(scratch: Path) -> dict:
    """A real 2-rank job's manifest (run here, on the local executor)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "submit.py"), "--cluster", "local", "--gpus", "0",
         "--tasks-per-node", "2", "--workload", "tests.user_code.tiny_mlp:build", "--steps", "20",
         "--dtype", "fp32",
         "--threads-per-rank", "1", "--profile-ranks", "none", "--traces-root", str(scratch), "--wait"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if result.returncode:
        sys.exit(result.stdout + result.stderr)
    (job,) = scratch.iterdir()
    return json.loads((job / "meta" / "manifest.json").read_text())


def write_step_logs(job: JobFolder, ranks: int, per_node: int, steps: int, slow_node: int) -> None:
    template = job.path / "template-step-log"
    writer = StepLogWriter(
        template, StepLogHeader(rank=0, world_size=ranks, restart=0, node="node1", gpu=False)
    )
    rng = np.random.default_rng(0)
    cpu = 130.0 + rng.normal(0, 3.0, steps)
    mem = 30_000.0 + rng.normal(0, 20.0, steps)  # MiB, a GPU's peak a step
    for step in range(steps):
        writer.add(step, 400.0, float(cpu[step]), math.nan, float(mem[step]))
    writer.close()
    data = template.read_bytes()
    template.unlink()
    exact_rows = min(steps, 10_000)
    body = np.frombuffer(data, dtype=np.uint8, offset=HEADER_BYTES)
    exact = body[: exact_rows * EXACT.itemsize].view(EXACT)
    buckets = body[exact_rows * EXACT.itemsize :].view(BUCKET)
    slow_first, slow_last = int(steps * 0.4), int(steps * 0.6)
    for rank in range(ranks):
        node = rank // per_node
        scale = rng.normal(1.0, 0.01)
        e, b = exact.copy(), buckets.copy()
        e["cpu"] *= scale
        b["cpu"] *= scale
        if node == slow_node:
            e["cpu"][(e["step"] >= slow_first) & (e["step"] <= slow_last)] *= 1.5
            b["cpu"][(b["first"] >= slow_first) & (b["first"] <= slow_last)] *= 1.5
        if rank == ranks - 1:  # the last rank leaks 10 KiB a step from the middle on
            e["mem"] += 0.01 * np.maximum(e["step"] - steps // 2, 0)
            b["mem"] += 0.01 * np.maximum(b["first"] - steps // 2, 0)[:, None]
        header = StepLogHeader(
            rank=rank, world_size=ranks, restart=0, node=f"node{node + 1}", gpu=False, memory="cuda"
        )
        path = job.step_log(rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header.encode() + e.tobytes() + b.tobytes())


def write_traces_and_records(job: JobFolder, ranks: int, per_node: int, layout: Dims | None = None) -> None:
    original = job.path / TRACE_NAME.format(rank=0)
    shutil.copy(TRACE, original)
    template = records.analyse_trace(TraceSource(job.path, original.name), "rank 0 on node1 (simulated)")
    # one flat group, as an older torch writes it: no group per collective
    flat = [dataclasses.replace(i, group=None) for i in template.instances]
    for rank in range(ranks):
        name = TRACE_NAME.format(rank=rank)
        if rank:
            os.link(original, job.path / name)
        node = f"node{rank // per_node + 1}"
        groups, instances = ([], flat) if layout is None else _of_layout(template, rank, layout)
        mine = msgspec.structs.replace(
            template,
            rank=rank,
            world_size=ranks,
            host=node,
            trace=name,
            analysed_by=f"rank {rank} on {node}",
            groups=groups,
            instances=instances,
        )
        records.save(mine, TraceSource(job.path, name))


def _of_layout(template: records.TraceRecord, rank: int, dims: Dims) -> tuple[list[Group], list[Instance]]:
    """Rank ``rank``'s groups and collectives in a job of ``dims`` (see the module docstring)."""
    sizes = dict(dims)
    where = coordinates(rank, dims)
    strides = {name: math.prod(size for later, size in dims[i + 1 :]) for i, (name, _) in enumerate(dims)}
    groups = []
    for dim in ("pp", "dp", "tp"):
        base = rank - where[dim] * strides[dim]
        members = tuple(base + k * strides[dim] for k in range(sizes[dim]))
        groups.append(Group(f"{dim}{members[0]}", f"mesh_{dim}", members))
    pp_group, dp_group, tp_group = groups
    stage, stages, step = where["pp"], sizes["pp"], strides["pp"]
    counts: dict[str, int] = {}
    found = []

    def numbered(name: str) -> str:
        counts[name] = counts.get(name, 0) + 1
        return sequence_key(SEQUENCED, name, counts[name] - 1)

    for index, instance in enumerate(template.instances):
        turn = index % 3
        if turn < 2:
            group = (tp_group, dp_group)[turn]
            key = numbered(group.name)
            found.append(dataclasses.replace(instance, key=key, group=group.ranks, peer=None))
            continue
        ahead = 1 if (index // 3) % 2 == 0 else -1  # activations forward, then gradients back
        for peer, sends in ((rank + ahead * step, True), (rank - ahead * step, False)):
            if 0 <= stage + (peer - rank) // step < stages:
                pair = (rank, peer) if sends else (peer, rank)
                key = numbered(f"p2p {pair[0]}>{pair[1]}")
                found.append(
                    dataclasses.replace(instance, key=key, group=pp_group.ranks, peer=peer, symmetric=False)
                )
    return groups, found


def write_manifest(job: JobFolder, template: dict, ranks: int, per_node: int, steps: int) -> None:
    base = msgspec.convert(template["ranks"][-1], RankRecord)
    rank_records = []
    for rank in range(ranks):
        node = f"node{rank // per_node + 1}"
        rank_records.append(
            msgspec.structs.replace(
                base,
                rank=rank,
                local_rank=rank % per_node,
                node_rank=rank // per_node,
                node=node,
                hostname=node,
                profiled=True,
                trace_files=[TRACE_NAME.format(rank=rank)],
            )
        )
    attempt = {**template["attempts"][-1], "trace_files": [r.trace_files[0] for r in rank_records]}
    written = manifest.build_manifest(
        facts=JobFacts(
            job_id=job.job_id,
            launcher="slurm",
            restart_count=0,
            nodes=ranks // per_node,
            master="node1:29500",
            backend=template.get("backend", "nccl"),
        ),
        ranks=rank_records,
        attempts=[msgspec.convert(attempt, AttemptRecord)],
        hooks={},
        schedule=msgspec.convert(template["schedule"], Schedule),
        profiler=msgspec.convert(template["profiler"], ProfilerRecord),
        workload={**template["workload"], "name": "simulated", "steps": steps},
        started_at=base.started_at,
        ended_at=base.started_at,
    )
    manifest.write_manifest(job, written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the traces root; the job folder is OUT/<ranks>")
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--slow-node", type=int, default=37, help="this node's ranks slow mid-run (0-based)")
    parser.add_argument("--layout", type=parse_layout, help="pp=8,dp=64,tp=8: a job of many groups")
    args = parser.parse_args()
    if args.layout is not None and layout_size(args.layout) != args.ranks:
        parser.error(f"--layout makes {layout_size(args.layout)} ranks, --ranks is {args.ranks}")
    job = JobFolder(
        args.out, str(args.ranks) + ("-" + "-".join(f"{n}{s}" for n, s in args.layout) if args.layout else "")
    )
    if job.path.exists():
        shutil.rmtree(job.path)
    job.path.mkdir(parents=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        template = template_manifest(Path(scratch))
    write_manifest(job, template, args.ranks, args.per_node, args.steps)
    write_step_logs(job, args.ranks, args.per_node, args.steps, args.slow_node)
    write_traces_and_records(job, args.ranks, args.per_node, args.layout)
    print(f"{job.path}: {args.ranks} ranks, {args.steps} steps, in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
