"""Benchmark: what the toolkit costs the training loop, against a plain DDP loop.

    .venv/bin/python tests/bench/bench_overhead.py [--ranks 2] [--steps 200] [--rounds 3] [--dtype fp32]

Interleaved, ``--rounds`` times, on submitit's local executor (``--ranks`` processes, one
thread each, gloo on CPU; on a GPU machine NCCL), both launched the same way:

- the toolkit's job, rank 1 profiled with the tutorial's schedule, rank 0 not;
- a plain DDP loop of the same model, batch, dtype and world size, written below.

- the toolkit's job again with ``--no-profile-memory``: what recording the allocator's events
  costs the recorded steps (target <= 1.10);
- the plain loop again, inside a ``ProfiledRun`` (the API for a loop of one's own), rank 1
  profiled, as its user would write it;
- the toolkit's job again with live metrics for Prometheus (``--metrics-textfile``, published
  every 5 s, the default, by the node's publisher process): what they cost the ranks (target:
  nothing measurable, within the rounds' drift);
- the toolkit's job again with ``--auto-capture``, balanced (so no capture is taken): what the
  trigger costs the ranks, its reading of every step log each second on rank 0's node, the
  ranks' flushes and looks for requests each second (target: within the rounds' drift).
  ``--trigger-only`` runs this pair alone, ``--rounds`` times.

Prints the median step time of a non-profiled rank and of the profiled rank outside its
window over the plain loop's (target <= 1.01; this includes what every rank does for live
capture when no one asks, a clock read per step and a stat every 2 s, and its share of the
stop agreement, a one-integer all-reduce per step in a thread), the profiled window's
cost (steps inside it, the step after it, which closes the window, and the trace's export,
which a writer thread does while training goes on), and trace bytes per recorded step, plain
JSON and ``--gzip-traces`` (target gz <= 0.2 x).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import submitit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from profiling.folder.layout import JobFolder  # noqa: E402
from tests.common import REPO, load_manifest, submitted_job_id  # noqa: E402


def plain_ddp(steps: int, image_size: int, batch_size: int, dtype: str, api_root: str | None = None) -> float:
    """The tutorial's loop and nothing else; returns this rank's median step time. ``api_root``:
    the same loop inside a ``ProfiledRun`` (rank 1 profiled), writing there, as a user would."""
    import contextlib
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import torchvision
    from torch.nn.parallel import DistributedDataParallel

    env = submitit.JobEnvironment()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    torch.set_num_threads(1)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{20000 + int(env.job_id) % 10000}",
        rank=env.global_rank,
        world_size=env.num_tasks,
    )
    torch.manual_seed(0)
    dtype_ = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    model = torchvision.models.resnet18().to(device=device, dtype=dtype_)
    model = DistributedDataParallel(model, device_ids=[env.local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(batch_size, 3, image_size, image_size, device=device, dtype=dtype_)
    target = torch.randn(batch_size, 1000, device=device, dtype=dtype_)
    if api_root is not None:
        from jobs.profiled_run import ProfiledRun

        run = ProfiledRun(profile_ranks="1", traces_root=api_root, steps=steps, report=False)
    else:
        run = contextlib.nullcontext()
    times, last = [], time.perf_counter()
    with run:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            F.mse_loss(model(inputs), target).backward()
            optimizer.step()
            if api_root is not None:
                run.step()
            if cuda:
                torch.cuda.synchronize()
            now = time.perf_counter()
            times.append(now - last)
            last = now
    dist.destroy_process_group()
    return statistics.median(times[1:])


def memory_events_cost(image_size: int, batch_size: int, rounds: int = 12) -> tuple[float, float]:
    """CPU seconds of one ResNet18 training step under the profiler with the allocator's events
    and without (``record_shapes`` and ``with_stack`` on in both), in this process, one thread:
    each the best of ``rounds``, interleaved. The jobs' rounds drift by more than the cost."""
    import time

    import torch
    import torchvision

    torch.set_num_threads(1)
    model = torchvision.models.resnet18()
    inputs, target = torch.randn(batch_size, 3, image_size, image_size), torch.randn(batch_size, 1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), target).backward()
        optimizer.step()

    def best(memory: bool) -> float:
        activities = [torch.profiler.ProfilerActivity.CPU]
        times = []
        with torch.profiler.profile(
            activities=activities, record_shapes=True, with_stack=True, profile_memory=memory
        ):
            for _ in range(4):
                started = time.thread_time()
                step()
                times.append(time.thread_time() - started)
        return min(times[1:])

    step()
    with_memory, without = [], []
    for _ in range(rounds):
        with_memory.append(best(True))
        without.append(best(False))
    return min(with_memory), min(without)


def toolkit_job(root: Path, args: argparse.Namespace, *extra: str) -> dict:
    command = [
        sys.executable,
        str(REPO / "submit.py"),
        "--cluster",
        "local",
        "--gpus",
        str(args.ranks),
        "--profile-ranks",
        "1",
        "--steps",
        str(args.steps),
        "--image-size",
        str(args.image_size),
        "--batch-size",
        str(args.batch_size),
        "--dtype",
        args.dtype,
        "--threads-per-rank",
        "1",
        "--no-report",
        "--wait",
        "--traces-root",
        str(root),
        *extra,
    ]
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stdout + out.stderr)
    job_dir = JobFolder(root, submitted_job_id(out.stdout)).path
    manifest = load_manifest(job_dir)
    manifest["trace_bytes"] = sum(p.stat().st_size for p in job_dir.glob("rank*.json*"))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp32"),
        default="bf16",
        help="fp32 on CPUs without AVX-512 (bf16 is slow)",
    )
    parser.add_argument("--trigger-only", action="store_true", help="--auto-capture against none, alone")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    if args.trigger_only:
        try:
            trigger_cost(work, args)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        executor = submitit.LocalExecutor(work / "plain")
        executor.update_parameters(tasks_per_node=args.ranks, nodes=1, timeout_min=60)
        toolkit, plain, api, no_memory, metrics, triggered = [], [], [], [], [], []
        published = ("--metrics-textfile", str(work / "textfiles"))  # every 5 s, the default
        for _ in range(args.rounds):
            toolkit.append(toolkit_job(work / "traces", args))
            no_memory.append(toolkit_job(work / "traces", args, "--no-profile-memory"))
            metrics.append(toolkit_job(work / "traces", args, *published))
            triggered.append(toolkit_job(work / "traces", args, "--auto-capture"))
            job = executor.submit(plain_ddp, args.steps, args.image_size, args.batch_size, args.dtype)
            plain.append(statistics.median(job.results()))
            job = executor.submit(
                plain_ddp, args.steps, args.image_size, args.batch_size, args.dtype, str(work / "api")
            )
            api.append(job.results()[0])  # rank 0: not profiled
        gzipped = toolkit_job(work / "traces", args, "--gzip-traces")

        def median_of(key: str, rank: int, runs: list[dict]) -> float:
            return statistics.median(run["ranks"][rank]["step_time"][key] for run in runs)

        plain_s = statistics.median(plain)
        not_profiled = median_of("median_s", 0, toolkit)
        outside = median_of("unrecorded_median_s", 1, toolkit)
        inside = median_of("recorded_median_s", 1, toolkit)
        inside_without_memory = median_of("recorded_median_s", 1, no_memory)
        after = median_of("after_window_mean_s", 1, toolkit)
        export = statistics.median(run["ranks"][1]["trace_export_s"] for run in toolkit)
        active = toolkit[0]["schedule"]["active"]
        plain_bytes = statistics.median(run["trace_bytes"] for run in toolkit) / active
        gz_bytes = gzipped["trace_bytes"] / active

        print(
            f"{args.ranks} ranks, {args.steps} steps, image {args.image_size}, batch {args.batch_size}, "
            f"{args.dtype}, {args.rounds} interleaved rounds, backend {toolkit[0]['backend']}"
        )
        rows = [
            ("plain DDP loop, median step", plain_s * 1e3, "ms", 1.0),
            ("toolkit, rank not profiled", not_profiled * 1e3, "ms", not_profiled / plain_s),
            (
                "the same loop in ProfiledRun, rank 0",
                statistics.median(api) * 1e3,
                "ms",
                statistics.median(api) / plain_s,
            ),
            ("toolkit, profiled rank outside window", outside * 1e3, "ms", outside / plain_s),
            ("profiled rank inside window", inside * 1e3, "ms", inside / outside),
            (
                "inside window / --no-profile-memory's",
                inside_without_memory * 1e3,
                "ms",
                inside / inside_without_memory,
            ),
            ("profiled rank, step after window", after * 1e3, "ms", after / outside),
            (
                "with live metrics, rank not profiled",
                median_of("median_s", 0, metrics) * 1e3,
                "ms",
                median_of("median_s", 0, metrics) / not_profiled,
            ),
            (
                "with --auto-capture, rank not profiled",
                median_of("median_s", 0, triggered) * 1e3,
                "ms",
                median_of("median_s", 0, triggered) / not_profiled,
            ),
            ("trace export (write + rename)", export * 1e3, "ms", None),
            ("trace bytes per recorded step, JSON", plain_bytes / 2**20, "MiB", None),
            ("trace bytes per recorded step, gzip", gz_bytes / 2**20, "MiB", gz_bytes / plain_bytes),
        ]
        for name, value, unit, ratio in rows:
            print(f"{name:40}{value:10.2f} {unit:4}" + (f"  x{ratio:.3f}" if ratio is not None else ""))
        # Jobs on a shared machine drift by more than the overhead measured: each toolkit job
        # against the plain job run next to it says how much of the ratio is noise.
        rounds = zip(toolkit, plain, strict=True)
        paired = sorted(run["ranks"][0]["step_time"]["median_s"] / p for run, p in rounds)
        print(
            f"rank not profiled / plain, per round: median x{statistics.median(paired):.3f}, "
            f"range x{paired[0]:.3f}-x{paired[-1]:.3f}"
        )
        paired = sorted(a / p for a, p in zip(api, plain, strict=True))
        print(
            f"ProfiledRun, rank not profiled / plain, per round: median x{statistics.median(paired):.3f}, "
            f"range x{paired[0]:.3f}-x{paired[-1]:.3f}"
        )
        paired = sorted(
            m["ranks"][0]["step_time"]["median_s"] / t["ranks"][0]["step_time"]["median_s"]
            for m, t in zip(metrics, toolkit, strict=True)
        )
        print(
            f"live metrics / none, rank not profiled, per round: median x{statistics.median(paired):.3f}, "
            f"range x{paired[0]:.3f}-x{paired[-1]:.3f}"
        )
        _per_round("--auto-capture / none", triggered, toolkit)
        memory, without = memory_events_cost(args.image_size, args.batch_size)
        print(
            f"one step under the profiler, in this process, CPU: with the allocator's events "
            f"{memory * 1e3:.1f} ms, without {without * 1e3:.1f} ms = x{memory / without:.3f}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _per_round(name: str, runs: list[dict], against: list[dict]) -> None:
    """Each rank's median step in ``runs`` over the same rank's in the job run beside it."""
    for rank in range(len(runs[0]["ranks"])):
        paired = sorted(
            r["ranks"][rank]["step_time"]["median_s"] / a["ranks"][rank]["step_time"]["median_s"]
            for r, a in zip(runs, against, strict=True)
        )
        print(
            f"{name}, rank {rank}, per round: median x{statistics.median(paired):.3f}, "
            f"range x{paired[0]:.3f}-x{paired[-1]:.3f}"
        )


def trigger_cost(work: Path, args: argparse.Namespace) -> None:
    """``--auto-capture`` on a balanced job against the same job without, interleaved."""
    plain, triggered = [], []
    for _ in range(args.rounds):
        plain.append(toolkit_job(work / "traces", args))
        triggered.append(toolkit_job(work / "traces", args, "--auto-capture"))
    captures = sum(len(run.get("captures") or []) for run in triggered)
    print(
        f"{args.ranks} ranks, {args.steps} steps, image {args.image_size}, batch {args.batch_size}, "
        f"{args.dtype}, {args.rounds} interleaved rounds; captures taken on the balanced jobs: {captures}"
    )
    _per_round("--auto-capture / none", triggered, plain)


if __name__ == "__main__":
    main()
