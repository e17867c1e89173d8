"""report.json's model (profiling/schema/model.py): every report is checked against it as it is
written, every field is documented, and the docs made from it are current."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from profiling.report import model_docs
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema import model
from profiling.schema.model import Report

DATA = Path(__file__).parent / "data" / "gpu_traces"


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpu")
    for name in ("trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz"):
        shutil.copy(DATA / name, folder / name)
    build_report(folder, ReportSettings(plot=False))
    return folder / "meta" / "report.json"


def test_a_report_reads_typed(gpu_report: Path) -> None:
    report = msgspec.json.decode(gpu_report.read_bytes(), type=Report)
    assert (
        report.schema_version == model.SCHEMA_VERSION == json.loads(gpu_report.read_text())["schema_version"]
    )
    assert [r.rank for r in report.ranks] == [0, 1] and report.ranks[0].gpu is not None
    assert report.ranks[0].kernels is not None and report.ranks[0].kernels.top[0].family
    assert report.straggler is not None and report.straggler.verdict in ("straggler", "none", "undetermined")


def test_what_the_model_lacks_fails_the_report_not_a_reader(gpu_report: Path) -> None:
    written = json.loads(gpu_report.read_text())
    written["ranks"][1]["gpu"]["new_figure_ms"] = 1.0
    with pytest.raises(
        msgspec.ValidationError, match=r"unknown field `new_figure_ms` - at `\$\.ranks\[1\]\.gpu`"
    ):
        model.checked(json.dumps(written).encode())
    written["ranks"][1]["gpu"].pop("new_figure_ms")
    written["ranks"][0]["step_ms"] = "fast"
    with pytest.raises(
        msgspec.ValidationError, match=r"Expected `array`, got `str` - at `\$\.ranks\[0\]\.step_ms`"
    ):
        model.checked(json.dumps(written).encode())


def test_every_field_is_documented() -> None:
    undocumented = [
        f"{name}.{field}"
        for name, part in model.json_schema()["$defs"].items()
        for field, spec in part["properties"].items()
        if not spec.get("description")
    ]
    assert not undocumented, undocumented


def test_the_docs_are_made_from_the_model() -> None:
    # after changing the model: python -m jobs.commands.report_docs --write
    assert model_docs.SCHEMA_FILE.read_text() == model_docs.schema_text()
    assert (
        model_docs.with_reference(model_docs.REFERENCE_FILE.read_text())
        == model_docs.REFERENCE_FILE.read_text()
    )
