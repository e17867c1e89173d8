"""The jobs under a traces root, across jobs: each against the last jobs of its config (a
regression flagged where it is slower beyond its noise), and the nodes named slow again and again.

A job's line is its ``meta/summary.json`` (:mod:`.summary`); the history is those files read
afresh each time (10 000 jobs in well under the 2 s asked, warm: no index to keep or lose).

- **Baseline**: the median step of the previous :data:`BASELINE_JOBS` jobs of the same config
  fingerprint, ended before it (PyTorch's benchmark dashboard flags a run below 0.95x its
  recent baseline).
- **Regression**: a step beyond the baseline by more than :data:`REGRESSION` (5 %) *and* by
  more than the noise: the larger of the job's step-to-step noise and the spread of the
  baseline's own jobs, 3 robust standard deviations (1.4826 x their median absolute deviation:
  one earlier regression among them does not widen it). On a shared machine, runs of one
  config differ by a few per cent while each is steady within itself. Judged only against a
  full baseline (:data:`BASELINE_JOBS` jobs): the median deviation of fewer is no estimate of
  that spread (of 1 job it is 0; of 3, the smaller of two gaps), so a config's first jobs are
  compared, never flagged (the test cluster's second balanced run was once 13 % slower than its
  first).
- **Slow nodes**: per node, in the last :data:`NODE_JOBS` jobs that ran on it, how many named it
  slow; at :data:`NODE_REPEATS` or more it is given to ``--exclude``.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from profiling.analysis.robust import MAD_TO_SIGMA
from profiling.folder.layout import job_folders
from profiling.history.summary import SUMMARY, read_summary
from profiling.schema.files import FileRefused
from profiling.schema.summary import JobSummary

BASELINE_JOBS = 5
REGRESSION = 0.05
SPREAD_SIGMAS = 3.0
NODE_JOBS = 10
NODE_REPEATS = 3


@dataclasses.dataclass(frozen=True)
class Standing:
    """A job against its baseline."""

    job_id: str
    baseline_jobs: list[str]  # the jobs of its config before it, the newest first (at most 5)
    baseline_ms: float | None  # their median step; None: no job of its config before it
    change: float | None  # its step / the baseline - 1
    regression: bool

    def line(self, summary: JobSummary) -> str:
        """``"12 % slower than the last 5 jobs of this config (median 131 ms a step)"``."""
        if self.baseline_ms is None or self.change is None:
            return "the first job of this config: no baseline yet"
        count = len(self.baseline_jobs)
        jobs = f"the last {count} jobs" if count > 1 else "the last job"
        against = f"{jobs} of this config (median {self.baseline_ms:.0f} ms a step)"
        noise = summary.noise_ms or 0.0
        step = summary.step_median_ms or 0.0
        if abs(step - self.baseline_ms) <= noise or abs(self.change) < 0.005:
            return f"as fast as {against}, within its noise"
        word = "slower" if self.change > 0 else "faster"
        if count < BASELINE_JOBS:
            flag = f", too few to judge a regression ({BASELINE_JOBS} needed)"
        else:
            flag = ": a regression" if self.regression else ""
        return f"{abs(self.change) * 100:.0f} % {word} than {against}{flag}"


@dataclasses.dataclass(frozen=True)
class SlowNode:
    node: str
    named: int  # the jobs that named it slow, of the last ones that ran on it
    jobs: int  # those last jobs (at most NODE_JOBS)

    @property
    def excluded(self) -> bool:
        return self.named >= NODE_REPEATS


def read_jobs(root: Path) -> tuple[list[JobSummary], list[str]]:
    """Every job's line under ``root`` (``root/<job>/meta/summary.json``); and a line for each
    that does not read (damaged, of a newer toolkit), which is left out."""
    found, skipped = [], []
    for folder in job_folders(root):
        path = folder.meta / SUMMARY
        try:
            found.append(read_summary(path))
        except FileNotFoundError:
            continue  # a job still running, or one reported before summaries were written
        except FileRefused as refused:
            skipped.append(f"{refused}: skipped")
    return found, skipped


def newest_first(jobs: Iterable[JobSummary]) -> list[JobSummary]:
    return sorted(jobs, key=lambda job: (job.ended_at, _numeric(job.job_id)), reverse=True)


def standing(job: JobSummary, others: Iterable[JobSummary]) -> Standing:
    """``job`` against the jobs of its config that ended before it."""
    before = newest_first(
        other
        for other in others
        if other.fingerprint == job.fingerprint
        and other.job_id != job.job_id
        and other.ended_at < job.ended_at
        and other.step_median_ms is not None
    )[:BASELINE_JOBS]
    if not before or job.step_median_ms is None:
        return Standing(job.job_id, [b.job_id for b in before], None, None, False)
    steps = [b.step_median_ms for b in before if b.step_median_ms is not None]
    baseline = statistics.median(steps)
    change = job.step_median_ms / baseline - 1.0 if baseline > 0 else 0.0
    spread = SPREAD_SIGMAS * MAD_TO_SIGMA * statistics.median(abs(step - baseline) for step in steps)
    noise = max(job.noise_ms or 0.0, spread)
    regression = len(steps) >= BASELINE_JOBS and change > REGRESSION and job.step_median_ms - baseline > noise
    return Standing(job.job_id, [b.job_id for b in before], baseline, change, regression)


def key_of(job: JobSummary) -> tuple[str, str]:
    """A job's key among the standings: its config's fingerprint and its id (two traces roots
    merged, or two clusters, can give two configs one job id: kept apart)."""
    return job.fingerprint, job.job_id


def standings(jobs: Sequence[JobSummary]) -> dict[tuple[str, str], Standing]:
    """Every job against its baseline, each config's jobs taken in order once (not jobs x jobs),
    by :func:`key_of`."""
    by_config: dict[str, list[JobSummary]] = collections.defaultdict(list)
    for job in jobs:
        by_config[job.fingerprint].append(job)
    found = {}
    for group in by_config.values():
        ordered = newest_first(group)[::-1]  # the oldest first
        for index, job in enumerate(ordered):
            found[key_of(job)] = standing(job, ordered[max(0, index - 4 * BASELINE_JOBS) : index])
    return found


def nodes_named_slow(jobs: Sequence[JobSummary]) -> list[SlowNode]:
    """Each node named slow at least once: in how many of the last jobs that ran on it; the most
    named first."""
    ran: dict[str, list[JobSummary]] = collections.defaultdict(list)
    for job in newest_first(jobs):
        for node in job.nodes or job.slow_nodes:
            if len(ran[node]) < NODE_JOBS:
                ran[node].append(job)
    slow = {id(job): frozenset(job.slow_nodes) for job in jobs}  # a set a job: 100k nodes, linear
    found = [
        SlowNode(node, sum(node in slow[id(job)] for job in last), len(last)) for node, last in ran.items()
    ]
    return sorted((n for n in found if n.named), key=lambda n: (-n.named, n.node))


def _numeric(job_id: str) -> tuple[int, str]:
    """A job id's order among ids that end at the same instant: numbers by value."""
    head = job_id.split("_", 1)[0]
    # plain ASCII digits of a sane length alone: "²" is a digit to str.isdigit, and int() of
    # 5000 digits is refused (CPython's 4300-digit limit)
    numeric = head.isascii() and head.isdigit() and len(head) <= 18
    return (int(head), job_id) if numeric else (-1, job_id)
