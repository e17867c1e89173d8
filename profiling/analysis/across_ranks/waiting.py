"""A rank's time in collectives, split into waiting for the last rank and transferring.

No rank leaves a collective before every rank has arrived in it. On the job's common clock
(the report's aligned clocks), a rank that arrives at ``a`` in a collective whose last rank
arrives at ``last``, and leaves it at ``e``, spends ``min(e, last) - a`` *waiting* and
``e - max(a, last)`` *transferring*. A collective whose time is mostly waiting points at a
straggler (the last to arrive), not at the network; its bandwidth measured over its whole
time understates the link.

Only collectives every compared rank of their group reached count (a rank whose clock could
not be paired is not compared); in a job of many groups each rank waits for its group's last.
The split is as accurate as the clocks: a wait shorter than the clocks' ± is noise (the report
shows each rank's ±).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from profiling.analysis.across_ranks.critical_path.walk import Key
from profiling.analysis.across_ranks.straggler import Memberships, shared_collectives


@dataclasses.dataclass(frozen=True)
class WaitSplit:
    """One rank's collectives every compared rank reached: time waiting, time transferring."""

    collectives: int
    wait_us: float
    transfer_us: float
    last_arrivals: int  # in how many of them this rank arrived last (the others waited for it)

    @property
    def waiting_share(self) -> float | None:
        total = self.wait_us + self.transfer_us
        return self.wait_us / total if total > 0 else None


def split_waiting(
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    members: Mapping[Key, frozenset[int]] | None = None,
) -> dict[int, WaitSplit]:
    """Each compared rank's split; ``spans[rank]`` maps a collective (by a key shared across
    ranks) to the rank's (arrival, end) on the common clock, None for a rank not compared;
    ``members``: the ranks of each collective's group where not every rank's (each rank then
    waits for its group's last). Empty with fewer than two compared ranks."""
    ranks = sorted(rank for rank, found in spans.items() if found is not None)
    if len(ranks) < 2:
        return {}
    common = sorted(shared_collectives(spans, ranks, members or {}), key=str)
    if not common:
        return {rank: WaitSplit(0, 0.0, 0.0, 0) for rank in ranks}
    if members:
        return _split_in_groups(spans, ranks, members, common)
    times = np.array([[spans[r][key] for key in common] for r in ranks])  # type: ignore[index]
    arrival, end = times[..., 0], times[..., 1]
    last = arrival.max(axis=0)
    wait = np.clip(np.minimum(end, last) - arrival, 0.0, None)
    transfer = np.clip(end - np.maximum(arrival, last), 0.0, None)
    latest = np.where(last > arrival.min(axis=0), arrival.argmax(axis=0), -1)  # a tie: nobody
    return {
        rank: WaitSplit(
            collectives=len(common),
            wait_us=float(wait[row].sum()),
            transfer_us=float(transfer[row].sum()),
            last_arrivals=int((latest == row).sum()),
        )
        for row, rank in enumerate(ranks)
    }


def _split_in_groups(
    spans: Mapping[int, Mapping[Key, tuple[float, float]] | None],
    ranks: list[int],
    members: Mapping[Key, frozenset[int]],
    common: list[Key],
) -> dict[int, WaitSplit]:
    """The split where each collective has its own members: each waits for its group's last."""
    arrivals = Memberships.of(spans, ranks, members, common, 0)
    ends = np.array(
        [_found(spans[ranks[r]])[common[c]][1] for r, c in zip(arrivals.rows, arrivals.columns, strict=True)]
    )
    bounds = np.r_[arrivals.starts[1:], len(arrivals.rows)]
    last_index = bounds - 1
    last = np.repeat(arrivals.times[last_index], np.diff(np.r_[arrivals.starts, len(arrivals.rows)]))
    wait = np.clip(np.minimum(ends, last) - arrivals.times, 0.0, None)
    transfer = np.clip(ends - np.maximum(arrivals.times, last), 0.0, None)
    first = arrivals.times[arrivals.starts]
    latest_rows = arrivals.rows[last_index][arrivals.times[last_index] > first]  # a tie: nobody
    count = len(ranks)
    wait_us = np.bincount(arrivals.rows, weights=wait, minlength=count)
    transfer_us = np.bincount(arrivals.rows, weights=transfer, minlength=count)
    taken = np.bincount(arrivals.rows, minlength=count)
    lasts = np.bincount(latest_rows, minlength=count)
    return {
        rank: WaitSplit(
            collectives=int(taken[row]),
            wait_us=float(wait_us[row]),
            transfer_us=float(transfer_us[row]),
            last_arrivals=int(lasts[row]),
        )
        for row, rank in enumerate(ranks)
    }


def _found(spans: Mapping[Key, tuple[float, float]] | None) -> Mapping[Key, tuple[float, float]]:
    """A compared rank's spans: a rank without any is not compared (Memberships leaves it out)."""
    assert spans is not None
    return spans
