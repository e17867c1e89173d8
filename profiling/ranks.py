"""Which ranks record a trace: ``all``, ``none``, ``0,3``, ``"0, 2, 4"``, ``0-3,8``, ``0,slowest``.

``none``: no rank records (every rank still keeps its step log, :mod:`profiling.folder.step_log`);

``slowest`` is the rank with the most compute per step before each window, chosen while the
job runs (see :mod:`profiling.recording.slowest`). Ranges stay ranges until checked against the job's
world size: a typo like ``0-9999999999`` is refused at once, never expanded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from slurm.common.errors import SettingError

_HINT = "HINT: use 'all', 'none', a list '0,3', ranges '0-3,8', or 'slowest'"
_NAMED_HINT = "HINT: use 'all', a list '0,3' or ranges '0-3,8'"
SLOWEST = "slowest"
NONE = "none"
DEFAULT_RANKS = "0"  # the tutorial's: rank 0 records, as --profile-ranks, ProfiledRun and capture default


class RankSpecError(SettingError):
    """A rank selection that is malformed or names ranks outside the job."""


@dataclasses.dataclass(frozen=True)
class RankSelection:
    """A parsed ``--profile-ranks`` value; :meth:`resolve` checks it against the world size."""

    text: str
    everyone: bool
    spans: tuple[tuple[int, int], ...]  # (first, last) of each rank or range, as written
    slowest: bool = False

    @property
    def nobody(self) -> bool:
        """``none``: no rank records on the schedule (live capture still can)."""
        return not (self.everyone or self.spans or self.slowest)

    @classmethod
    def parse(cls, text: str) -> RankSelection:
        spec = text.strip()
        if spec.lower() == "all":
            return cls(text=spec, everyone=True, spans=())
        if spec.lower() == NONE:
            return cls(text=spec, everyone=False, spans=())
        if not spec:
            raise RankSpecError(f"{{ranks}} is empty. {_HINT}")
        items = [item.strip() for item in spec.split(",")]
        slowest = any(item.lower() == SLOWEST for item in items)
        spans = tuple(_parse_item(item, spec, _HINT) for item in items if item.lower() != SLOWEST)
        return cls(text=spec, everyone=False, spans=spans, slowest=slowest)

    @classmethod
    def parse_named(cls, text: str) -> RankSelection:
        """Ranks named now, for a tool that acts on them at once (capture, the archive): no
        ``slowest``, which a job chooses while it runs, and no ``none``."""
        spec = text.strip()
        if spec.lower() == "all":
            return cls(text=spec, everyone=True, spans=())
        if not spec:
            raise RankSpecError(f"{{ranks}} is empty. {_NAMED_HINT}")
        spans = tuple(_parse_item(item.strip(), spec, _NAMED_HINT) for item in spec.split(","))
        return cls(text=spec, everyone=False, spans=spans)

    def resolve(self, world_size: int) -> frozenset[int]:
        """The ranks selected from the start in a job of ``world_size`` ranks (``slowest`` aside)."""
        if self.everyone:
            return frozenset(range(world_size))
        highest = max((last for _, last in self.spans), default=-1)
        if highest >= world_size:
            outside = min(max(first, world_size) for first, last in self.spans if last >= world_size)
            raise RankSpecError(
                f"{{ranks}} {self.text!r} selects rank {outside}, but the job has {world_size} "
                f"ranks (0-{world_size - 1}). HINT: ranks are global, 0 to nodes x gpus - 1"
            )
        return frozenset(rank for first, last in self.spans for rank in range(first, last + 1))

    def __str__(self) -> str:
        if self.everyone:
            return "all"
        if self.nobody:
            return NONE
        spans = sorted(set(self.spans))
        return ",".join(
            [*(f"{a}" if a == b else f"{a}-{b}" for a, b in spans), *([SLOWEST] if self.slowest else [])]
        )


def format_ranks(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``: thousands of ranks stay short (and parse back)."""
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and spans[-1][1] == rank - 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _parse_item(item: str, spec: str, hint: str) -> tuple[int, int]:
    low, dash, high = item.partition("-")
    if not low.strip().isdigit() or (dash and not high.strip().isdigit()) or not item.isascii():
        raise RankSpecError(f"{{ranks}} {spec!r}: {item!r} is not a rank or a range. {hint}")
    first, last = int(low), int(high) if dash else int(low)
    if last < first:
        raise RankSpecError(f"{{ranks}} {spec!r}: range {item!r} runs backwards. HINT: write {last}-{first}")
    return first, last
