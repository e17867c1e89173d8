"""Which ranks record a trace: ``all``, ``0,3``, ``"0, 2, 4"``, ``0-3,8``."""

from __future__ import annotations

import dataclasses

from profiling.setting_error import SettingError

_HINT = "HINT: use 'all', a list '0,3' or ranges '0-3,8'"


class RankSpecError(SettingError):
    """A rank selection that is malformed or names ranks outside the job."""


@dataclasses.dataclass(frozen=True)
class RankSelection:
    """A parsed ``--profile-ranks`` value; :meth:`resolve` checks it against the world size."""

    text: str
    everyone: bool
    ranks: tuple[int, ...]  # sorted, unique; empty when ``everyone``

    @classmethod
    def parse(cls, text: str) -> RankSelection:
        spec = text.strip()
        if spec.lower() == "all":
            return cls(text=spec, everyone=True, ranks=())
        if not spec:
            raise RankSpecError(f"{{ranks}} is empty. {_HINT}")
        ranks: set[int] = set()
        for item in spec.split(","):
            ranks.update(_parse_item(item.strip(), spec))
        return cls(text=spec, everyone=False, ranks=tuple(sorted(ranks)))

    def resolve(self, world_size: int) -> frozenset[int]:
        """The selected ranks of a job of ``world_size`` ranks."""
        if self.everyone:
            return frozenset(range(world_size))
        outside = [rank for rank in self.ranks if rank >= world_size]
        if outside:
            raise RankSpecError(
                f"{{ranks}} {self.text!r} selects rank {outside[0]}, but the job has {world_size} "
                f"ranks (0-{world_size - 1}). HINT: ranks are global, 0 to nodes x gpus - 1"
            )
        return frozenset(self.ranks)

    def __str__(self) -> str:
        return "all" if self.everyone else ",".join(map(str, self.ranks))


def _parse_item(item: str, spec: str) -> range:
    low, dash, high = item.partition("-")
    if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
        raise RankSpecError(f"{{ranks}} {spec!r}: {item!r} is not a rank or a range. {_HINT}")
    first, last = int(low), int(high) if dash else int(low)
    if last < first:
        raise RankSpecError(f"{{ranks}} {spec!r}: range {item!r} runs backwards. HINT: write {last}-{first}")
    return range(first, last + 1)
