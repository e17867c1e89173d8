"""``--auto-capture``: a rank the live step logs show slow is recorded while it is slow, with a
typical rank beside it, through the same requests a person makes (:mod:`jobs.capture`).

Rank 0's node reads every rank's step log every :attr:`AutoCaptureConfig.look_every_s`
(:mod:`jobs.commands.metrics`) and hands the map to :meth:`AutoCapture.look`. What is slow is the
run map's own rule (:mod:`profiling.analysis.run.run_map`), so that the trigger and the report
agree: a rank's CPU time per step over the median of its peers', smoothed over 5 steps, above
1 + max(20 %, 3 robust deviations of the run's step-to-step noise), for at least 10 steps, and
still so at the last step the ranks have logged. A balanced job's bursts (5 steps 20 % slower
where 4 ranks share 2 cores) stay below it.

Who is recorded: the suspect; a *reference*, the rank whose time in the suspect's slow steps
was nearest its peers' median (of the suspect's pipeline stage, where the job has stages: they
run the same layers); in a job with stages, the suspect's pipeline neighbours, the ranks that
send to it and receive from it.

Bounds (docs/auto-capture.md): at most ``max_captures`` a job (counted in the job folder, so a
requeued attempt does not start again); ``cooldown_s`` between two; none while another capture,
a person's or its own, is not yet recorded; none where the captured traces' bytes plus the next
one's estimate would pass ``max_bytes``. A rank slow on and on is one finding, captured once; one
held back by the cool-down or a pending capture is captured once they pass, if still slow.
Each decision, a capture or the bound that held it back, is one line in rank 0's log; the
captures' reasons go to the manifest (``captures[].trigger``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import msgspec
import numpy as np

from profiling.analysis.run import run_map
from profiling.analysis.run.run_map import RunMap, Segment
from profiling.folder.layout import JobFolder
from profiling.folder.requests import read_accepted, read_requests, write_request
from profiling.folder.traces import list_traces
from profiling.ranks import format_ranks
from profiling.recording.config import AutoCaptureConfig
from profiling.schema.manifest import AutoCaptureRecord, CaptureRecord, CaptureTrigger
from slurm.common.mesh import PIPELINE, Dims, coordinates, layout_size, rank_at

# A capture costs the ranks it records, so the trigger asks for more than the map's 1.2: a third
# slower, NVIDIA Resiliency Extension's default (a score below 0.75). Balanced 4-rank jobs on 2
# cores have had a rank 1.28x its peers for 10 steps (tests/bench/bench_trigger.py); the map
# shows such a stretch, the trigger leaves it.
MIN_RATIO = 1 / 0.75
# bounds that pass: a capture they hold back is asked for once they have, if the rank is still slow
COOL_DOWN, PENDING = "cool-down", "pending"
WAITS = (COOL_DOWN, PENDING)


def _accepted(folder: JobFolder, request_id: int) -> CaptureRecord | None:
    """The steps and ranks the job agreed on for a request; None: not yet (or not readable)."""
    try:
        return msgspec.convert(read_accepted(folder, request_id), CaptureRecord)
    except msgspec.ValidationError:
        return None


def manifest_record(config: AutoCaptureConfig) -> AutoCaptureRecord | None:
    """``--auto-capture``'s bounds and rule, as the manifest keeps them; None: not asked for."""
    if not config.enabled:
        return None
    return AutoCaptureRecord(
        max_captures=config.max_captures,
        cooldown_s=config.cooldown_s,
        max_bytes=config.max_bytes,
        active=config.active,
        look_every_s=config.look_every_s,
        min_excess=run_map.MIN_EXCESS,
        noise_sigmas=run_map.NOISE_SIGMAS,
        min_steps=run_map.MIN_STEPS,
        min_ratio=round(MIN_RATIO, 4),
    )


def ongoing(run: RunMap) -> list[Segment]:
    """The slow segments still going on at the last step every rank has logged (the ranks flush
    their logs at different moments; the smoothing may end a segment a couple of steps early),
    by a median of at least :data:`MIN_RATIO` their peers'."""
    if len(run.ranks) < 2 or not run.first.size:
        return []
    now = int(run.last_step.min())
    return [s for s in run_map.segments(run) if s.last >= now - run_map.SMOOTHING and s.ratio >= MIN_RATIO]


class AutoCapture:
    """Rank 0's node's trigger: one :meth:`look` per reading of the step logs."""

    def __init__(
        self,
        folder: JobFolder,
        config: AutoCaptureConfig,
        dims: Dims | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder, self.config, self._clock = folder, config, clock
        self._dims = dims if dims and PIPELINE in dict(dims) else None  # neighbours and stages need pp
        self._asked_at: float | None = None
        self._handled: dict[int, int] = {}  # rank -> last step of its slow stretch already decided on
        self._waiting: dict[int, str] = {}  # rank -> the wait (WAITS) last said for it

    def look(self, run: RunMap) -> str | None:
        """A capture asked for where a rank has turned slow, and the line for the log that says
        so, or which bound held it back; None where no rank has newly turned slow."""
        now = ongoing(run)
        found = [s for s in now if s.first > self._handled.get(s.rank, -1)]
        for segment in now:  # a stretch already decided on goes on: still the same finding
            if segment.rank in self._handled and segment.first <= self._handled[segment.rank]:
                self._handled[segment.rank] = segment.last
        if not found:
            return None
        suspect = max(found, key=lambda s: s.ratio)
        trigger = self._trigger(suspect, run)
        ranks = [
            trigger.rank,
            *([trigger.reference] if trigger.reference is not None else []),
            *trigger.neighbours,
        ]
        held = self._held_back(run, len(ranks))
        if held is not None and held[0] in WAITS:  # asked for once it passes, if the rank is still slow
            said, self._waiting[suspect.rank] = self._waiting.get(suspect.rank), held[0]
            if said == held[0]:
                return None  # said at an earlier look
            return (
                f"--auto-capture: {trigger.why}; not yet captured: {held[1]} (it will be if still slow then)"
            )
        for segment in found:  # decided on: a later finding of the rank that waits is said again
            self._handled[segment.rank] = segment.last
            self._waiting.pop(segment.rank, None)
        if held is not None:
            return f"--auto-capture: {trigger.why}; not captured: {held[1]}"
        request = write_request(
            self.folder, active=self.config.active, ranks=format_ranks(ranks), trigger=trigger
        )
        self._asked_at = self._clock()
        return f"--auto-capture: capture {request.id} of ranks {format_ranks(ranks)} asked for: {trigger.why}"

    def _trigger(self, suspect: Segment, run: RunMap) -> CaptureTrigger:
        limit, noise = run_map.threshold(run)
        reference = self._reference(suspect, run)
        neighbours = self._neighbours(suspect.rank)
        beside = f"; rank {reference} as its reference" if reference is not None else ""
        if neighbours:
            beside += f", its pipeline neighbours {format_ranks(neighbours)}"
        why = (
            f"rank {suspect.rank} on {suspect.node} took {suspect.ratio:.2f}x its peers' median CPU time per "
            f"step in {suspect.slow_steps} steps ({suspect.first}-{suspect.last}), above {1 + limit:.2f} "
            f"(the run's noise {noise:.3f}) and {MIN_RATIO:.2f}{beside}"
        )
        return CaptureTrigger(
            rank=suspect.rank,
            ratio=round(suspect.ratio, 4),
            first=suspect.first,
            last=suspect.last,
            slow_steps=suspect.slow_steps,
            slow_above=round(1 + float(limit), 4),
            noise=round(float(noise), 4),
            reference=reference,
            neighbours=neighbours,
            why=why,
        )

    def _reference(self, suspect: Segment, run: RunMap) -> int | None:
        """The rank nearest its peers' median in the suspect's slow steps, not slow itself: of
        the suspect's stage where the job has stages and the stage has another rank."""
        columns = (run.first + run.width - 1 >= suspect.first) & (run.first <= suspect.last)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a rank with no time there: NaN, left out
            typical: np.ndarray = np.abs(np.nanmedian(run.ratio[:, columns], axis=1) - 1)
        slow = np.count_nonzero(run.slow[:, columns], axis=1) > 0
        ranks = run.ranks.tolist()
        candidates = [row for row, rank in enumerate(ranks) if rank != suspect.rank and not slow[row]]
        candidates = [row for row in candidates if np.isfinite(typical[row])]
        if self._dims is not None:
            stage = coordinates(suspect.rank, self._dims)[PIPELINE]
            same = [row for row in candidates if coordinates(ranks[row], self._dims)[PIPELINE] == stage]
            candidates = same or candidates
        return ranks[min(candidates, key=lambda row: typical[row])] if candidates else None

    def _neighbours(self, rank: int) -> list[int]:
        """The ranks of the stages before and after ``rank``'s, at its other coordinates."""
        if self._dims is None or rank >= layout_size(self._dims):
            return []
        where = coordinates(rank, self._dims)
        sizes = dict(self._dims)
        found = []
        for step in (-1, 1):
            stage = where[PIPELINE] + step
            if 0 <= stage < sizes[PIPELINE]:
                found.append(rank_at({**where, PIPELINE: stage}, self._dims))
        return sorted(found)

    def _held_back(self, run: RunMap, ranks: int) -> tuple[str, str] | None:
        """The bound that holds a capture of ``ranks`` ranks back now (its kind, and it in words);
        None: none does."""
        config = self.config
        requests = read_requests(self.folder)
        taken = sum(request.trigger is not None for request in requests)
        if taken >= config.max_captures:
            return (
                "most",
                f"{taken} captures taken, the most a job takes (--auto-capture-max {config.max_captures})",
            )
        if self._asked_at is not None and (waited := self._clock() - self._asked_at) < config.cooldown_s:
            return (
                COOL_DOWN,
                f"the last capture was {waited:.0f} s ago, within the {config.cooldown_s:g} s cool-down",
            )
        if requests:
            last = requests[-1]
            accepted = _accepted(self.folder, last.id)
            if accepted is None:
                return PENDING, f"capture {last.id} is not yet taken up by the ranks"
            if accepted.last >= int(run.last_step.min()):
                return PENDING, f"capture {last.id} records steps {accepted.first}-{accepted.last} now"
        written, per_step = self._captured_bytes()
        estimate = per_step * config.active * ranks
        if written + estimate > config.max_bytes:
            return "bytes", (
                f"the captures' traces hold {written / 2**20:.0f} MiB, and the next would take about "
                f"{estimate / 2**20:.0f} MiB more, past the cap of {config.max_bytes / 2**20:.0f} MiB"
            )
        return None

    def _captured_bytes(self) -> tuple[int, float]:
        """The bytes of the job's traces of captured steps, and the most bytes a rank's step took
        in any of its traces (captured or scheduled; 0 before the first is written)."""
        captured: set[tuple[int, int, int]] = set()
        for request in read_requests(self.folder):
            accepted = _accepted(self.folder, request.id)
            if accepted is not None:
                captured.update((rank, accepted.first, accepted.last) for rank in accepted.ranks)
        written, per_step = 0, 0.0
        for folder in self.folder.attempts():
            for trace in list_traces(folder):
                try:
                    size = trace.path.stat().st_size
                except OSError:
                    continue
                per_step = max(per_step, size / (trace.last_step - trace.first_step + 1))
                if (trace.rank, trace.first_step, trace.last_step) in captured:
                    written += size
        return written, per_step
