"""Every command's parser: argparse, with mistakes as one line, options made from config fields.

Only the commands use it (``jobs/``). Options that a config declares (:mod:`.settings`) are
added with :meth:`OneLineParser.add_settings` and read back into the config with
:func:`.settings.from_namespace`; a :class:`~.errors.SettingError` raised on the way is shown
naming this command's own options (:meth:`OneLineParser.describe`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from slurm.common.errors import SettingError
from slurm.common.settings import Option, default_of, options

_BUILTIN_TYPES = (int, float, str)
_LITERAL = re.compile(r"``(.+?)``", re.S)  # reStructuredText's inline literal
_ROLE = re.compile(r":[a-z]+:`~?(.+?)`")  # and a role, :mod:`jobs.task`


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (its usage text is for --help, not for a typo)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._groups: dict[str, Any] = {}
        self._settings: set[str] = set()  # destinations of options made from config fields

    def format_help(self) -> str:
        """--help is read in a terminal: descriptions taken from docstrings lose their markup."""
        return plain_text(super().format_help())

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}. HINT: {self.prog} --help\n")

    def fail(self, message: str | Exception) -> int:
        """Print a mistake found after parsing as the same one line; returns the exit status."""
        text = self.describe(message) if isinstance(message, Exception) else message
        print(f"{self.prog}: error: {one_line(text)}", file=sys.stderr)
        return 2

    def describe(self, error: Exception) -> str:
        """An error as the user of this command reads it: each ``{field}`` as the option that sets it."""
        return error.naming(self.option_names()) if isinstance(error, SettingError) else str(error)

    def option_names(self) -> dict[str, str]:
        """Field -> option: an option's destination is the field's (dotted) path in its config. A
        field's own option wins over another of the same name (``wait``: --schedule-wait, not the
        --wait of submit.py)."""
        made = sorted(
            (action for action in self._actions if action.option_strings and action.dest != "help"),
            key=lambda action: action.dest in self._settings,
        )
        return {action.dest.rpartition(".")[2]: max(action.option_strings, key=len) for action in made}

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        args = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown(args)
        for action in self._actions:
            if action.option_strings and callable(action.type) and action.type not in _BUILTIN_TYPES:
                action.type = self._reader(action.type, max(action.option_strings, key=len))
        return super().parse_args(args, namespace)

    def _refuse_unknown(self, args: list[str]) -> None:
        """Name an unknown option before argparse complains of a missing positional instead."""
        known = [option for action in self._actions for option in action.option_strings]
        for arg in args:
            if arg == "--":
                return
            if not arg.startswith("-") or arg == "-" or _is_number(arg):
                continue
            name = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
            if name not in known and not any(
                option.startswith(name) for option in known if name.startswith("--")
            ):
                self.error(f"unrecognized arguments: {arg}")

    # --- options made from config fields -------------------------------------------------------

    def add_settings(self, config: type, *, prefix: str = "", only: Sequence[str] | None = None) -> None:
        """An option for every field of ``config`` (and its sections) that declares one; ``only``:
        those fields alone, by name."""
        for path, field, option in options(config, prefix):
            if only is None or field.name in only:
                self._add_option(path, default_of(field), option)

    def _add_option(self, dest: str, default: Any, option: Option) -> None:
        self._settings.add(dest)
        group = self._groups.get(option.group)
        if group is None:
            group = self._groups[option.group] = (
                self.add_argument_group(option.group) if option.group else self
            )
        if option.env and os.environ.get(option.env):
            default = (option.parse or type(default))(os.environ[option.env])
        if isinstance(default, bool):
            action = "store_false" if default else "store_true"
            group.add_argument(option.flag, dest=dest, action=action, default=default, help=option.help)
            return
        shown = (
            "" if default is None or option.repeat or "default:" in option.help else " (default: %(default)s)"
        )
        group.add_argument(
            option.flag,
            dest=dest,
            default=[] if option.repeat else default,
            action="append" if option.repeat else "store",
            type=option.parse or (type(default) if default is not None else str),
            choices=option.choices,
            metavar=option.metavar or (None if option.choices else option.flag.lstrip("-").upper()),
            help=option.help + shown,
        )

    def _reader(self, parse: Any, flag: str) -> Any:
        """argparse's ``type`` for ``flag``: a SettingError is the whole line, its setting named as
        ``flag``; a ValueError follows ``argument --x:``."""
        if getattr(parse, "reads_for", None) is self:
            return parse

        def read(text: str) -> Any:
            try:
                return parse(text)
            except SettingError as error:
                subject = error.message.partition("{")[2].partition("}")[0]
                names = {**self.option_names(), subject: flag}
                self.exit(2, f"{self.prog}: error: {error.naming(names)}\n")
            except ValueError as error:
                raise argparse.ArgumentTypeError(str(error)) from None

        read.__name__ = getattr(parse, "__name__", "value")
        read.reads_for = self  # type: ignore[attr-defined]
        return read


def _is_number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def plain_text(text: str) -> str:
    """A docstring's text as a terminal shows it: reStructuredText's ``literals`` and
    :role:`targets` as their plain words."""
    return _ROLE.sub(r"\1", _LITERAL.sub(r"\1", text))


def one_line(text: str) -> str:
    """``text`` with its line breaks shown as ``\\n`` (argparse quotes an argument as given: a
    value with a newline in it would break the error's one line)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
