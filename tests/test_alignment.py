"""Clock alignment and the straggler verdict on traces without sequence numbers, where
collectives are dense and alike: copies of a real GPU trace (``nccl_data``, its 3 steps twice
over) as older torch records them, with every 2nd compute kernel made an all-reduce of one
kind: about 450 all-reduces per 220 ms step. See :mod:`tests.trace_variants`."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from profiling.analysis.clocks.alignment import align
from profiling.analysis.per_trace.breakdown import analyse
from profiling.analysis.reading.collectives import Instance
from profiling.analysis.reading.instances import instances
from profiling.analysis.reading.trace_events import from_document
from profiling.folder.layout import meta_of
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests import trace_variants as tv

RANKS = 8


@pytest.fixture(scope="module")
def dense() -> dict[str, Any]:
    return tv.dense_allreduces(tv.repeated_steps(tv.load("nccl_data.json.gz"), 2), every=2)


def copies(trace: dict[str, Any], shifts_us: list[float]) -> list[dict[str, Any]]:
    return [tv.as_rank(trace, rank, len(shifts_us), shift) for rank, shift in enumerate(shifts_us)]


def report_of(folder: Path, traces: list[dict[str, Any]]) -> dict[str, Any]:
    return build_report(tv.write(folder, traces), ReportSettings(merged_trace=False, plot=False))


def shift_errors(report: dict[str, Any], shifts_us: list[float]) -> dict[int, float]:
    """How far each rank's measured shift is from the truth (moving rank r by -shifts[r] + shifts[0])."""
    return {r.rank: r.clock.shift_us - (shifts_us[0] - shifts_us[r.rank]) for r in report.ranks}


def test_the_case_is_dense_and_alike(dense: dict[str, Any]) -> None:
    analysis = analyse(from_document(dense))
    found = instances(analysis.collectives)
    assert len(analysis.steps) == 6 and {i.key for i in found} == {'["op","AllReduce",[null,null]]'}
    assert len(found) / len(analysis.steps) > 400


@pytest.mark.parametrize(
    "shifts_us",
    [
        [r * 1700.0 for r in range(RANKS)],
        [random.Random(11).uniform(-50_000.0, 50_000.0) for _ in range(RANKS)],
    ],
    ids=["r x 1.7 ms", "random up to 50 ms"],
)
def test_exact_copies_are_aligned_exactly_and_no_straggler_is_named(
    dense: dict[str, Any], tmp_path: Path, shifts_us: list[float]
) -> None:
    report = report_of(tmp_path, copies(dense, shifts_us))
    for rank, error in shift_errors(report, shifts_us).items():
        clock = report.ranks[rank].clock
        assert abs(error) <= 5.0, (rank, clock)
        if rank:
            assert clock.method == "matched collectives" and clock.paired_share == 1.0
            assert clock.residual_us == pytest.approx(0.0, abs=1e-3)
    straggler = report.straggler
    assert straggler.verdict == "none" and straggler.rank is None, straggler.text
    assert straggler.text.startswith("no significant straggler: no rank reached any of the")


def test_jitter_lost_collectives_and_a_late_start_still_align(dense: dict[str, Any], tmp_path: Path) -> None:
    shifts = [r * 1700.0 for r in range(RANKS)]
    traces = []
    for rank, trace in enumerate(copies(dense, shifts)):
        trace = tv.jitter_ends(trace, 25.0, seed=rank)
        traces.append(tv.drop_collectives(trace, 0.1, seed=100 + rank, first=25 if rank == 3 else 0))
    report = report_of(tmp_path, traces)
    for rank, error in shift_errors(report, shifts).items():
        clock = report.ranks[rank].clock
        assert abs(error) <= 50.0, (rank, clock)
        if rank:
            # what the pairs achieve, said as it is: ends ±25 µs on either side
            assert clock.method == "matched collectives" and clock.paired_share > 0.6
            assert 5.0 < clock.residual_us < 50.0
            # the ± covers what the model errs by (ends ±25 µs apart), not only the pairs' median
            assert clock.uncertainty_us >= clock.residual_us and abs(error) <= 3 * clock.uncertainty_us
    assert report.straggler.verdict == "none", report.straggler.text


def test_a_rank_late_at_every_allreduce_is_named(dense: dict[str, Any], tmp_path: Path) -> None:
    shifts = [r * 1700.0 for r in range(RANKS)]
    report = report_of(
        tmp_path, tv.late_at_every_allreduce(copies(dense, shifts), late_rank=5, late_us=2000.0)
    )
    for rank, error in shift_errors(report, shifts).items():
        assert abs(error) <= 5.0, (rank, report.ranks[rank].clock)
    straggler = report.straggler
    assert (straggler.verdict, straggler.rank) == ("straggler", 5), straggler.text
    assert straggler.lateness_ms == pytest.approx(2.0, abs=0.05)
    assert " 2.00 ms after the next rank on average" in straggler.text
    # the others wait 2 ms for it in each all-reduce; it waits for none
    late = report.ranks[5].collective_wait
    steps = len(report.ranks[5].steps)
    allreduces = late.last_arrivals
    assert allreduces >= 0.9 * late.collectives and late.waiting_share < 0.01
    for rank in (0, 3):
        waited = report.ranks[rank].collective_wait
        assert waited.last_arrivals == 0 and waited.collectives == late.collectives
        assert waited.wait_ms * steps == pytest.approx(2.0 * allreduces, rel=0.01)
        assert waited.transfer_ms == pytest.approx(late.transfer_ms, rel=0.01)
    markdown = (meta_of(tmp_path) / "report.md").read_text()
    assert f"rank 5 arrived last in {allreduces} of {late.collectives}" in markdown, markdown


def test_collectives_that_no_offset_explains_are_refused(dense: dict[str, Any], tmp_path: Path) -> None:
    traces = copies(dense, [0.0, 1700.0])
    traces[1] = tv.random_ends(traces[1], seed=5)
    report = report_of(tmp_path, traces)
    clock = report.ranks[1].clock
    assert (clock.method, clock.shift_us, clock.paired_share) == ("base time", 0.0, None)
    assert clock.note.startswith("clocks could not be aligned: no offset pairs enough of them beyond chance")
    straggler = report.straggler
    assert (straggler.verdict, straggler.rank) == ("undetermined", None)
    assert "the clocks could not be aligned for rank(s) 1" in straggler.text
    markdown = (meta_of(tmp_path) / "report.md").read_text()
    assert "after the next rank" not in markdown and "| 1 | base time | 0.0 | 0 | - | - | - |" in markdown


def periodic(count: int, period_us: float, shift_us: float = 0.0) -> list[Instance]:
    """All-reduces of one kind, exactly ``period_us`` apart, in one step: only the edges tell
    one offset from the next."""
    return [
        Instance(
            '["op","AllReduce",null]', k * period_us + shift_us - 50.0, k * period_us + shift_us, "", True
        )
        for k in range(count)
    ]


def test_an_offset_as_good_as_another_is_called_ambiguous() -> None:
    clock = align(periodic(200, 500.0), periodic(200, 500.0, 1250.0), prior_us=0.0, step_us=100_000.0)
    assert (clock.method, clock.shift_us, clock.matched) == ("base time", 0.0, {})
    assert clock.note.startswith("clocks could not be aligned: ambiguous: shifts of ")
    # one all-reduce a step: the step that issued each tells them apart
    stepped = [
        [Instance(i.key, i.arrival, i.end, i.label, True, step=k) for k, i in enumerate(found)]
        for found in (periodic(200, 500.0), periodic(200, 500.0, 1250.0))
    ]
    clock = align(*stepped, prior_us=0.0, step_us=500.0)
    assert clock.method == "matched collectives" and clock.shift_us == pytest.approx(-1250.0)


def test_alignment_of_a_dense_pair_takes_well_under_a_second(dense: dict[str, Any]) -> None:
    analysis = analyse(from_document(dense))
    reference = instances(analysis.collectives)
    step_us = statistics.median(s.duration_us for s in analysis.steps)
    shifted = [
        Instance(i.key, i.arrival - 23_456.7, i.end - 23_456.7, i.label, i.symmetric, i.step)
        for i in reference
    ]
    started = time.thread_time()
    clock = align(reference, shifted, prior_us=0.0, step_us=step_us)
    assert time.thread_time() - started < 1.0
    assert clock.shift_us == pytest.approx(23_456.7, abs=1e-3) and clock.pairs == len(reference)


def test_ranks_of_one_host_share_its_clock_and_each_other_host_is_measured_once(
    dense: dict[str, Any], tmp_path: Path
) -> None:
    shifts = [0.0, 0.0, 1700.0, 1700.0]  # hosts a and b: their ranks' clocks agree
    traces = [dict(trace, host_name=host) for trace, host in zip(copies(dense, shifts), "aabb", strict=True)]
    clocks = [r.clock for r in report_of(tmp_path, traces).ranks]
    assert (clocks[1].method, clocks[1].shift_us, clocks[1].uncertainty_us) == ("one host", 0.0, 0.0)
    assert clocks[2].method == "matched collectives" and abs(clocks[2].shift_us + 1700.0) <= 5.0
    assert clocks[3].method == "one host" and clocks[3].note.startswith("its node's clock")
    assert clocks[3].shift_us == clocks[2].shift_us and clocks[3].uncertainty_us == clocks[2].uncertainty_us
    assert clocks[2].uncertainty_us >= clocks[2].residual_us  # the model's own error, at least


def test_a_delay_the_last_arrival_adds_to_its_ends_is_within_the_clock_uncertainty() -> None:
    # One host (truth: no shift); one rank arrives last at every collective and leaves each a few
    # µs after the others, longer for larger messages: every pair carries that delay, the
    # residual stays at the ends' jitter, and the shift is off by it (as on a real one-host job:
    # 6.2 µs at ± 1.8, 3.4 times its ±)
    rng = random.Random(6)
    delay_us = {"allgather": 2.0, "allreduce": 6.0, "reducescatter": 10.0}
    reference, other = [], []
    for k in range(21):
        kind, start = list(delay_us)[k % 3], k * 1000.0
        key, late = f'["seq","0",{k}]', rng.uniform(5.0, 100.0)
        end = start + late + 50.0
        reference.append(
            Instance(key, start, end + rng.gauss(0, 1.0), f"{kind} (pg 0, seq {k})", True, k // 3)
        )
        other.append(
            Instance(
                key,
                start + late,
                end + delay_us[kind] + rng.gauss(0, 1.0),
                f"{kind} (pg 0, seq {k})",
                True,
                k // 3,
            )
        )
    clock = align(reference, other, prior_us=0.0, step_us=3000.0)
    assert clock.method == "sequence numbers" and abs(clock.shift_us) > 4.0
    assert abs(clock.shift_us) > 1.5 * clock.residual_us  # the residual's ± (the last stop's) missed it
    assert abs(clock.shift_us) <= clock.uncertainty_us, clock  # the ± covers the truth
