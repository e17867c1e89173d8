"""The annotation that names a collective's process group in a trace, where torch names none
(gloo): written by :mod:`profiling.recording.group_labels`, read by
:mod:`profiling.analysis.reading.collectives`. Torch-free.

    ``pg 4 mesh_dp``              a collective of group "4", described as "mesh_dp"
    ``pg 0 default_pg peer 3``    a send or receive whose other side is global rank 3
"""

from __future__ import annotations

GROUP_LABEL = "pg "
_PEER = " peer "


def group_label(name: str, description: str, peer: int | None = None) -> str:
    return f"{GROUP_LABEL}{name} {description or 'undescribed'}" + ("" if peer is None else f"{_PEER}{peer}")


def parse_group_label(text: str) -> tuple[str, str, int | None] | None:
    """``(group name, description, peer)`` of a label, or None where ``text`` is none."""
    if not text.startswith(GROUP_LABEL):
        return None
    body, _, peer = text[len(GROUP_LABEL) :].partition(_PEER)
    name, _, description = body.partition(" ")
    # a peer of plain ASCII digits within a rank's 31 bits ("²" is a digit to str.isdigit, and
    # int() of 5000 digits raises): else the label is none
    if not name or not description or " " in description:
        return None
    if peer and not (peer.isascii() and peer.isdigit() and len(peer) <= 10 and int(peer) < 1 << 31):
        return None
    return name, description, int(peer) if peer else None
