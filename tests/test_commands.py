"""Every command answers a mistake on its command line with one line: the program, the mistake,
and a hint, never argparse's usage block or a traceback."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from jobs import capture, cli, task
from jobs import list as job_list
from profiling import compare, hang, report

COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], list[str]]] = {
    "submit.py": (cli.main, []),
    "python -m jobs.task": (task.main, []),
    "python -m jobs.list": (job_list.main, []),
    "python -m jobs.capture": (capture.main, ["4242"]),
    "python -m profiling.report": (report.main, ["traces/4242"]),
    "python -m profiling.compare": (compare.main, ["traces/4242", "traces/4243"]),
    "python -m profiling.hang": (hang.main, ["traces/4242"]),
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
        ("python -m profiling.report", ["traces/4242", "--jobs", "0"], "--jobs 0 must be at least 1"),
        (
            "python -m profiling.report",
            ["traces/4242", "--merge-budget-mb", "-1"],
            "--merge-budget-mb -1 must be positive",
        ),
        ("python -m profiling.report", ["/nonexistent/4242"], "holds no rank<r>_iter<a>_<b>.json"),
        ("python -m profiling.compare", ["/nonexistent/1", "/nonexistent/2"], "/nonexistent/1"),
        ("python -m profiling.hang", ["/nonexistent/4242"], "is not a folder"),
        ("python -m jobs.capture", ["4242", "--traces-root", "/nonexistent"], "no folder /nonexistent/4242"),
        ("python -m jobs.list", ["/nonexistent"], "traces root /nonexistent is not a folder"),
    ],
)
def test_a_wrong_value_is_one_line(
    prog: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main, _ = COMMANDS[prog]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and message in err, err
