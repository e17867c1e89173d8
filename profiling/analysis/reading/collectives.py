"""What a collective is, as traces name it: the one vocabulary of the reader, the breakdown and
the clock alignment.

- GPU: NCCL (and RCCL) kernels, ``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` or
  ``ncclDevKernel_...``: HTA's definition of a communication kernel, ``^nccl.*Kernel``.
- CPU: gloo's operators (``gloo:all_reduce``), which run on gloo's worker threads, the c10d
  operators that queued them (``c10d::allreduce_``), and NCCL's CPU-side ``nccl:`` spans.
- For the CPU breakdown, communication also covers what DDP does around them
  (``record_param_comms``, its reducer's bucket copies).
- An :class:`Instance` is one collective a rank took part in, by what identifies it across
  ranks (:func:`instances`): what the clock alignment pairs.
- *Symmetric* collectives (all-reduce, all-gather, reduce-scatter, all-to-all, barrier): no
  rank leaves before every rank has arrived, so their ends set the clocks; a broadcast's
  receiver leaves as soon as its data is in.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import msgspec

from profiling.folder.group_label import GROUP_LABEL

NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
GLOO = "gloo:"
C10D = "c10d::"
_CPU_COLLECTIVES = (GLOO, C10D, "nccl:", GROUP_LABEL)
_CPU_COMMUNICATION = (*_CPU_COLLECTIVES, "record_param_comms", "torch.distributed.ddp.reducer::")
_KERNEL_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
# letters only, lower case, as a kind starts: "AllReduce", "all_reduce", "allreduce_"
_SYMMETRIC = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier")
SEQUENCED = "seq"
_SEQUENCED_PREFIX = f'["{SEQUENCED}",'
_P2P = "p2p "  # a transfer's key: ["seq", "p2p <sender>><receiver>", n]
# a transfer's key as transfer_key writes it
_encode = msgspec.json.Encoder().encode
_CANONICAL_TRANSFER = re.compile(r'\["[^"\\]*","' + _P2P + r'(\d+)>(\d+)",-?\d+\]\Z')


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective as one rank's trace shows it."""

    name: str  # kernel or operator name
    start: float  # trace clock, µs
    end: float
    tid: Any
    gpu: bool  # an NCCL kernel (else a CPU operator: gloo's or c10d's)
    args: tuple[tuple[str, Any], ...]  # the COLLECTIVE_ARGS it has
    correlation: int | None = None  # a kernel's tie to the runtime call that launched it
    step: int | None = None  # the ProfilerStep that issued it (set by the analysis)

    def arg(self, key: str) -> Any:
        for name, value in self.args:
            if name == key:
                return value
        return None

    def issued_in(self, step: int) -> Collective:
        """This collective, issued in ``step`` (``dataclasses.replace`` took 8 µs a collective)."""
        return Collective(
            self.name, self.start, self.end, self.tid, self.gpu, self.args, self.correlation, step
        )


def is_collective(name: str) -> bool:
    """An NCCL kernel's name, a gloo, c10d or NCCL CPU-side operator's, or the toolkit's label
    of a collective's group (read with them: see :func:`instances`)."""
    return bool(NCCL_KERNEL.match(name)) or name.startswith(_CPU_COLLECTIVES)


def is_group_label(name: str) -> bool:
    return name.startswith(GROUP_LABEL)


def is_nccl_kernel(name: str) -> bool:
    return bool(NCCL_KERNEL.match(name))


def is_cpu_communication(name: str) -> bool:
    """A CPU operator that communicates, or waits on communication (for the CPU breakdown)."""
    return name.startswith(_CPU_COMMUNICATION) or "nccl" in name.lower()


def collective_kind(name: str) -> str:
    """``AllReduce`` of ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``; the name where it says none."""
    match = _KERNEL_KIND.search(name)
    return match[1] if match else name


def is_symmetric(kind: str) -> bool:
    """Whether every rank leaves a collective of this kind together (see the module docstring)."""
    return letters(kind.split(":")[-1]).startswith(_SYMMETRIC)


def same_kind(queued: str, executed: str) -> bool:
    """Whether c10d's operator queued gloo's: ``c10d::allreduce_`` queues ``gloo:all_reduce``,
    ``c10d::_allgather_base_`` ``gloo:all_gather``."""
    a, b = letters(queued.split("::", 1)[-1]), letters(executed.split(":", 1)[-1])
    return a.startswith(b) or b.startswith(a)


def letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


@dataclasses.dataclass(frozen=True)
class Instance:
    """One collective in one rank's trace, by what identifies it across ranks."""

    key: str  # what identifies it, as JSON: ["seq", group, seq] or ["op", kind, size or shapes]
    arrival: float  # when this rank got to it (trace clock, µs)
    end: float  # when it left it
    label: str  # for people: "allreduce (pg 0, seq 12)", "gloo:all_reduce [[2048]]"
    symmetric: bool  # every rank leaves it together: its end sets the clock
    step: int | None = None  # the ProfilerStep that issued it: the same on every rank
    group: tuple[int, ...] | None = None  # the global ranks that take part (None: unknown, all)
    peer: int | None = None  # a send's or receive's other side (a global rank)


def kernel_identity(kernel: Collective) -> tuple[str, str, bool]:
    """An NCCL kernel's :class:`Instance` ``key``, ``label`` and ``symmetric``."""
    group, seq = kernel.arg("Process Group Name"), kernel.arg("Seq")
    kind = kernel.arg("Collective name") or collective_kind(kernel.name)
    symmetric = is_symmetric(kind)
    if seq is not None:
        return sequence_key(SEQUENCED, group, seq), f"{kind} (group {group}, seq {seq})", symmetric
    size = (kernel.arg("In msg nelems"), kernel.arg("Out msg nelems"))
    label = f"{kind} ({size[0]} elements)" if size[0] is not None else kind
    return sequence_key("op", kind, size), label, symmetric


def is_sequenced(instance: Instance) -> bool:
    """Whether the trace numbered it (process group and sequence number): an identity across ranks."""
    return instance.key.startswith(_SEQUENCED_PREFIX)


def sequence_key(*parts: Any) -> str:
    """``parts`` as compact JSON, so that a key read back from an analysis record is the key it
    was. msgspec writes what json.dumps does for ASCII strings, ints and nulls, a tenth as
    slowly (a dense trace has thousands of keys); a float, or a string beyond ASCII, json.dumps."""
    if all(_plain(part) for part in parts):
        encoded = _encode(parts)
        if encoded.isascii():
            return encoded.decode()
    return json.dumps(parts, separators=(",", ":"))


def _plain(part: Any) -> bool:
    if type(part) is tuple:
        return all(_plain(item) for item in part)
    return part is None or type(part) is str or type(part) is int


def transfer_key(sender: int, receiver: int, count: int) -> str:
    """The key of the ``count``-th transfer from ``sender`` to ``receiver`` (0 first), as
    :func:`sequence_key` writes it."""
    return f'["{SEQUENCED}","{_P2P}{sender}>{receiver}",{count}]'


def transfer_of(key: str) -> tuple[int, int] | None:
    """The (sender, receiver) a transfer's key names; None for any other key."""
    if _P2P not in key:
        return None
    # a key as transfer_key writes it, without decoding its JSON (AR's 34 000 a report took
    # 0.5 s); any other spelling decoded
    canonical = _CANONICAL_TRANSFER.match(key)
    if canonical is not None:
        return int(canonical[1]), int(canonical[2])
    try:
        _, pair, _ = json.loads(key)
    except ValueError:
        return None
    sender, _, receiver = str(pair).removeprefix(_P2P).partition(">")
    return (int(sender), int(receiver)) if sender.isdigit() and receiver.isdigit() else None


def shapes_text(value: Any) -> str:
    return "" if value is None else str(value).replace("(", "[").replace(")", "]").replace(",]", "]")
