"""Your own model under the toolkit: ``--workload MODULE:FACTORY`` runs it instead of ResNet18,
and ``ProfiledRun`` puts the toolkit around a loop of your own (tests/user_code/)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path
from typing import TypeVar

import pytest

from jobs.commands import list as job_list
from jobs.commands import submit as cli
from profiling.folder.layout import JobFolder
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests.common import (
    REPO,
    load_manifest,
    load_trace,
    profiler_steps,
    run_module,
    run_python,
    run_submit,
    submitted_job_id,
)

TINY = "tests.user_code.tiny_mlp:build"
T = TypeVar("T")
OWN_LOOP = REPO / "tests" / "user_code" / "own_loop.py"
RESNET_OPS = ("aten::conv2d", "aten::batch_norm", "aten::max_pool2d")


def operators(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.glob("rank*_iter*.json"):
        names |= {e["name"] for e in load_trace(path)["traceEvents"] if e.get("cat") == "cpu_op"}
    return names


def check_tiny_job(folder: Path, world_size: int) -> dict:
    manifest = load_manifest(folder)
    assert manifest["workload"]["name"] == TINY and manifest["world_size"] == world_size
    assert manifest["workload"]["args"] == [["hidden", "48"]]
    ops = operators(folder)
    assert "aten::addmm" in ops and not ops & set(RESNET_OPS), sorted(ops)[:20]
    report = json.loads((folder / "meta" / "report.json").read_text())
    assert len(report["ranks"]) == len(manifest["profiled_ranks"])
    return manifest


def test_a_workload_of_your_own_on_this_machine(traces_root: Path) -> None:
    result = run_submit(
        "--cluster", "local", "--gpus", "0", "--tasks-per-node", "2", "--workload", TINY,
        "--workload-arg", "hidden=48", "--steps", "20", "--dtype", "fp32", "--threads-per-rank", "1",
        "--profile-ranks", "all", "--traces-root", str(traces_root), "--wait",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[rank 0] tiny MLP, hidden 48, rank 0" in result.stdout
    assert re.search(r"\[rank 0\] job \d+: 2 ranks .*tests\.user_code\.tiny_mlp:build", result.stdout)
    folder = traces_root / submitted_job_id(result.stdout)
    check_tiny_job(folder, world_size=2)
    listed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", listed)
        assert job_list.main([str(traces_root), "--json"]) == 0
    assert json.loads(listed.getvalue())[0]["outcome"] == "completed"


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("no_such_pkg.model:build", r"--workload 'no_such_pkg.model:build': no module no_such_pkg.model in "),
        ("tests.user_code.tiny_mlp:nope", r"tiny_mlp.py defines no nope. HINT: name a function"),
        ("tests.user_code.tiny_mlp:TinyMLP.x", r"is not MODULE:FACTORY"),
        ("tests.user_code.__init__:__doc__", r"defines no __doc__|is a constant, not a function"),
        ("workload.config:DTYPE_CHOICES", r"workload.config.DTYPE_CHOICES is a tuple, not a function"),
    ],
)
def test_a_bad_workload_is_one_line_before_anything_is_submitted(
    workload: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # where a user submits from: the tasks start there
    err = io.StringIO()
    started = time.perf_counter()
    with redirect_stderr(err):
        try:
            status = cli.main(
                ["--cluster", "local", "--workload", workload, "--traces-root", str(tmp_path / "t")]
            )
        except SystemExit as exited:  # refused while parsing
            status = exited.code
    assert time.perf_counter() - started < 1.0
    assert status == 2 and err.getvalue().count("\n") == 1, err.getvalue()
    assert re.search(message, err.getvalue()), err.getvalue()
    assert not (tmp_path / "t").exists()  # nothing submitted


def test_a_factory_that_fails_on_one_rank_fails_the_job_with_its_error(traces_root: Path) -> None:
    started = time.monotonic()
    result = run_submit(
        "--cluster", "local", "--gpus", "0", "--tasks-per-node", "2", "--workload",
        "tests.user_code.tiny_mlp:broken", "--steps", "20", "--dist-timeout", "20", "--threads-per-rank", "1",
        "--traces-root", str(traces_root), "--wait",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 150  # never hangs: bounded by --dist-timeout
    assert "rank 1 failed first" in result.stdout
    assert "rank 1 could not build its model (on purpose)" in result.stdout


def test_the_api_under_torchrun_writes_a_job_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(OWN_LOOP), str(tmp_path / "traces")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    [folder] = (tmp_path / "traces").iterdir()
    job = JobFolder.at(folder)
    manifest = load_manifest(folder)
    assert manifest["launcher"] == "torchrun" and manifest["world_size"] == 2
    assert manifest["workload"] == {"name": "your own loop"}
    assert sorted(p.name for p in folder.glob("rank*.json")) == ["rank0_iter3_5.json", "rank1_iter3_5.json"]
    assert len(job.step_logs()) == 2 and not job.running.exists()  # ended: running.json gone
    assert all(r["step_time"]["steps"] == 24 for r in manifest["ranks"])
    ops = operators(folder)
    assert "aten::addmm" in ops and "aten::tanh" in ops and not ops & set(RESNET_OPS)
    report = build_report(folder, ReportSettings(plot=False))
    assert [r.rank for r in report.ranks] == [0, 1] and report.run is not None
    listed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", listed)
        assert job_list.main([str(tmp_path / "traces"), "--json"]) == 0
    [row] = json.loads(listed.getvalue())
    assert (row["launcher"], row["outcome"], row["traces"]) == ("torchrun", "completed", 2)


def _torchrun_own_loop(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(OWN_LOOP), str(tmp_path / "traces"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, start_new_session=True,
        # the flight recorder is the user's to switch on, before their process group is made
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "2000"},
    )  # fmt: skip


def _wait_for(what: str, found: Callable[[], T], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while not (result := found()):
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.5)
    return result


def _running_job(root: Path) -> JobFolder | None:
    folders = [JobFolder.at(path) for path in root.glob("*/")]
    return next((folder for folder in folders if folder.running.exists()), None)


def test_live_capture_and_hang_forensics_on_a_loop_of_your_own(tmp_path: Path) -> None:
    """A torchrun job of the user's own: captured while it runs, then rank 1 stops making
    progress; the dumps name it while the job still runs, and the job ends by its own timeout."""
    hang_when = tmp_path / "hang-now"
    job = _torchrun_own_loop(
        tmp_path, "--steps", "3000", "--step-ms", "20", "--timeout", "16", "--hang-when", str(hang_when)
    )
    try:
        folder = _wait_for("running job", lambda: _running_job(tmp_path / "traces"), timeout=120)
        captured = run_module("jobs.commands.capture", str(folder.path), "--ranks", "all", "--active", "2",
                              "--wait", "--timeout", "120")  # fmt: skip
        assert captured.returncode == 0, captured.stdout + captured.stderr
        first_line, *paths = captured.stdout.splitlines()
        assert first_line == f"capture 1 of job {folder.job_id}: ranks [0, 1], 2 steps"
        steps = [profiler_steps(load_trace(Path(p))) for p in paths]
        assert steps[0] == steps[1] and len(steps[0]) == 2

        hang_when.touch()
        _wait_for("hang dumps", lambda: len(folder.hang_dumps()) == 2, timeout=60)
        hung = run_module("jobs.commands.hang", str(folder.path), timeout=60)
        assert hung.returncode == 0, hung.stdout + hung.stderr
        lines = hung.stdout.splitlines()
        assert lines[0].endswith(": the verdict is from the dumps so far"), lines
        assert lines[1].startswith("hang: rank 1 on ") and "rank(s) 0 waited for it" in lines[1], lines
        assert re.match(r"  rank 1 was stuck at .*own_loop\.py:\d+ in main", lines[2]), lines
        output, _ = job.communicate(timeout=120)  # rank 0's all-reduce times out, torchrun ends rank 1
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait(timeout=30)
    assert job.returncode != 0
    assert "hang: rank 1 on " in output  # rank 0, as its collective timed out
    listed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", listed)
        assert job_list.main([str(tmp_path / "traces"), "--json"]) == 0
    [row] = json.loads(listed.getvalue())
    assert (row["launcher"], row["outcome"]) == ("torchrun", "failed")


def test_the_api_refuses_a_job_without_its_process_group(tmp_path: Path) -> None:
    code = (
        "from jobs.profiled_run import ProfiledRun\n"
        f"with ProfiledRun(traces_root={str(tmp_path)!r}) as run:\n"
        "    run.step()\n"
    )
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999", "LOCAL_WORLD_SIZE": "2"}  # fmt: skip
    result = run_python(code, env=env)
    assert result.returncode != 0
    assert (
        "the environment says 2 ranks (torchrun), but this process has joined no process group"
        in result.stderr
    )
    assert "HINT: call torch.distributed.init_process_group() before entering ProfiledRun" in result.stderr


def test_the_documented_example_runs_as_it_is(tmp_path: Path) -> None:
    """docs/workloads.md's my_model.py and the command beside it, copied verbatim."""
    text = (REPO / "docs" / "workloads.md").read_text()
    section = text.split("## An example: `my_model.py`", 1)[1].split("\n## ", 1)[0]
    code, command = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    (tmp_path / "my_model.py").write_text(code)
    argv = command.replace("\\\n", " ").split()
    assert argv[:2] == ["python", "/path/to/submit.py"]
    result = subprocess.run(
        [sys.executable, str(REPO / "submit.py"), *argv[2:], "--traces-root", str(tmp_path / "traces")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    folder = tmp_path / "traces" / submitted_job_id(result.stdout)
    assert load_manifest(folder)["workload"]["name"] == "my_model:build"
    assert "aten::addmm" in operators(folder) and "[rank 0] step 20/20 loss" in result.stdout


def test_what_the_toolkit_adds_per_rank_does_not_grow_with_the_world_size(tmp_path: Path) -> None:
    """Open sockets of every rank, when its workload is built (the job's own gloo group: a full
    mesh, n - 1 peers) and at its last step (the toolkit running: profiler, step log, live
    capture, the agreed stop's tree). The toolkit's share stays at most 4 (a listener and three
    tree neighbours) at 2, 4 and 8 ranks; a process group of its own would add n. The three
    jobs run at once (each is mostly its processes starting)."""
    worlds = (2, 4, 8)
    jobs = {}
    for world in worlds:
        out = tmp_path / f"sockets{world}"
        out.mkdir()
        jobs[world] = subprocess.Popen(
            [sys.executable, str(REPO / "submit.py"), "--cluster", "local", "--gpus", "0", "--tasks-per-node",
             str(world), "--workload", "tests.user_code.tiny_mlp:counting_sockets", "--workload-arg",
             f"out={out}", "--steps", "20", "--dtype", "fp32", "--threads-per-rank", "1", "--profile-ranks",
             "0", "--traces-root", str(tmp_path / "traces"), "--wait"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    added = {}
    try:
        for world, job in jobs.items():
            output, _ = job.communicate(timeout=600)
            assert job.returncode == 0, output
            counts = [
                json.loads((tmp_path / f"sockets{world}" / f"rank{r}.json").read_text()) for r in range(world)
            ]
            assert all(c["built"] >= world - 1 for c in counts)  # the job's own mesh
            added[world] = [c["running"] - c["built"] for c in counts]
    finally:
        for job in jobs.values():
            if job.poll() is None:
                job.kill()
    print("sockets the toolkit added per rank:", added)
    assert all(0 <= n <= 4 for found in added.values() for n in found), added
    assert max(added[8]) <= max(added[4]) + 1 <= 5, added  # a tree: one more level, not n more
