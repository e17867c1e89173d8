"""One declaration per option: a config field makes the option, its parser, its check, and the
command line that sets it again (slurm/common/settings.py, slurm/common/command_line.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobs.commands.submit import build_parser, job_spec_from_args
from jobs.options import parse_task_argv, task_argv, task_parser
from jobs.spec import JobSpec, TaskConfig
from profiling.ranks import RankSelection
from profiling.recording.config import ProfilerConfig
from profiling.recording.schedule import ScheduleConfig
from slurm.common.command_line import OneLineParser
from slurm.common.errors import SettingError
from slurm.common.settings import argv_of, at_least, check_fields, from_namespace, options, section, setting
from slurm.launchers import Device, Executor
from slurm.resources import SlurmResources
from workload.config import RankAndMs, RankAndStep, WorkloadConfig

RUN_OPTIONS = {
    "--wait",
    "--dry-run",
    "--exclude-slow-from",
    "--help",
}  # what submit.py does, not what it submits


def flags(parser: OneLineParser) -> set[str]:
    return {max(action.option_strings, key=len) for action in parser._actions if action.option_strings}


def test_every_option_of_submit_is_a_field_and_every_field_an_option() -> None:
    declared = {option.flag for _, _, option in options(JobSpec)}
    assert flags(build_parser()) - RUN_OPTIONS == declared
    assert flags(task_parser()) - RUN_OPTIONS == {option.flag for _, _, option in options(TaskConfig)}
    assert len(declared) == len(list(options(JobSpec)))  # no option declared twice


def test_the_help_comes_from_the_field() -> None:
    text = build_parser().format_help()
    assert "--steps STEPS         training steps (default: 100)" in text
    assert "--time MINUTES        time limit (default: 60)" in text
    assert "--profile-ranks SPEC" in text and "(default: 0)" in text
    assert "--tasks-per-node N    tasks per node (default: --gpus, or 1 with --gpus 0)" in text


def test_a_task_config_written_as_options_parses_back_to_itself(tmp_path: Path) -> None:
    config = TaskConfig(
        workload=WorkloadConfig(
            steps=40, image_size=64, dtype="fp32", threads=2,
            inject_slowdown=(RankAndMs(1, 30, 20, 30), RankAndMs(0, 5)), inject_failure=RankAndStep(0, 39),
        ),
        profiler=ProfilerConfig(
            ranks=RankSelection.parse("0-1,slowest"), schedule=ScheduleConfig(wait=2, active=4, repeat=0),
            gzip=True,
        ),
        report=False, traces_root=tmp_path / "shared", dist_timeout_s=20.5, device=Device.CPU, max_restarts=0,
    )  # fmt: skip
    argv = task_argv(config)
    assert argv[:4] == ["--steps", "40", "--image-size", "64"]
    assert (
        "--no-report" in argv and "--gzip-traces" in argv and "--batch-size" not in argv
    )  # defaults left out
    assert parse_task_argv(argv) == config


def test_a_job_spec_from_submit_options() -> None:
    spec = job_spec_from_args(
        build_parser().parse_args(
            ["--cluster", "slurm", "--nodes", "2", "--gpus", "0", "--tasks-per-node", "3", "--sbatch", "a=b",
             "--sbatch", "constraint=x", "--time", "5", "--steps", "30"]
        )
    )  # fmt: skip
    assert spec.cluster is Executor.SLURM and spec.world_size == 6
    assert spec.slurm == SlurmResources(time_min=5, extra=(("a", "b"), ("constraint", "x")))
    assert spec.task.device is Device.CPU  # no GPU asked for: none used
    assert spec.task.workload.steps == 30
    assert argv_of(spec.slurm) == ["--time", "5", "--sbatch", "a=b", "--sbatch", "constraint=x"]


def test_tasks_per_node_follows_gpus_unless_given() -> None:
    assert JobSpec(cluster=Executor.SLURM, gpus_per_node=4).tasks_per_node == 4
    assert JobSpec(cluster=Executor.SLURM, gpus_per_node=0).tasks_per_node == 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inner:
    depth: int = setting(3, flag="--depth", help="how deep", check=at_least(1))

    def __post_init__(self) -> None:
        check_fields(self, SettingError)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Outer:
    inner: _Inner = section(_Inner)
    name: str = setting("x", flag="--name", help="what it is called", group="naming")
    fast: bool = setting(False, flag="--fast", help="hurry")


def test_adding_an_option_is_adding_a_field() -> None:
    parser = OneLineParser(prog="tool")
    parser.add_settings(_Outer)
    assert from_namespace(_Outer, parser.parse_args(["--depth", "5", "--fast"])) == _Outer(
        inner=_Inner(depth=5), fast=True
    )
    assert "naming:" in parser.format_help() and "how deep (default: 3)" in parser.format_help()
    with pytest.raises(SettingError) as refused:
        from_namespace(_Outer, parser.parse_args(["--depth", "0"]))
    assert parser.describe(refused.value) == "--depth 0 must be at least 1"
    assert argv_of(_Outer(inner=_Inner(depth=2), name="y")) == ["--depth", "2", "--name", "y"]


def test_a_value_the_field_refuses_names_the_option_of_the_command_that_set_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_task_argv(["--profile-ranks", "0,x"])
    assert capsys.readouterr().err == (
        "python -m jobs.task: error: --profile-ranks '0,x': 'x' is not a rank or a range. "
        "HINT: use 'all', 'none', a list '0,3', ranges '0-3,8', or 'slowest'\n"
    )
    # the field "wait" is --schedule-wait in submit.py, whose own --wait waits for the job
    with pytest.raises(SettingError) as refused:
        ProfilerConfig(ranks=RankSelection.parse("slowest"), schedule=ScheduleConfig(wait=0))
    assert "HINT: use --schedule-wait 1 or more" in build_parser().describe(refused.value)


@pytest.mark.parametrize(
    "field",
    [f.name for f in dataclasses.fields(SlurmResources) if "str" in str(f.type) and f.name != "extra"],
)
def test_every_text_field_of_the_resources_refuses_a_control_character(field: str) -> None:
    """Each string field goes into an '#SBATCH' line, where a newline would end the comment."""
    with pytest.raises(SettingError, match=rf"^{field} 'a\\nb' contains a control character"):
        SlurmResources(**{field: "a\nb"})
