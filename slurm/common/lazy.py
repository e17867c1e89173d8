"""A package's public names, imported when first asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def public_names(package: str, where: Mapping[str, str]) -> tuple[list[str], Any]:
    """A package's public names, imported from their module when first asked for (PEP 562):
    ``where`` maps each name to its module, relative to ``package``. Returns ``__all__`` and
    ``__getattr__`` for the package's ``__init__``: importing one light module of the package
    does not import the heavy ones with it."""
    import importlib

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return sorted(where), __getattr__
