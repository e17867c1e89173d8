"""The report's own settings, declared once: each field carries its option (:mod:`slurm.common.settings`),
and ``python -m jobs.commands.report``'s parser, its checks and its hints are made from them, as
``submit.py``'s are from the job spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from profiling.folder.budgets import ARCHIVE_BUDGET_BYTES, MERGE_BUDGET_BYTES
from profiling.ranks import RankSelection
from profiling.report import slurm_array
from slurm.common.errors import SettingError
from slurm.common.mesh import parse_layout
from slurm.common.settings import Check, at_least, check_fields, setting

_MERGED = "the merged timeline"
_CLUSTER = "reading on the cluster (a SLURM job array), not here"


class ReportSettingError(SettingError):
    """A report setting that cannot run; the message names the option and the fix."""


def positive(hint: str) -> Check:
    """A number above 0, the hint said where it is not."""
    return lambda value: None if value > 0 else f"must be positive. HINT: {hint}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportSettings:
    """What the report writes and how it reads; every field is one option of the command."""

    out: Path | None = setting(None, flag="--out", help="where to write (default: FOLDER/meta)", parse=Path)
    plot: bool = setting(True, flag="--no-plot", help="skip report.png and run.png")
    html: bool = setting(True, flag="--no-html", help="skip report.html, the page to explore offline")
    jobs: int | None = setting(
        None,
        flag="--jobs",
        help="processes reading traces (default: CPUs available, at most 8)",
        parse=int,
        metavar="N",
        check=at_least(1),
    )
    link_gbps: float | None = setting(
        None,
        flag="--link-gbps",
        help="the network link's speed (GB/s): collectives whose bus bandwidth is below half of it "
        "are marked",
        parse=float,
        show="{:g}".format,
        metavar="GBPS",
        check=positive("the link's GB/s, e.g. 400"),
    )
    peak_tflops: float | None = setting(
        None,
        flag="--peak-tflops",
        help="the device's peak TFLOP/s for the job's dtype, for MFU (default: the table's, by the "
        "device's name)",
        parse=float,
        show="{:g}".format,
        metavar="TFLOPS",
        check=positive("the dense peak, e.g. 989 for an H100's bf16"),
    )
    layout: tuple[tuple[str, int], ...] | None = setting(
        None,
        flag="--layout",
        help="the job's parallel layout where its traces name no DeviceMesh, outermost first: dp=4,pp=4,tp=4",
        parse=parse_layout,
        show=lambda dims: ",".join(f"{name}={size}" for name, size in dims),
        metavar="DIM=N,...",
    )
    merged_trace: bool = setting(
        True, flag="--no-merged-trace", help="skip merged_trace.tar (and the JSON)", group=_MERGED
    )
    ranks: RankSelection | None = setting(
        None,
        flag="--merge-ranks",
        help="ranks in merged_trace.tar (default: the ranks that matter)",
        group=_MERGED,
        parse=RankSelection.parse_named,
        metavar="SPEC",
    )
    archive_budget_mb: float = setting(
        ARCHIVE_BUDGET_BYTES / 1e6,
        flag="--archive-budget-mb",
        help=f"keep the default ranks' traces within MB (default: {ARCHIVE_BUDGET_BYTES / 1e6:g})",
        group=_MERGED,
        parse=float,
        show="{:g}".format,
        metavar="MB",
        check=positive("--merge-ranks chooses the ranks it holds"),
    )
    merged_json: bool = setting(
        False,
        flag="--merged-json",
        help="also write merged_trace.json.gz, re-encoded (slower)",
        group=_MERGED,
    )
    merge_budget_mb: float = setting(
        MERGE_BUDGET_BYTES / 1e6,
        flag="--merge-budget-mb",
        help="keep the merged JSON within MB by leaving out the deepest CPU operators (default: "
        f"{MERGE_BUDGET_BYTES / 1e6:g})",
        group=_MERGED,
        parse=float,
        show="{:g}".format,
        metavar="MB",
        check=positive("--full-merge keeps every event"),
    )
    full_merge: bool = setting(
        False, flag="--full-merge", help="keep every event in the merged JSON", group=_MERGED
    )
    slurm: bool = setting(
        False, flag="--slurm", help="read the traces that have no fresh record as a job array", group=_CLUSTER
    )
    tasks: int = setting(
        slurm_array.TASKS,
        flag="--tasks",
        help="array tasks, at most",
        group=_CLUSTER,
        metavar="N",
        check=at_least(1),
    )
    wait: bool = setting(
        True,
        flag="--no-wait",
        help="submit and return; run the command again (without --slurm) to combine",
        group=_CLUSTER,
    )

    def __post_init__(self) -> None:
        check_fields(self, ReportSettingError)

    @property
    def archive_budget_bytes(self) -> float | None:
        """The archive's budget; None where the ranks are named (all of theirs are kept)."""
        return None if self.ranks else self.archive_budget_mb * 1e6

    @property
    def merge_budget_bytes(self) -> float | None:
        return None if self.full_merge else self.merge_budget_mb * 1e6
