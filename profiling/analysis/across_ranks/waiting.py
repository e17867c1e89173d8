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
from collections.abc import Hashable, Mapping

import numpy as np

from profiling.analysis.across_ranks.straggler import shared_collectives


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
    spans: Mapping[int, Mapping[Hashable, tuple[float, float]] | None],
    members: Mapping[Hashable, frozenset[int]] | None = None,
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
    absent = (np.nan, np.nan)
    times = np.array([[(spans[r] or {}).get(key, absent) for key in common] for r in ranks])
    arrival, end = times[..., 0], times[..., 1]
    taking_part = ~np.isnan(arrival)
    last = np.nanmax(arrival, axis=0)
    wait = np.where(taking_part, np.clip(np.minimum(end, last) - arrival, 0.0, None), 0.0)
    transfer = np.where(taking_part, np.clip(end - np.maximum(arrival, last), 0.0, None), 0.0)
    latest_of = np.where(taking_part, arrival, -np.inf).argmax(axis=0)
    latest = np.where(last > np.nanmin(arrival, axis=0), latest_of, -1)  # a tie: nobody
    return {
        rank: WaitSplit(
            collectives=int(taking_part[row].sum()),
            wait_us=float(wait[row].sum()),
            transfer_us=float(transfer[row].sum()),
            last_arrivals=int((latest == row).sum()),
        )
        for row, rank in enumerate(ranks)
    }
