"""What a collective is, as traces name it: the one vocabulary of the reader, the breakdown and
the clock alignment.

- GPU: NCCL (and RCCL) kernels, ``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` or
  ``ncclDevKernel_...``: HTA's definition of a communication kernel, ``^nccl.*Kernel``.
- CPU: gloo's operators (``gloo:all_reduce``), which run on gloo's worker threads, the c10d
  operators that queued them (``c10d::allreduce_``), and NCCL's CPU-side ``nccl:`` spans.
- For the CPU breakdown, communication also covers what DDP does around them
  (``record_param_comms``, its reducer's bucket copies).
- *Symmetric* collectives (all-reduce, all-gather, reduce-scatter, all-to-all, barrier): no
  rank leaves before every rank has arrived, so their ends set the clocks; a broadcast's
  receiver leaves as soon as its data is in.
"""

from __future__ import annotations

import re

NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
GLOO = "gloo:"
C10D = "c10d::"
_CPU_COLLECTIVES = (GLOO, C10D, "nccl:")
_CPU_COMMUNICATION = (*_CPU_COLLECTIVES, "record_param_comms", "torch.distributed.ddp.reducer::")
_KERNEL_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
# letters only, lower case, as a kind starts: "AllReduce", "all_reduce", "allreduce_"
_SYMMETRIC = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier")


def is_collective(name: str) -> bool:
    """An NCCL kernel's name, or a gloo, c10d or NCCL CPU-side operator's."""
    return bool(NCCL_KERNEL.match(name)) or name.startswith(_CPU_COLLECTIVES)


def is_nccl_kernel(name: str) -> bool:
    return bool(NCCL_KERNEL.match(name))


def is_cpu_communication(name: str) -> bool:
    """A CPU operator that communicates, or waits on communication (for the CPU breakdown)."""
    return name.startswith(_CPU_COMMUNICATION) or "nccl" in name.lower()


def kernel_kind(name: str) -> str:
    """``AllReduce`` of ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``; the name where it says none."""
    match = _KERNEL_KIND.search(name)
    return match[1] if match else name


def is_symmetric(kind: str) -> bool:
    """Whether every rank leaves a collective of this kind together (see the module docstring)."""
    return _letters(kind.split(":")[-1]).startswith(_SYMMETRIC)


def same_kind(queued: str, executed: str) -> bool:
    """Whether c10d's operator queued gloo's: ``c10d::allreduce_`` queues ``gloo:all_reduce``,
    ``c10d::_allgather_base_`` ``gloo:all_gather``."""
    a, b = _letters(queued.split("::", 1)[-1]), _letters(executed.split(":", 1)[-1])
    return a.startswith(b) or b.startswith(a)


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())
