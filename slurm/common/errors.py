"""The error a setting raises: what is wrong, named by field, and its one-line HINT."""

from __future__ import annotations

import re
from collections.abc import Mapping

_FIELD = re.compile(r"\{([a-z_]+)\}")


class SettingError(ValueError):
    """A setting that cannot run.

    A config does not know which command line (if any) set it, so its message names settings
    by field, as ``{steps}``; ``jobs/options.py`` owns the one field -> option table and shows
    ``--steps``. ``str()`` names fields; :meth:`naming` names options.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def naming(self, names: Mapping[str, str]) -> str:
        """The message with each ``{field}`` replaced by ``names[field]`` (or the field itself)."""
        return _FIELD.sub(lambda match: names.get(match[1], match[1]), self.message)

    def __str__(self) -> str:
        return self.naming({})
