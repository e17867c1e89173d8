import re

import pytest

from jobs.commands.submit import build_parser
from profiling.ranks import RankSelection, RankSpecError, format_ranks


@pytest.mark.parametrize(
    ("text", "world", "ranks"),
    [
        ("0", 4, {0}),
        ("0,3", 4, {0, 3}),
        ("0, 2, 4", 8, {0, 2, 4}),
        ("0-3,8", 16, {0, 1, 2, 3, 8}),
        ("all", 3, {0, 1, 2}),
        (" ALL ", 2, {0, 1}),
        ("3,3,1-2", 4, {1, 2, 3}),
        ("0,slowest", 4, {0}),
        ("SLOWEST", 4, set()),
        ("none", 4, set()),
    ],
)
def test_parse_and_resolve(text: str, world: int, ranks: set[int]) -> None:
    assert RankSelection.parse(text).resolve(world) == ranks


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("0,,1", "'' is not a rank or a range"),
        ("a", "'a' is not a rank or a range"),
        ("1-", "'1-' is not a rank or a range"),
        ("-1", "'-1' is not a rank or a range"),
        ("3-1", "range '3-1' runs backwards. HINT: write 1-3"),
        ("0;1", "'0;1' is not a rank or a range"),
    ],
)
def test_malformed_specs(text: str, message: str) -> None:
    with pytest.raises(RankSpecError) as error:
        RankSelection.parse(text)
    assert re.search(message, build_parser().describe(error.value))
    assert build_parser().describe(error.value).startswith("--profile-ranks ")


def test_rank_outside_world() -> None:
    with pytest.raises(RankSpecError) as error:
        RankSelection.parse("0,4").resolve(4)
    assert build_parser().describe(error.value) == (
        "--profile-ranks '0,4' selects rank 4, but the job has 4 ranks (0-3). "
        "HINT: ranks are global, 0 to nodes x gpus - 1"
    )
    assert str(error.value).startswith("ranks '0,4' selects rank 4")  # outside the command line: the field


def test_str_round_trips() -> None:
    assert str(RankSelection.parse("0-2, 5")) == "0-2,5"
    assert str(RankSelection.parse("all")) == "all"
    assert str(RankSelection.parse("slowest, 3,0")) == "0,3,slowest"


@pytest.mark.parametrize(
    ("ranks", "text"),
    [([], ""), ([4], "4"), ([0, 1, 2, 5], "0-2,5"), ([7, 3, 4, 3], "3-4,7"), (range(10_000), "0-9999")],
)
def test_format_ranks_is_short_and_parses_back(ranks, text: str) -> None:
    assert format_ranks(ranks) == text
    if text:
        assert RankSelection.parse(text).resolve(10_000) == frozenset(ranks)


def test_none_records_on_no_schedule_so_a_short_run_needs_none() -> None:
    from pathlib import Path

    from jobs.spec import TaskConfig
    from profiling.recording.config import ProfilerConfig
    from workload.config import WorkloadConfig

    selection = RankSelection.parse(" None ")
    assert selection.nobody and str(selection) == "none"
    assert not RankSelection.parse("slowest").nobody and not RankSelection.parse("0").nobody
    config = TaskConfig(
        workload=WorkloadConfig(steps=5), profiler=ProfilerConfig(ranks=selection), traces_root=Path("/t")
    )  # the schedule needs 18 steps for a window; no rank records on it
    assert config.workload.steps == 5
