"""``--dry-run`` prints the exact sbatch script, needs no cluster, and quotes every user value."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

from slurm.common.settings import default_of, options
from slurm.resources import SUBMITIT_PARAMETERS, SlurmResources
from tests.common import run_submit

GOLDEN = Path(__file__).parent / "golden" / "dry_run_4x8.sbatch"
GOLDEN_CPU = Path(__file__).parent / "golden" / "dry_run_cpu_2x16.sbatch"
TRACES = "/shared/traces"


def dry_run(*args: str) -> str:
    result = run_submit("--dry-run", "--traces-root", TRACES, *args, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.replace(shlex.quote(sys.executable), "<python>")


def test_dry_run_matches_golden_file() -> None:
    script = dry_run("--nodes", "4", "--gpus", "8", "--partition", "gpu", "--time", "90")
    assert script == GOLDEN.read_text()


def test_dry_run_of_a_cpu_job_asks_for_no_gpu() -> None:
    script = dry_run(
        "--nodes", "2", "--gpus", "0", "--tasks-per-node", "16", "--partition", "cpu", "--time", "30"
    )
    assert script == GOLDEN_CPU.read_text()
    assert "gpu" not in script.replace("--partition=cpu", "")


def test_dry_run_needs_no_slurm_and_creates_nothing(tmp_path: Path) -> None:
    no_slurm_path = str(Path(sys.executable).parent)  # python, but no sbatch or srun
    result = run_submit(
        "--dry-run",
        "--nodes",
        "4",
        "--gpus",
        "8",
        "--traces-root",
        str(tmp_path / "t"),
        timeout=30,
        env={"PATH": no_slurm_path},
    )
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=4" in result.stdout
    assert not (tmp_path / "t").exists()
    assert "submitted" not in result.stdout


def test_user_values_are_shell_quoted() -> None:
    script = dry_run(
        "--job-name", "x; touch /tmp/pwned \"q\" 'r'", "--account", "a b", "--sbatch", "comment=$(id)"
    )
    assert "#SBATCH --job-name='x; touch /tmp/pwned \"q\" '\"'\"'r'\"'\"''" in script
    assert "#SBATCH --account='a b'" in script
    assert "#SBATCH --comment='$(id)'" in script
    for line in script.splitlines():
        if line.startswith("#SBATCH") and "=" in line:
            assert len(shlex.split(line.partition("=")[2])) == 1, line


def test_extra_sbatch_options_land_in_the_script() -> None:
    script = dry_run(
        "--sbatch", "constraint=h100", "--sbatch=--mail-type=END", "--qos", "high", "--sbatch", "gres=nvme:1"
    )  # fmt: skip
    assert "#SBATCH --gres=nvme:1" in script  # a generic resource that is not a GPU is the user's
    assert "#SBATCH --constraint=h100" in script
    assert "#SBATCH --mail-type=END" in script
    assert "#SBATCH --qos=high" in script


def test_every_slurm_resource_reaches_the_script() -> None:
    # each field of SlurmResources declares the sbatch option it becomes: set them all, find each
    samples = {}
    for _, field, option in options(SlurmResources):
        if field.name in SUBMITIT_PARAMETERS:
            numeric = option.parse is int or isinstance(default_of(field), int)
            samples[option.flag] = "7" if numeric else f"x-{field.name.replace('_', '-')}"
    # every field but --sbatch's own list declares one: a field without would not reach the script
    assert set(SUBMITIT_PARAMETERS) == {f.name for f in dataclasses.fields(SlurmResources)} - {"extra"}
    assert len(samples) == len(SUBMITIT_PARAMETERS)
    script = dry_run(*(item for pair in samples.items() for item in pair))
    for field, parameter in SUBMITIT_PARAMETERS.items():
        flag = next(option.flag for _, f, option in options(SlurmResources) if f.name == field)
        assert f"#SBATCH --{parameter.replace('_', '-')}={samples[flag]}\n" in script, (field, script)
        # and it is the toolkit's: refused through --sbatch, naming the option to use
        refused = run_submit("--dry-run", "--sbatch", f"{parameter.replace('_', '-')}=1", timeout=30)
        assert refused.returncode == 2 and f"HINT: use {flag}" in refused.stderr, refused.stderr


def test_the_tasks_options_are_shown() -> None:
    # the task travels pickled: the script alone would not say what each rank runs
    script = dry_run("--steps", "20", "--profile-ranks", "all", "--inject-slowdown", "0:5")
    assert script.endswith(
        "#   python -m jobs.task --steps 20 --inject-slowdown 0:5 --profile-ranks all "
        "--traces-root /shared/traces\n"
    ), script


BAD_PARALLEL = {
    ("--parallel", "pp=2", "--workload-arg", "microbatches=3"): "--workload-arg microbatches=3: 1F1B needs",
    ("--parallel", "pp=2", "--workload-arg", "microbatches=0"): "microbatches=0 must be an integer",
    (
        "--parallel",
        "tp=2",
        "--workload-arg",
        "heads=3",
        "--workload-arg",
        "dim=63",
    ): "heads=3 cannot be split",
    (
        "--parallel",
        "tp=4",
        "--workload-arg",
        "heads=6",
        "--workload-arg",
        "dim=96",
    ): "heads=6 cannot be split",
    ("--parallel", "dp=4", "--workload-arg", "layers=0"): "layers=0 must be an integer",
    ("--parallel", "dp=4", "--workload-arg", "seq=abc"): "seq=abc must be an integer",
    ("--parallel", "dp=4", "--workload-arg", "foo=1"): "has no setting foo",
    ("--parallel", "dp=4", "--workload-arg", "dim=1000000000"): "dim=1000000000 must be an integer",
    ("--parallel", "dp=4", "--workload", "workload.resnet18:build"): "runs the toolkit's parallel LM",
    ("--parallel", "pp=4", "--batch-size", "3"): "--batch-size 3 is too small",
}


def test_a_parallel_job_the_ranks_would_refuse_is_refused_before_it_is_queued() -> None:
    """``--dry-run`` (slurm) accepted these, and every rank refused them after the queue: the
    same code the ranks run checks them on the login node, in one line with a HINT."""
    for args, expected in BAD_PARALLEL.items():
        result = run_submit("--dry-run", "--nodes", "1", "--gpus", "4", *args, timeout=30)
        assert result.returncode == 2, (args, result.stdout)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "HINT" in lines[0], (args, result.stderr)


def test_the_readmes_parallel_job_runs_with_its_defaults() -> None:
    """``--parallel dp=2,pp=2`` with the default batch of 10: 5 microbatches of 2, not a refusal
    in every rank ("--batch-size 10 does not split into microbatches=4")."""
    from slurm.common.mesh import parse_layout
    from workload.lm_settings import lm_settings

    assert lm_settings({}, parse_layout("dp=2,pp=2"), 10)["microbatches"] == 5
    script = dry_run("--nodes", "1", "--gpus", "4", "--parallel", "dp=2,pp=2")
    assert "--parallel dp=2,pp=2" in script


def test_the_readmes_parallel_job_runs_on_the_local_executor(tmp_path: Path) -> None:
    result = run_submit(
        "--cluster", "local", "--gpus", "4", "--parallel", "dp=2,pp=2", "--steps", "3", "--dtype", "fp32",
        "--threads-per-rank", "1", "--profile-ranks", "none", "--traces-root", str(tmp_path), "--wait",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done; traces in" in result.stdout
