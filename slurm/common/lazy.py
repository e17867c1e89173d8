"""A package's entry points imported when first asked for (PEP 562's module ``__getattr__``), so
that a command imports the stages it reaches and no more: the report's ``--help`` and its
settings need a constant of the stage that merges timelines, not the critical path behind it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def entry_points(
    package: str, given_by: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], object]]:
    """``__all__`` and ``__getattr__`` for ``package``, whose modules (named relative to it) give
    the names ``given_by`` lists; mypy reads the same names from imports under TYPE_CHECKING."""
    module_of = {name: module for module, names in given_by.items() for name in names}

    def attribute(name: str) -> object:
        if name not in module_of:  # a submodule, or a mistake: the import system says which
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)

    return sorted(module_of), attribute
