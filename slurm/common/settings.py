"""One declaration per setting: a config's dataclass field carries its option.

A field made by :func:`setting` holds its default and, in its metadata, the :class:`Option` that
sets it: the option's name, help, choices, how its text is read and written, and the check its
value must pass. From these alone ``jobs/options.py`` builds every parser and every config, the
configs run their checks (:func:`check_fields`), and :func:`argv_of` writes a config back as
the options that set it (for the batch script, and hints). A config made of other configs
declares each with :func:`section`.

Torch-free and importing nothing of the toolkit but :mod:`.errors`: every room's configs use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from slurm.common.errors import SettingError

OPTION = "option"  # the metadata key of a field's Option
SECTION = "section"  # the metadata key of a field that is a config of its own

Check = Callable[[Any], "str | None"]  # the problem with a value ("must be at least 1"), or None


@dataclasses.dataclass(frozen=True)
class Option:
    """How a command line sets one field."""

    flag: str  # "--steps"
    help: str  # one line; "(default: ...)" is added where the default is not None
    group: str = ""  # the heading it is listed under in --help
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], Any] | None = None  # text -> value; None: the default's type, else str
    show: Callable[[Any], str] = str  # value -> text, the inverse of parse
    check: Check | None = None  # run by check_fields, on values other than None
    repeat: bool = False  # may be given several times; the field holds a tuple
    env: str | None = None  # the variable whose value, where set, is the default on the command line


def setting(
    default: Any = dataclasses.MISSING,
    *,
    flag: str,
    help: str,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    **option: Any,
) -> Any:
    """A config field that ``flag`` sets (see :class:`Option` for the rest)."""
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={OPTION: Option(flag=flag, help=help, **option)},
    )


def section(config: type) -> Any:
    """A field that is a config of its own, with its defaults; its options are the command's too."""
    return dataclasses.field(default_factory=config, metadata={SECTION: config})


def at_least(minimum: int | float, unit: str = "") -> Check:
    return lambda value: None if value >= minimum else f"must be at least {minimum}{unit}"


def positive_integer(value: Any) -> str | None:
    return None if isinstance(value, int) and value >= 1 else "must be a positive integer"


def integer_at_least(minimum: int) -> Check:
    return lambda value: (
        None if isinstance(value, int) and value >= minimum else f"must be an integer >= {minimum}"
    )


def one_of(choices: tuple[str, ...]) -> Check:
    return lambda value: None if value in choices else f"is not one of {', '.join(map(str, choices))}"


def options(config: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Option]]:
    """(dotted path, field, option) of every option of ``config`` and of its sections, in order."""
    for field in dataclasses.fields(config):
        if SECTION in field.metadata:
            yield from options(field.metadata[SECTION], f"{prefix}{field.name}.")
        elif OPTION in field.metadata:
            yield f"{prefix}{field.name}", field, field.metadata[OPTION]


def default_of(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def check_fields(config: Any, error: type[SettingError]) -> None:
    """Raise ``error`` naming the first field of ``config`` whose value fails its option's check."""
    for field in dataclasses.fields(config):
        option = field.metadata.get(OPTION)
        value = getattr(config, field.name)
        if option is None or option.check is None or value is None:
            continue
        problem = option.check(value)
        if problem:  # as the user wrote it: a text quoted, a number as its option shows it
            shown = repr(value) if isinstance(value, str) else option.show(value)
            raise error(f"{{{field.name}}} {shown} {problem}")


def option_names(config: type) -> dict[str, str]:
    """Field name -> option, for :meth:`slurm.common.errors.SettingError.naming`."""
    return {path.rpartition(".")[2]: option.flag for path, _, option in options(config)}


def from_namespace(config: type, namespace: Any, *, prefix: str = "", **given: Any) -> Any:
    """``config`` made from parsed options (``namespace``, as argparse's: an attribute per dotted
    path); fields without an option keep their default, ``given`` replaces any. Raises what the
    config raises."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        path = f"{prefix}{field.name}"
        if field.name in given:
            values[field.name] = given[field.name]
        elif SECTION in field.metadata:
            values[field.name] = from_namespace(field.metadata[SECTION], namespace, prefix=f"{path}.")
        elif OPTION in field.metadata and hasattr(namespace, path):
            value = getattr(namespace, path)
            values[field.name] = tuple(value) if field.metadata[OPTION].repeat else value
    return config(**values)


def argv_of(config: Any, prefix: str = "") -> list[str]:
    """The options that make ``config`` from its defaults: ``['--steps', '20', '--gzip-traces']``."""
    argv: list[str] = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if SECTION in field.metadata:
            argv += argv_of(value)
            continue
        option = field.metadata.get(OPTION)
        if option is None or value == default_of(field):
            continue
        if isinstance(value, bool):
            argv.append(option.flag)
        else:
            for item in value if option.repeat else (value,):
                argv += [option.flag, option.show(item)]
    return argv
