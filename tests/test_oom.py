"""A rank out of memory, for real: the allocator fails under a limit set in that rank alone
(tests/user_code/leaky.py), the rank writes what it held to meta/oom/, and one line says so
in --wait, list and report.md. An OOM is no preemption: the job is not requeued."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jobs.runtime import oom
from profiling.analysis.dumps.oom import oom_line, read_oom_dumps
from profiling.folder.layout import JobFolder, meta_of
from profiling.schema import model
from tests.common import REPO, TINY_JOB, run_submit, submitted_job_id

LEAKY_JOB = [*TINY_JOB, "--workload", "tests.user_code.leaky:build"]  # the last --workload counts


def test_a_rank_out_of_memory_says_so_everywhere_and_is_not_requeued(tmp_path: Path) -> None:
    result = run_submit(
        "--cluster", "local", "--gpus", "1", "--traces-root", str(tmp_path), "--wait", "--max-restarts", "2",
        *LEAKY_JOB, "--steps", "60", "--workload-arg", "leak_mb=16", "--workload-arg", "limit_mb=400",
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    job = JobFolder(tmp_path, submitted_job_id(result.stdout))
    dump = json.loads(job.oom_dump(0).read_text())
    assert dump["device"] == "cpu" and dump["step"] >= 1 and "can't allocate memory" in dump["error"]
    assert 0 < dump["allocated_bytes"] <= dump["total_bytes"] and dump["limit"] == "RLIMIT_AS"
    # its step log's memory, step by step up to the failing one: 16 MiB more each
    assert [step for step, _ in dump["last_steps"]] == list(range(dump["step"]))[-20:]
    growth = dump["growth"]
    assert growth["mib_per_step"] == pytest.approx(16, rel=0.15) and growth["since_step"] <= 2, dump
    line = f"rank 0 ran out of memory at step {dump['step']}: "
    assert f"; its memory grew {growth['mib_per_step']:.0f} MiB a step from step {growth['since_step']}" in (
        result.stdout
    )
    assert line in result.stdout  # --wait, before the error's tail
    assert result.stdout.index(line) < result.stdout.index("last lines of its error")
    assert job.attempts() == [job.path]  # not requeued, whatever --max-restarts allows
    listed = subprocess.run(
        [sys.executable, "-m", "jobs.commands.list", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert f"{job.job_id}: {line}" in listed.stdout
    report = subprocess.run(
        [sys.executable, "-m", "jobs.commands.report", str(job.path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    typed = model.checked((meta_of(job.path) / "report.json").read_bytes())
    assert [(o.rank, o.step, o.device) for o in typed.oom] == [(0, dump["step"], "cpu")]
    assert typed.oom[0].growth and typed.oom[0].growth.mib_per_step == pytest.approx(growth["mib_per_step"])
    assert [m.step for m in typed.oom[0].last_steps] == [step for step, _ in dump["last_steps"]]
    assert f"**Out of memory: {line}" in (meta_of(job.path) / "report.md").read_text()


def test_a_rank_that_leaks_is_named_with_its_rate_in_the_run(tmp_path: Path) -> None:
    """Rank 1 keeps 8 MiB a step, rank 0 nothing, no limit: the run's memory names rank 1 alone,
    from its step log (no trace: the recorded window would not have shown it)."""
    result = run_submit(
        "--cluster", "local", "--gpus", "2", "--traces-root", str(tmp_path), "--wait",
        "--profile-ranks", "none", *LEAKY_JOB, "--steps", "30", "--workload-arg", "leak_mb=8",
        "--workload-arg", "leak_ranks=1", "--workload-arg", "limit_mb=0", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    job = JobFolder(tmp_path, submitted_job_id(result.stdout))
    report = subprocess.run(
        [sys.executable, "-m", "jobs.commands.report", str(job.path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    run = model.checked((meta_of(job.path) / "report.json").read_bytes()).run
    assert run is not None and run.memory == "rss"
    (leak,) = run.memory_growth
    assert leak.rank == 1 and leak.mib_per_step == pytest.approx(8, rel=0.15) and leak.since_step <= 2, leak
    low, high = sorted(run.ranks, key=lambda r: r.rank)
    assert high.memory_max_mib - low.memory_max_mib == pytest.approx(8 * 29, rel=0.2)  # type: ignore[operator]
    assert f"- {leak.line}" in (meta_of(job.path) / "report.md").read_text()
    listed = subprocess.run(
        [sys.executable, "-m", "jobs.commands.list", str(tmp_path), "--ranks", job.job_id], cwd=REPO,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert f"memory growing to the end of the log (a leak?):\n  {leak.line}\n" in listed.stdout + "\n"
    assert leak.line.startswith(f"rank 1: +{leak.mib_per_step:.1f} MiB a step since step {leak.since_step} (")


def test_out_of_memory_is_told_from_other_errors() -> None:
    assert oom.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    cpu = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 67108864 bytes. Error code 12"
    assert oom.is_out_of_memory(RuntimeError(cpu)) and oom.is_out_of_memory(MemoryError())
    assert not oom.is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_out_of_memory_on_cuda_dumps_its_allocations_history(tmp_path: Path) -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_per_process_memory_fraction(0.05, device)
    memory = oom.watch_memory(device, history_entries=10_000)
    kept = []
    with pytest.raises(torch.OutOfMemoryError) as raised:
        while True:
            kept.append(torch.empty(256 << 20, dtype=torch.uint8, device=device))
    assert oom.is_out_of_memory(raised.value)
    folder = JobFolder(tmp_path, "1")
    # the rank's step log had its peak grow 256 MiB a step, as the loop above
    series = oom.MemorySeries(list(range(10)), [256.0 * (step + 1) for step in range(10)])
    line = oom.dump_out_of_memory(folder, 0, 10, raised.value, memory, series)
    dump = json.loads(folder.oom_dump(0).read_text())
    assert (
        dump["allocated_bytes"] >= len(kept) * (256 << 20) and dump["total_bytes"] > dump["allocated_bytes"]
    )
    assert "memory_summary" in dump and Path(dump["snapshot"]).stat().st_size > 0
    assert line.startswith("rank 0 ran out of memory at step 10: ") and "memory_viz" in line
    assert "; its peak grew 256 MiB a step from step 0" in line and len(dump["last_steps"]) == 10
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.set_per_process_memory_fraction(1.0, device)


def _cpu_dump(**changed: object) -> dict:
    """An out-of-memory dump as a CPU rank wrote it before the files were typed (no version)."""
    dump = {
        "rank": 1, "node": "n1", "step": 7, "device": "cpu", "error": "can't allocate memory",
        "written_at": 1764000000.0, "pid": 42, "allocated_bytes": 3 << 30, "reserved_bytes": None,
        "peak_bytes": 3 << 30, "total_bytes": 4 << 30, "limit": "RLIMIT_AS",
        "last_steps": [[5, 3000.0], [6, 3016.0]],
        "growth": {"since_step": 1, "last_step": 6, "mib_per_step": 16.0, "from_mib": 2920.0,
                   "to_mib": 3016.0},
    }  # fmt: skip
    return dump | changed


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"device": None}, r"Expected `str`, got `null` - at `\$.device`"),
        ({"allocated_bytes": 10**400}, r"at `\$.allocated_bytes`"),
        ({"peak_bytes": -1}, r"Expected `int` >= 0 - at `\$.peak_bytes`"),
        ({"written_at": "yesterday"}, r"Expected `float`, got `str` - at `\$.written_at`"),
        ({"step": "7"}, r"Expected `int`, got `str` - at `\$.step`"),
        ({"schema_version": 2}, r"schema_version 2, newer than the 1 this toolkit reads"),
    ],
)
def test_a_dump_that_does_not_read_is_one_line_and_the_others_are_read(
    tmp_path: Path, changed: dict, said: str
) -> None:
    folder = JobFolder(tmp_path, "1")
    folder.oom_dump(0).parent.mkdir(parents=True)
    folder.oom_dump(0).write_text(json.dumps(_cpu_dump(rank=0) | changed))
    folder.oom_dump(1).write_text(json.dumps(_cpu_dump()))
    dumps, refused = read_oom_dumps(folder)
    assert [d.rank for d in dumps] == [1]  # the dump of before the types, read as version 1
    assert oom_line(dumps[0]) == (
        "rank 1 ran out of memory at step 7: 3.0 GiB resident of a 4.0 GiB limit (cpu), its peak 3.0 GiB; "
        "its memory grew 16 MiB a step from step 1"
    )
    [line] = refused
    assert re.search(said, line) and "rank0.json" in line and "\n" not in line, line


def test_dumps_that_are_not_objects_or_nest_too_deep_are_named(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "1")
    folder.oom_dump(0).parent.mkdir(parents=True)
    folder.oom_dump(0).write_text("[1, 2]")
    folder.oom_dump(1).write_text("[" * 100_000 + "]" * 100_000)
    dumps, refused = read_oom_dumps(folder)
    assert dumps == [] and len(refused) == 2
    assert "rank0.json: not a OomDump file: Expected `object`, got `array`" in refused[0]
    assert "rank1.json: not" in refused[1]
