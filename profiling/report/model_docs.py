"""report.json's documentation, made from its model (:mod:`profiling.schema.model`): the JSON
Schema (``docs/report.schema.json``, for programs) and the field reference in
``docs/report.md`` (for people), between two marker lines. ``tests/test_report_model.py`` holds
both to the model; after changing it::

    python -m jobs.commands.report_docs --write
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiling.schema.model import SCHEMA_VERSION, json_schema

DOCS = Path(__file__).resolve().parents[2] / "docs"
SCHEMA_FILE = DOCS / "report.schema.json"
REFERENCE_FILE = DOCS / "report.md"
BEGIN = "<!-- report.json fields: made by python -m jobs.commands.report_docs --write -->"
END = "<!-- end of the report.json fields -->"


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1, ensure_ascii=False) + "\n"


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()}-fields)"
    if "anyOf" in spec:
        return " or ".join(_type(option) for option in spec["anyOf"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}))}"
    if kind == "object" and "additionalProperties" in spec:
        return f"map to {_type(spec['additionalProperties'])}"
    return str(kind)


def reference() -> str:
    """The fields of every part of the report, a table each, the report's own first."""
    schema = json_schema()
    lines = [BEGIN, "", f"Schema version {SCHEMA_VERSION}.", ""]
    for name, part in schema["$defs"].items():
        lines += [f"#### {name} fields", "", "| field | type | meaning |", "|---|---|---|"]
        for field, spec in part["properties"].items():
            meaning = spec.get("description", "").replace("|", "\\|")
            lines.append(f"| `{field}` | {_type(spec)} | {meaning} |")
        lines.append("")
    return "\n".join([*lines, END])


def with_reference(document: str) -> str:
    """``document`` (docs/report.md) with its field reference made anew."""
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError(f"{REFERENCE_FILE.name} has no {BEGIN!r} ... {END!r} section")
    return head + reference() + tail


def write() -> None:
    """Both documents written anew from the model."""
    SCHEMA_FILE.write_text(schema_text())
    REFERENCE_FILE.write_text(with_reference(REFERENCE_FILE.read_text()))
