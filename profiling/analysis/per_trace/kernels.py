"""GPU kernels: by type as HTA classifies them (``hta/utils/utils.py``: communication, memory,
other ("not compute": synchronisation), and compute), for the step's breakdown; and by name and
family (GEMM/convolution, elementwise, reduction, communication, memcpy/memset), for the
kernels a GPU user looks at first."""

from __future__ import annotations

import re

import msgspec
import numpy as np

from profiling.analysis.reading.collectives import is_nccl_kernel

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


# What a GPU user groups kernels by (HTA's types above are for the step's breakdown): a name's
# kind is the first of these whose pattern it matches, in this order.
FAMILIES = ("communication", "memcpy/memset", "gemm/conv", "reduction", "elementwise", "other")
_FAMILY_PATTERNS = (
    ("memcpy/memset", re.compile(r"^(memcpy|memset|dma)", re.IGNORECASE)),
    # normalisations and split-K reductions before GEMMs: cudnn's batch norm is not a convolution
    ("reduction", re.compile(r"reduce|softmax|norm|bn_|argmax|scan|topk|sort|sum_|mean_", re.IGNORECASE)),
    (
        "elementwise",
        re.compile(
            r"elementwise|pointwise|triton_poi|nchwtonhwc|nhwctonchw|transpose|fill|copy|_cat_", re.IGNORECASE
        ),
    ),
    (
        "gemm/conv",
        re.compile(
            r"gemm|conv|cudnn|cutlass|cublas|matmul|xmma|wgrad|dgrad|fprop|nvjet|mma|attention|flash",
            re.IGNORECASE,
        ),
    ),
)
TOP_KERNELS = 50  # kept per trace in its record: the report shows fewer, and compares ranks on these


class KernelRow(msgspec.Struct, frozen=True):
    name: str
    family: str
    count: int
    total_us: float
    mean_us: float
    p50_us: float
    p99_us: float


class KernelSummary(msgspec.Struct, frozen=True):
    """A trace's GPU activity by kernel: every kernel, memcpy and memset the trace holds."""

    total_us: float
    by_family_us: dict[str, float]
    top: list[KernelRow]  # the TOP_KERNELS with the most time, the most first


def kernel_family(name: str) -> str:
    """``gemm/conv``, ``elementwise``, ``reduction``, ``communication``, ``memcpy/memset`` or ``other``."""
    if is_nccl_kernel(name):
        return "communication"
    return next((family for family, pattern in _FAMILY_PATTERNS if pattern.search(name)), "other")


def summarise_kernels(names: list[str], name_codes: np.ndarray, durations_us: np.ndarray) -> KernelSummary:
    """Per kernel name: count, total, mean, p50 and p99 of its durations; totals per family."""
    order = np.argsort(name_codes, kind="stable")
    codes, starts = np.unique(name_codes[order], return_index=True)
    groups = np.split(durations_us[order], starts[1:]) if len(order) else []
    rows = [
        KernelRow(
            name=names[code],
            family=kernel_family(names[code]),
            count=len(group),
            total_us=float(group.sum()),
            mean_us=float(group.mean()),
            p50_us=float(np.percentile(group, 50)),
            p99_us=float(np.percentile(group, 99)),
        )
        for code, group in zip(codes.tolist(), groups, strict=True)
    ]
    by_family = dict.fromkeys(FAMILIES, 0.0)
    for row in rows:
        by_family[row.family] += row.total_us
    rows.sort(key=lambda row: (-row.total_us, row.name))
    return KernelSummary(total_us=float(durations_us.sum()), by_family_us=by_family, top=rows[:TOP_KERNELS])
