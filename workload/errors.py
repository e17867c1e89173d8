"""The error a workload's setting raises: torch-free, imported by the config and by the checks
of each workload's own settings (:mod:`workload.lm_settings`) alike."""

from __future__ import annotations

from slurm.common.errors import SettingError


class WorkloadError(SettingError):
    """A workload, or a setting of it, that cannot run; the message names it and the fix."""
