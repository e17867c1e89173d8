"""The command line: bad input is one clear line and submits nothing; the submit path stays light."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from jobs.commands.submit import build_parser
from tests.common import REPO, run_python, run_submit


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes 0 must be at least 1"),
        (["--memory-history", "-1"], "--memory-history -1 must be at least 0"),
        (["--auto-capture", "--auto-capture-max", "0"], "--auto-capture-max 0 must be at least 1"),
        (["--gpus", "-1"], r"--gpus -1 must be 0 \(a CPU job\) or more"),
        (["--gpus", "0", "--tasks-per-node", "0"], "--tasks-per-node 0 must be at least 1"),
        (
            ["--gpus", "2", "--tasks-per-node", "4"],
            r"--tasks-per-node 4 with --gpus 2: every task drives one GPU. "
            r"HINT: use --tasks-per-node 2, or --gpus 0",
        ),
        (["--gpus", "0", "--device", "cuda"], "--device cuda with --gpus 0 asks for no GPU"),
        (["--cluster", "debug", "--gpus", "0", "--tasks-per-node", "2"], "--cluster debug runs one task"),
        (["--inject-slowdown", "2:40"], r"--inject-slowdown 2:40 names rank 2, but the job has 1 ranks"),
        (["--inject-slowdown", "0:0"], "--inject-slowdown 0:0 needs a rank >= 0 and 1 to 60000 ms"),
        (
            ["--inject-slowdown", "0:40@30-160"],
            r"^submit.py: error: --inject-slowdown 0:40@30-160: steps 30-160 are not within the run's "
            r"steps 0-99. HINT: write RANK:MS@FIRST-LAST with FIRST <= LAST < --steps 100$",
        ),
        (["--inject-slowdown", "0:40@12-5"], r"steps 12-5 are not within the run's steps 0-99"),
        (["--inject-slowdown", "0:40@125-"], r"steps 125-99 are not within the run's steps 0-99"),
        (["--inject-slowdown", "0:40@x-5"], r"'0:40@x-5' is not RANK:MS@FIRST-LAST, e.g. 2:40@30-60"),
        (["--gpus", "2", "--profile-ranks", "2"], r"selects rank 2, but the job has 2 ranks \(0-1\)"),
        (["--profile-ranks", "0-x"], "'0-x' is not a rank or a range"),
        (["--profile-ranks", "3-1"], "runs backwards"),
        (["--steps", "15"], r"--steps 15 is too short.*needs 18 steps"),
        (["--nodes", "2"], "--cluster local runs on this machine only, but --nodes is 2"),
        (["--cluster", "debug", "--gpus", "2"], "--cluster debug runs one task in this process"),
        (["--batch-size", "0"], "--batch-size 0 must be a positive integer"),
        (["--image-size", "-5"], "--image-size -5 must be a positive integer"),
        (["--image-size", "16"], "below ResNet18's minimum of 32"),
        (
            ["--profile-ranks", "0,slowest", "--schedule-wait", "0"],
            r"--profile-ranks '0,slowest' asks for the slowest rank.*--schedule-wait is 0.*"
            r"HINT: use --schedule-wait 1 or more",
        ),
        (["--warmup", "-1"], "--warmup -1 must be an integer >= 0"),
        (["--active", "0"], "--active 0 must be an integer >= 1"),
        (["--time", "0"], "--time 0 must be at least 1 minute"),
        (["--sbatch", "constraint"], "--sbatch 'constraint' is not KEY=VALUE"),
        (["--job-name", "a\nb"], "contains a control character"),
        (["--dist-timeout", "0"], "--dist-timeout 0.0 must be a positive number"),
        (
            ["--sbatch", "nodes=5"],
            "^submit.py: error: --sbatch nodes=5: the toolkit sets --nodes itself. HINT: use --nodes$",
        ),
        (["--sbatch", "N=5"], "--sbatch N=5: the toolkit sets --nodes itself"),
        (["--sbatch", "ntasks-per-node=8"], "HINT: use --gpus, or --tasks-per-node for CPU tasks"),
        (["--sbatch", "gres=gpu:4"], "the toolkit sets --gres itself .*HINT: use --gpus$"),
        (
            ["--sbatch", "output=/somewhere"],
            r"--sbatch output=/somewhere: the toolkit sets --output itself \(the job's logs, which "
            r"--wait follows and submitit reads results from, go to <job id>/logs/ under --traces-root\). "
            r"HINT: use --traces-root",
        ),
        (["--sbatch", "o=/x"], "the toolkit sets --output itself"),
        (
            ["--sbatch", "signal=USR1@60"],
            r"sets --signal itself \(the warning before preemption.*HINT: remove it",
        ),
        (["--sbatch", "requeue=1"], "HINT: use --max-restarts"),
        (
            ["--sbatch", "part=gpu"],
            "--sbatch part=gpu: the toolkit sets --partition itself. HINT: use --partition",
        ),
        (["--sbatch", "time=10"], r"HINT: use --time \(minutes\)"),
        (["--sbatch", "J=x"], "sets --job-name itself. HINT: use --job-name"),
        (["--sbatch", "cpus-per-task=4"], "HINT: use --cpus-per-task"),
        (["--repeat", "0", "--steps", "10000000"], "would record 555555 windows in --steps 10000000"),
        (["--inject-hang", "1:3"], "--inject-hang 1:3 names rank 1, but the job has 1 ranks"),
        (["--inject-hang", "x"], "argument --inject-hang: 'x' is not RANK:STEP"),
        # argparse takes "-\n" for an option it does not know, and quotes it as given
        (["--inject-failure", "-\n"], r"unrecognized arguments: -\\n\. HINT: submit.py --help$"),
    ],
)
def test_bad_input_is_one_line_and_submits_nothing(args: list[str], message: str, traces_root: Path) -> None:
    result = run_submit("--cluster", "local", "--traces-root", str(traces_root), *args, timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("submit.py: error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not traces_root.exists() or not any(traces_root.iterdir())  # nothing was submitted


def test_a_huge_rank_range_is_refused_in_milliseconds() -> None:
    # one digit too many: this used to expand every rank (49 s, 24 GB, killed by the kernel)
    from jobs.commands.submit import job_spec_from_args

    args = build_parser().parse_args(
        ["--dry-run", "--nodes", "2", "--gpus", "2", "--profile-ranks", "0-9999999999"]
    )
    started = time.process_time()
    with pytest.raises(ValueError) as refused:
        job_spec_from_args(args)
    assert time.process_time() - started < 0.01
    assert (
        build_parser()
        .describe(refused.value)
        .startswith("--profile-ranks '0-9999999999' selects rank 4, but the job has 4 ranks")
    )


def test_unwritable_traces_root(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_submit("--cluster", "local", "--traces-root", str(blocker / "traces"), timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith("submit.py: error: --traces-root") and "not writable" in result.stderr
    assert "Traceback" not in result.stderr


def test_slurm_cluster_without_sbatch(traces_root: Path) -> None:
    result = run_submit(
        "--cluster",
        "slurm",
        "--traces-root",
        str(traces_root),
        timeout=30,
        env={"PATH": str(Path(sys.executable).parent)},
    )
    assert result.returncode == 2
    assert "submit.py: error: --cluster slurm but sbatch is not on PATH. HINT" in result.stderr


def test_argparse_errors_are_not_tracebacks() -> None:
    result = run_submit("--cluster", "moon", timeout=30)
    assert result.returncode == 2 and "invalid choice: 'moon'" in result.stderr
    assert "Traceback" not in result.stderr


def test_traces_root_from_environment(tmp_path: Path) -> None:
    from jobs.commands.submit import job_spec_from_args

    code = (
        "from jobs.commands.submit import build_parser, job_spec_from_args;"
        "print(job_spec_from_args(build_parser().parse_args(['--cluster','local'])).task.traces_root)"
    )
    out = run_python(code, env={**os.environ, "TRACES_ROOT": str(tmp_path / "shared")}, timeout=30)
    assert out.stdout.strip() == str(tmp_path / "shared")
    spec = job_spec_from_args(build_parser().parse_args(["--cluster", "local", "--traces-root", "rel"]))
    assert spec.task.traces_root == Path("rel").absolute()


def test_submit_path_does_not_import_torch() -> None:
    code = (
        "import sys; from jobs import monitor, submission; from jobs.commands import list, submit;"
        "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules), 'torch imported';"
        "assert 'torchvision' not in sys.modules"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_auto_cluster_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from jobs.spec import resolve_cluster

    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve_cluster("auto", dry_run=False) == "local"
    assert resolve_cluster("auto", dry_run=True) == "slurm"
    (tmp_path / "sbatch").write_text("#!/bin/sh\n")
    (tmp_path / "sbatch").chmod(0o755)
    assert resolve_cluster("auto", dry_run=False) == "slurm"
    assert (
        resolve_cluster("local", dry_run=False) == "local"
    )  # asked for explicitly: sbatch on PATH does not matter


def test_the_options_table_is_the_parsers() -> None:
    """Every option of submit.py in docs/options.md's table, and no other: the table is written
    by hand, the parser is made from the fields."""
    section = (REPO / "docs" / "options.md").read_text().split("# Options of `submit.py`", 1)[1]
    first_cells = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `--")]
    in_table = {flag for cell in first_cells for flag in re.findall(r"--[a-z][a-z-]*", cell)}
    in_parser = {max(a.option_strings, key=len) for a in build_parser()._actions if a.option_strings}
    assert in_table == in_parser - {"--help"}
