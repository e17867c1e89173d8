"""Property tests of the parsers that users and the scheduler feed: any input up to 1 KB either
parses to something consistent or is refused with our one-line error, fast, never a traceback.

Command-line values go through submit.py's own parsing (argparse, the job spec), in process;
scheduler strings through :mod:`slurm.hostnames` and :func:`slurm.identity.from_environment`. Each
test also asserts that a fair share of its inputs is accepted: a parser that refused
everything would pass every other check.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import json
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from jobs.commands.submit import build_parser, job_spec_from_args
from jobs.spec import JobSpec
from profiling.analysis.reading.collectives import sequence_key
from profiling.ranks import RankSelection
from profiling.recording.schedule import MAX_WINDOWS
from slurm.common.errors import SettingError
from slurm.resources import owned_sbatch_option

MAX_INPUT = 1024
MAX_SECONDS = 0.1  # CPU time of the parsing thread: other processes and threads do not count
MAX_ERROR = 3 * MAX_INPUT  # the input may be quoted in the message, once or twice
# No "explain" phase: it traces every line, and the timings would measure the tracer.
PROPERTIES = settings(
    max_examples=300,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

small_text = st.text(max_size=MAX_INPUT)
number = st.one_of(
    st.integers(-5, 40), st.integers(0, 10**15), st.sampled_from(["1e3", "²", "٣", " 7 ", "0x1f", ""])
)


class Outcomes:
    """How many of the running property test's inputs were accepted and refused."""

    def __init__(self) -> None:
        self.accepted = self.refused = 0

    def record(self, accepted: bool) -> None:
        self.accepted += accepted
        self.refused += not accepted


OUTCOMES = Outcomes()  # of the test running now: pytest runs one at a time


def accepting(at_least: float) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The property test it wraps must accept at least ``at_least`` of the inputs it is given."""

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> None:
            OUTCOMES.__init__()
            test(*args, **kwargs)  # hypothesis runs every example in here
            total = OUTCOMES.accepted + OUTCOMES.refused
            assert total and OUTCOMES.accepted >= at_least * total, (
                f"{OUTCOMES.accepted} of {total} inputs accepted, fewer than {at_least:.0%}"
            )

        return run

    return decorate


def timed(parse: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    # The parser's own CPU time: this thread's, with the collector paused. Process time also
    # counts the threads earlier tests leave in this process (torch's) and collections of the
    # heap they leave: in CI it once charged 0.66 s to a parse that takes 90 µs alone.
    collecting = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        result, error = parse(), None
    except BaseException as caught:  # noqa: BLE001 - what kind it is, is the property checked
        result, error = None, caught
    finally:
        spent = time.thread_time() - started
        if collecting:
            gc.enable()
    assert spent < MAX_SECONDS
    return result, error


def submit_spec(*argv: str) -> JobSpec | str:
    """``submit.py --dry-run ARGV``'s validation: the job spec, or the one line it prints."""
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args, error = timed(lambda: parser.parse_args(["--dry-run", *argv]))
    if error is not None:
        assert isinstance(error, SystemExit) and error.code == 2, repr(error)
        OUTCOMES.record(accepted=False)
        return one_line(err.getvalue(), "submit.py: error: ")
    spec, error = timed(lambda: job_spec_from_args(args))
    OUTCOMES.record(accepted=error is None)
    if error is not None:
        assert isinstance(error, SettingError), repr(error)  # anything else would be a traceback
        return one_line(f"submit.py: error: {build_parser().describe(error)}\n", "submit.py: error: ")
    return spec


def refused(error: BaseException | None, kind: type[Exception]) -> bool:
    """Whether the input was refused, as it may be: with ``kind``, in one short line."""
    OUTCOMES.record(accepted=error is None)
    if error is None:
        return False
    assert isinstance(error, kind), repr(error)
    assert "\n" not in str(error) and len(str(error)) <= MAX_ERROR
    return True


def one_line(text: str, prefix: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert text.startswith(prefix) and "Traceback" not in text
    assert len(text) <= MAX_ERROR + 200, len(text)
    return text


# --- --profile-ranks -----------------------------------------------------------------------------

rank_item = st.one_of(
    st.integers(0, 10**12).map(str),
    st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)).map(lambda ab: f"{ab[0]}-{ab[1]}"),
    st.sampled_from(["all", "slowest", "ALL", " 3 ", "-", "1-", "-2", "1--2", "", "x"]),
    st.text(alphabet=" ,-0123456789", max_size=12),
)
rank_spec = st.one_of(
    small_text,
    st.lists(rank_item, max_size=80).map(",".join).filter(lambda spec: len(spec) <= MAX_INPUT),
)


def rank_specs(world: int) -> st.SearchStrategy[str]:
    """Selections of ranks of a job of ``world`` ranks, well-formed half the time."""
    rank = st.integers(0, world - 1)
    item = st.one_of(
        rank.map(str), st.tuples(rank, rank).map(lambda ab: f"{min(ab)}-{max(ab)}"), st.just("slowest")
    )
    return st.one_of(st.just("all"), st.lists(item, min_size=1, max_size=20).map(", ".join), rank_spec)


@accepting(0.2)
@PROPERTIES
@given(nodes=st.integers(1, 64), gpus=st.integers(1, 8), data=st.data())
def test_rank_specs(nodes: int, gpus: int, data: st.DataObject) -> None:
    spec = data.draw(rank_specs(nodes * gpus), label="spec")
    outcome = submit_spec("--nodes", str(nodes), "--gpus", str(gpus), "--profile-ranks", spec)
    if isinstance(outcome, str):
        return
    selection = outcome.task.profiler.ranks
    chosen = selection.resolve(nodes * gpus)
    assert chosen <= set(range(nodes * gpus))
    assert chosen or selection.slowest or selection.everyone or not selection.spans
    again = RankSelection.parse(str(selection))  # what the manifest and the batch script carry
    assert (again.resolve(nodes * gpus), again.slowest) == (chosen, selection.slowest)


# --- schedule numbers ------------------------------------------------------------------------------


@st.composite
def fitting_schedules(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    """(steps, wait, warmup, active, repeat) of a schedule that records every window it asks for."""
    wait, warmup, active, repeat = (
        draw(st.integers(low, high)) for low, high in ((0, 20), (0, 10), (1, 10), (0, 5))
    )
    needed = (wait + warmup + active) * max(repeat, 1)
    return draw(st.integers(needed, needed + 50)), wait, warmup, active, repeat


@accepting(0.2)
@PROPERTIES
@given(numbers=st.one_of(fitting_schedules(), st.tuples(number, number, number, number, number)))
def test_schedule_numbers(numbers: tuple[Any, Any, Any, Any, Any]) -> None:
    steps, wait, warmup, active, repeat = numbers
    outcome = submit_spec(
        "--steps", str(steps), "--schedule-wait", str(wait), "--warmup", str(warmup),
        "--active", str(active), "--repeat", str(repeat),
    )  # fmt: skip
    if isinstance(outcome, str):
        return
    schedule, total = outcome.task.profiler.schedule, outcome.task.workload.steps
    windows = schedule.windows(total)
    assert 1 <= len(windows) <= MAX_WINDOWS
    # torch.profiler.schedule's cycles: `repeat` of them, or (0) every whole one in the run
    cycle = schedule.wait + schedule.warmup + schedule.active
    cycles = schedule.repeat or total // cycle
    assert [first for first, _ in windows] == [
        c * cycle + schedule.wait + schedule.warmup for c in range(cycles)
    ]
    for first, last in windows:
        assert 0 <= first <= last < total and last - first + 1 == schedule.active


# --- --sbatch KEY=VALUE ----------------------------------------------------------------------------

sbatch_item = st.one_of(
    st.tuples(
        st.sampled_from(["constraint", "mail-type", "comment", "exclusive", "mem", "reservation"]),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789=:,._-/ ", max_size=40),
    ).map(lambda kv: f"{kv[0]}={kv[1]}"),
    small_text,
    st.tuples(
        st.one_of(
            st.sampled_from(
                ["nodes", "N", "output", "o", "gres", "part", "no", "constraint", "mail-type", "c"]
            ),
            st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_ ", max_size=20),
        ),
        st.one_of(st.sampled_from(["gpu:2", "a100", "$(id)", "x\ny", "1"]), st.text(max_size=60)),
    ).map(lambda kv: f"{kv[0]}={kv[1]}"),
)


@accepting(0.2)
@PROPERTIES
@given(item=sbatch_item)
def test_sbatch_options(item: str) -> None:
    outcome = submit_spec("--sbatch", item)
    if isinstance(outcome, str):
        return
    [(key, value)] = outcome.slurm.extra
    assert owned_sbatch_option(key, value) is None  # never one of ours
    assert all(ord(char) >= 32 and ord(char) != 127 for char in value)  # cannot end the #SBATCH line
    assert key[0].isalpha() and key.islower()


# --- --inject-failure, --inject-hang, --inject-slowdown ----------------------------------------------

inject_spec = st.one_of(
    st.tuples(st.integers(0, 3), st.integers(1, 39)).map(lambda rs: f"{rs[0]}:{rs[1]}"),  # in the job
    small_text,
    st.tuples(number, number).map(lambda rv: f"{rv[0]}:{rv[1]}"),
    st.sampled_from(["1:", ":1", "1:2:3", "²:1", "1 : 2", "-1:3"]),
)


@accepting(0.2)
@PROPERTIES
@given(option=st.sampled_from(["--inject-failure", "--inject-hang", "--inject-slowdown"]), spec=inject_spec)
def test_inject_specs(option: str, spec: str) -> None:
    outcome = submit_spec("--nodes", "2", "--gpus", "2", "--steps", "40", option, spec)
    if isinstance(outcome, str):
        return
    fault = getattr(outcome.task.workload, option.removeprefix("--").replace("-", "_"))
    if option == "--inject-slowdown":
        (fault,) = fault  # repeatable: one given
    assert 0 <= fault.rank < 4
    if option == "--inject-slowdown":
        assert 0 < fault.ms <= 60_000
    else:
        assert 0 <= fault.step < 40


_KEY_PART = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text())


@given(st.lists(st.one_of(_KEY_PART, st.tuples(_KEY_PART, _KEY_PART)), max_size=4))
def test_a_collectives_key_is_the_json_it_always_was(parts: list[Any]) -> None:
    """Keys read back from analysis records written before msgspec made them must match."""
    assert sequence_key(*parts) == json.dumps(tuple(parts), separators=(",", ":"))
