"""The code's shape, held: rooms import downwards only, and modules and functions stay small."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
from pathlib import Path

from tests.common import REPO

PACKAGES = ("jobs", "workload", "profiling", "slurm")
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 80
# Rooms, each above the ones after it: a module may import its own room and the rooms below.
# profiling's top-level modules (archive, compare) are each a room of their own.
LAYERS = (
    ("jobs",),
    ("jobs.runtime",),  # the task at run time: below the commands, the spec and ProfiledRun
    ("workload",),
    ("profiling.report", "profiling.compare"),
    ("profiling.archive",),
    ("profiling.history",),
    # analysis, by stage: each takes from the stages before it, in the order the data flows
    ("profiling.analysis.dumps",),
    ("profiling.analysis.run",),
    ("profiling.analysis.across_ranks",),
    ("profiling.analysis.across_ranks.critical_path",),  # what limits the step: the path, the replay
    ("profiling.analysis.clocks",),
    ("profiling.analysis.per_trace",),
    ("profiling.analysis.reading",),
    ("profiling.analysis",),
    ("profiling.recording",),
    ("profiling.folder",),
    ("profiling.schema",),
    ("profiling.ranks",),
    ("slurm",),
    # the foundation every room stands on: errors, files, settings, the command line, the layout
    ("slurm.common",),
)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


ROOMS = frozenset(room for rooms in LAYERS for room in rooms)


def _room(module: str) -> str:
    """The longest room that holds ``module`` (``profiling`` itself where none does)."""
    parts = module.split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    return next((prefix for prefix in prefixes if prefix in ROOMS), parts[0])


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return {name for name in names if name.split(".")[0] in PACKAGES}


def test_rooms_import_downwards_only() -> None:
    level = {room: depth for depth, rooms in enumerate(LAYERS) for room in rooms}
    modules = _modules()
    upward = []
    for module, path in modules.items():
        if module == "profiling":
            continue
        assert _room(module) in level, f"{module}: a room the layers do not place"
        for imported in _imports(path):
            target = _room(imported if imported in modules else imported.rpartition(".")[0])
            if target != "profiling" and level[target] < level[_room(module)]:
                upward.append(f"{module} -> {imported}")
    assert not upward, upward


def test_the_report_reaches_analysis_through_its_stages_entry_points_only() -> None:
    """report/ renders: it takes from analysis what each stage's package names as public
    (``__all__``), never a stage's inner module; and each stage names only what it has."""
    stages = {name for rooms in LAYERS for name in rooms if name.startswith("profiling.analysis.")}
    inner = []
    for module, path in _modules().items():
        if not module.startswith("profiling.report"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("profiling.analysis"):
                public = importlib.import_module(node.module).__all__ if node.module in stages else ()
                inner += [f"{module}: {node.module}.{a.name}" for a in node.names if a.name not in public]
    assert not inner, inner
    for stage in stages:
        package = importlib.import_module(stage)
        # a name, not a module of the same name (which the import system would hand out instead)
        modules = [name for name in package.__all__ if inspect.ismodule(getattr(package, name))]
        assert not modules, (stage, modules)


def test_no_two_modules_import_each_other() -> None:
    modules = {name: path for name, path in _modules().items() if path.name != "__init__.py"}
    imports = {module: {i for i in _imports(path) if i in modules} for module, path in modules.items()}
    circles = [
        (a, b) for a, b in itertools.combinations(modules, 2) if b in imports[a] and a in imports[b]
    ]  # fmt: skip
    assert not circles, circles


def test_modules_and_functions_are_small() -> None:
    too_big = []
    for module, path in _modules().items():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_big.append(f"{module}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_big.append(f"{module}.{node.name}: {length} lines")
    assert not too_big, too_big


def test_test_files_are_split_by_subject() -> None:
    too_big = [
        f"{path.name}: {path.read_text().count(chr(10))} lines"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if path.read_text().count("\n") > MAX_MODULE_LINES
    ]
    assert not too_big, too_big


def test_the_readme_is_a_five_minute_read() -> None:
    text = (REPO / "README.md").read_text()
    words, lines = len(text.split()), text.splitlines()
    assert words <= 1000, f"README.md: {words} words; the details belong in docs/"
    assert len(lines) <= 220, f"README.md: {len(lines)} lines; the details belong in docs/"
    long = [number for number, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"README.md: lines {long} run past 200 characters"


def test_c_sources_are_small_too() -> None:
    """The same bounds for the C sources: a function is a block at the top level, counted from
    the line of its opening brace to the line of its closing one (comments and literals aside)."""
    too_big = []
    for path in sorted((REPO / "profiling").rglob("*.[ch]")):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_big.append(f"{path.name}: {text.count(chr(10))} lines")
        code = re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', _blank, text, flags=re.S)
        depth, opened = 0, 0
        for number, line in enumerate(code.splitlines()):
            for char in line:
                if char == "{":
                    opened = number if depth == 0 else opened
                    depth += 1
                elif char == "}":
                    depth -= 1
                    if depth == 0 and number - opened + 1 > MAX_FUNCTION_LINES:
                        too_big.append(f"{path.name}:{opened + 1}: {number - opened + 1} lines")
    assert not too_big, too_big
    assert list((REPO / "profiling").rglob("*.c"))  # the sources are where this looks


def _blank(match: re.Match[str]) -> str:
    """A comment or literal as blanks, its line breaks kept."""
    return re.sub(r"[^\n]", " ", match[0])


def test_no_function_name_means_two_things() -> None:
    """A public function name is defined once in the toolkit (``kernel_kind`` was two things);
    every command has its ``main`` and ``build_parser``."""
    where: dict[str, list[str]] = {}
    for module, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.FunctionDef)
                and node.name not in ("main", "build_parser")
                and not (node.name.startswith("_"))
            ):
                where.setdefault(node.name, []).append(module)
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice


def test_the_typed_files_are_built_as_their_structs() -> None:
    """One owner per file: what schema/ types is built as its Struct by the code that writes it,
    never as a dict literal converted (or not) on the way out."""
    from typing import get_type_hints

    from jobs.runtime import records, report_step
    from profiling import compare
    from profiling.folder import manifest
    from profiling.history import summary
    from profiling.recording import config, profiler, step_timing
    from profiling.schema import comparison
    from profiling.schema import manifest as typed
    from profiling.schema.summary import JobSummary

    builders = {
        manifest.step_time_summary: typed.StepTimeSummary,
        manifest.attempt_record: typed.AttemptRecord,
        manifest.build_manifest: typed.Manifest,
        records.rank_record: typed.RankRecord,
        records.Attempt.facts: typed.JobFacts,
        records.Attempt.record: typed.AttemptRecord,
        config.ProfilerConfig.record: typed.ProfilerRecord,
        config.ProfilerConfig.schedule_record: typed.Schedule,
        profiler.windows_record: list[typed.WindowRecord],
        step_timing.StepTiming.manifest_record: typed.StepLogRecord,
        report_step.analyse_own_traces: typed.OwnAnalysis,
        compare.compare: comparison.Comparison,
        summary.job_summary: JobSummary,
    }
    wrong = {
        f.__qualname__: get_type_hints(f)["return"]
        for f, kind in builders.items()
        if get_type_hints(f)["return"] != kind
    }
    assert not wrong, wrong
    # and the grep: no function of the rooms that write files returns a record as a plain dict
    untyped = []
    for module, path in _modules().items():
        if module.startswith("profiling.schema"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.returns is not None:
                returns = ast.unparse(node.returns)
                # what the toolkit's own files hold (Perfetto's manifest and torch's flight
                # recorder dump are theirs, read and written as they define them)
                named = re.search(r"(^|_)(record|facts|summary|dump)$|^manifest_", node.name)
                if named and returns.startswith(("dict[str, Any]", "list[dict[str, Any]]")):
                    untyped.append(f"{module}.{node.name} -> {returns}")
    assert not untyped, untyped
