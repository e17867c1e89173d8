"""GPU kernels by type, as HTA classifies them (``hta/utils/utils.py``): communication, memory,
other ("not compute": synchronisation), and compute."""

from __future__ import annotations

import re

from profiling.analysis.collectives import is_nccl_kernel

KERNEL_TYPES = ("compute", "communication", "memory", "other")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> str:
    """``communication``, ``memory``, ``compute`` or ``other``, as HTA classifies GPU activity."""
    if is_nccl_kernel(name):
        return "communication"
    if _HTA_MEMORY.match(name):
        return "memory"
    if _HTA_NOT_COMPUTE.match(name):
        return "other"
    return "compute"
