"""Every command answers a mistake on its command line with one line: the program, the mistake,
and a hint, never argparse's usage block or a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from jobs import task
from jobs.commands import archive, capture, compare, console, hang, history, report
from jobs.commands import list as job_list
from jobs.commands import submit as cli
from tests.common import REPO, run_module, run_python
from tests.synthetic import cpu_job, write_job

COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], list[str]]] = {
    "submit.py": (cli.main, []),
    "python -m jobs.task": (task.main, []),
    "python -m jobs.commands.list": (job_list.main, []),
    "python -m jobs.commands.history": (history.main, []),
    "python -m jobs.commands.capture": (capture.main, ["4242"]),
    "python -m jobs.commands.report": (report.main, ["traces/4242"]),
    "python -m jobs.commands.compare": (compare.main, ["traces/4242", "traces/4243"]),
    "python -m jobs.commands.hang": (hang.main, ["traces/4242"]),
    "python -m jobs.commands.archive": (archive.main, ["traces/4242"]),
}
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
_MARKUP = ("``", ":mod:", ":class:", ":func:", ":meth:", ":data:")
# Values each option is tried with, and what the command is run on: nothing that exists, so
# that a value it accepts ends in an error too (no job is submitted, no task started).
_BAD_VALUES = ("0", "-1", "x", "", "slowest", "0-99999", "none")
_WALKED = {
    "submit.py": ["--dry-run", "--cluster", "local"],
    "python -m jobs.task": [],  # under a batch step's variables, not a task's: it cannot start
    "python -m jobs.commands.list": ["/nonexistent"],
    "python -m jobs.commands.history": ["/nonexistent"],
    "python -m jobs.commands.capture": ["4242", "--traces-root", "/nonexistent"],
    "python -m jobs.commands.report": ["/nonexistent/4242"],
    "python -m jobs.commands.compare": ["/nonexistent/1", "/nonexistent/2"],
    "python -m jobs.commands.hang": ["/nonexistent/4242"],
    "python -m jobs.commands.archive": ["/nonexistent/4242"],
}


@pytest.mark.parametrize("prog", COMMANDS)
def test_a_mistyped_option_is_one_line(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    main, positional = COMMANDS[prog]
    with pytest.raises(SystemExit) as exited:
        main([*positional, "--no-such-option"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == f"{prog}: error: unrecognized arguments: --no-such-option. HINT: {prog} --help\n"


@pytest.mark.parametrize(
    ("prog", "argv", "message"),
    [
        ("python -m jobs.commands.report", ["traces/4242", "--jobs", "0"], "--jobs 0 must be at least 1"),
        (
            "python -m jobs.commands.report",
            ["traces/4242", "--merge-budget-mb", "-1"],
            "--merge-budget-mb -1 must be positive",
        ),
        ("python -m jobs.commands.report", ["/nonexistent/4242"], "holds no trace (*.json, *.json.gz"),
        ("python -m jobs.commands.compare", ["/nonexistent/1", "/nonexistent/2"], "/nonexistent/1"),
        ("python -m jobs.commands.hang", ["/nonexistent/4242"], "is not a folder"),
        (
            "python -m jobs.commands.capture",
            ["4242", "--traces-root", "/nonexistent"],
            "no folder /nonexistent/4242",
        ),
        ("python -m jobs.commands.list", ["/nonexistent"], "traces root /nonexistent is not a folder"),
        ("python -m jobs.commands.history", ["/nonexistent"], "traces root /nonexistent is not a folder"),
    ],
)
def test_a_wrong_value_is_one_line(
    prog: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main, _ = COMMANDS[prog]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and message in err, err


def _help(prog: str, capsys: pytest.CaptureFixture[str]) -> str:
    main, _ = COMMANDS[prog]
    with pytest.raises(SystemExit):
        main(["--help"])
    return capsys.readouterr().out


def _errors_and_help(
    main: Callable[[Sequence[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> str:
    try:
        main(argv)
    except SystemExit:
        pass
    return capsys.readouterr().out


def _errors(main: Callable[[Sequence[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        main(argv)
    except SystemExit:
        pass
    return capsys.readouterr().err


@pytest.mark.parametrize("prog", COMMANDS)
def test_help_is_plain_text(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(prog, capsys)
    assert text.startswith("usage: ") and not any(markup in text for markup in _MARKUP), text


def _walk(
    prog: str, main: Callable[[Sequence[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every option of the command, with every bad value, and the mistakes it has names for:
    each line is one error, no field is left unnamed, and each option a HINT names is the
    command's own."""
    usage = _errors_and_help(main, [*argv[: len(argv) - len(_WALKED[prog])], "--help"], capsys)
    usage = usage.split("\n\n")[0]
    accepted = set(_OPTION.findall(usage)) | {"--help"}
    takes_value = set(re.findall(r"\[(--[a-z-]+) [A-Z]", usage))
    runs = [[*argv, option, value] for option in sorted(takes_value) for value in _BAD_VALUES]
    runs += [[*argv, option] for option in sorted(accepted - takes_value - {"--help"})]
    hints = 0
    for run in runs:
        for line in _errors(main, run, capsys).splitlines():
            assert line.startswith(f"{prog}: error: "), (run, line)
            assert not re.search(r"\{[a-z_]+\}", line), (run, line)  # a field no option named
            hint = line.partition("HINT:")[2]
            hints += bool(hint)
            assert set(_OPTION.findall(hint)) <= accepted, (run, line, accepted)
    assert hints >= len(takes_value)


@pytest.fixture
def batch_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch script's variables, not a task's (no SLURM_PROCID): a task refuses to start."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    for name in ("SLURM_PROCID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("prog", _WALKED)
def test_every_hint_names_an_option_of_the_same_command(
    prog: str, capsys: pytest.CaptureFixture[str], batch_step: None
) -> None:
    main, _ = COMMANDS[prog]
    _walk(prog, main, _WALKED[prog], capsys)


@pytest.mark.parametrize("command", sorted(console.COMMANDS))
def test_slurm_profile_answers_as_the_command_it_runs(
    command: str, capsys: pytest.CaptureFixture[str], batch_step: None
) -> None:
    module = console.COMMANDS[command]
    prog = "submit.py" if command == "submit" else f"python -m {module.removesuffix('.cli')}"
    _walk(prog, console.main, [command, *_WALKED[prog]], capsys)


@pytest.mark.parametrize(
    ("prog", "argv", "message"),
    [
        (
            "python -m jobs.commands.capture",
            ["4242", "--ranks", "slowest"],
            "HINT: use 'all', a list '0,3' or ranges",
        ),
        (
            "python -m jobs.commands.archive",
            ["traces/4242", "--ranks", "slowest"],
            "is not a rank or a range",
        ),
        ("python -m jobs.commands.list", ["/nonexistent", "--last", "0"], "--last 0 must be at least 1"),
        ("python -m jobs.commands.list", ["/nonexistent", "--last", "5"], "HINT: add --ranks JOB"),
        (
            "python -m jobs.commands.report",
            ["traces/4242", "--archive-budget-mb", "0"],
            "--archive-budget-mb 0 must be positive. HINT: --merge-ranks",
        ),
        ("python -m jobs.commands.report", ["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_the_mistakes_that_were_misnamed(
    prog: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main, _ = COMMANDS[prog]
    err = _errors(main, argv, capsys)
    assert err.count("\n") == 1 and message in err, err


def test_slurm_profile_names_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert console.main(["bogus"]) == 2
    assert capsys.readouterr().err == (
        "slurm-profile: error: 'bogus' is not a command. HINT: use one of submit, list, report, compare, "
        "capture, hang, archive, history, or options alone to submit (slurm-profile --help)\n"
    )
    assert _errors(console.main, ["report", "--bogus"], capsys) == (
        "python -m jobs.commands.report: error: unrecognized arguments: --bogus. "
        "HINT: python -m jobs.commands.report --help\n"
    )


def test_slurm_profile_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert console.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("slurm-profile [command] [options]") and not any(m in text for m in _MARKUP), text


@pytest.mark.parametrize("command", sorted(p.stem for p in (REPO / "jobs" / "commands").glob("[a-z]*.py")))
def test_every_command_runs_as_a_module_and_says_what_it_is(command: str) -> None:
    """``python -m jobs.commands.<command> --help`` answers for each, as the docs write them."""
    result = run_module(f"jobs.commands.{command}", "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), f"python -m jobs.commands.{command} --help printed nothing"


def test_the_report_imports_each_stage_once_it_reaches_it(tmp_path: Path) -> None:
    """--help imports neither numpy nor the critical path; a report begins reading its traces
    before it imports what follows the reading (imported while they are read)."""
    helped = run_python(
        "import sys; from jobs.commands import report; report.build_parser().format_help();"
        "late = [m for m in sys.modules if m == 'numpy' or m.startswith('profiling.analysis.across_ranks.')];"
        "assert not late, late"
    )
    assert helped.returncode == 0, helped.stderr
    folder = write_job(tmp_path, cpu_job(2, lambda step: {}), 2)
    reported = run_python(
        "import sys; from pathlib import Path; from profiling.report import build, read;"
        "from profiling.report.settings import ReportSettings;"
        "seen = [];"
        "build.read_records = lambda *a, **k: seen.append('profiling.report.assemble' in sys.modules)"
        " or read.read_records(*a, **k);"
        f"build.build_report(Path({str(folder)!r}), ReportSettings(plot=False, merged_trace=False, jobs=2));"
        "assert seen == [False] and 'profiling.report.assemble' in sys.modules, seen",
        timeout=120,
    )
    assert reported.returncode == 0, reported.stderr
