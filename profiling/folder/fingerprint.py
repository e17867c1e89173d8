"""A fingerprint of a report's data: what decides whether a picture is drawn again
(:mod:`.pictures`) and whether the kept clocks are taken again (:mod:`.clocks`)."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import numpy as np


def fingerprint(data: Any) -> str:
    """Of the values, not of how they are held: a cold report's numbers come from its readers
    (numpy scalars, tuples), a warm one's from records on disk (floats, lists), and a picture
    of the same numbers is the same picture."""
    # keys sorted, so keys by rank are text first (the report's dicts by rank have int keys)
    plain = msgspec.to_builtins(data, enc_hook=_array, str_keys=True)
    encoded = msgspec.json.encode(plain, order="deterministic")
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()


def _array(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [str(value.dtype), value.shape, value.tobytes()]
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} cannot be fingerprinted")
