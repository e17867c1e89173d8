import gzip
import json
from pathlib import Path

import pytest

from profiling.folder.traces import export_trace, list_traces, parse_trace_name, trace_file_name
from slurm.common.files import atomic_path, temporary_path, write_json_atomically, write_text_atomically
from tests.common import load_trace


def test_names_round_trip() -> None:
    assert trace_file_name(3, 15, 17) == "rank3_iter15_17.json"
    assert trace_file_name(0, 33, 35, gzipped=True) == "rank0_iter33_35.json.gz"
    parsed = parse_trace_name(Path("/x/rank12_iter15_17.json.gz"))
    assert parsed is not None and (parsed.rank, parsed.first_step, parsed.last_step) == (12, 15, 17)
    assert parsed.path == Path("/x/rank12_iter15_17.json.gz")
    assert parse_trace_name(Path("manifest.json")) is None


def test_listing_skips_temporary_and_foreign_files(tmp_path: Path) -> None:
    for name in ("rank1_iter15_17.json", "rank0_iter15_17.json", "rank0_iter33_35.json.gz", "notes.json"):
        (tmp_path / name).write_text("{}")
    temp = temporary_path(tmp_path / "rank2_iter15_17.json")
    temp.write_text('{"half')
    assert temp.name.startswith(".") and not temp.name.endswith((".json", ".gz"))  # hidden from trace loaders
    assert [t.path.name for t in list_traces(tmp_path)] == [
        "rank0_iter15_17.json",
        "rank0_iter33_35.json.gz",
        "rank1_iter15_17.json",
    ]


def test_atomic_write_leaves_no_partial_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "rank0_iter15_17.json"
    with pytest.raises(RuntimeError), atomic_path(target) as temp:
        temp.write_text('{"traceEvents": [')
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_write_json_atomically(tmp_path: Path) -> None:
    write_json_atomically(tmp_path / "manifest.json", {"a": 1})
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_rewritten_report_text_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "report.md"
    write_text_atomically(path, "old\n")
    with open(path) as reader:  # someone reading the report while rank 0 rewrites it
        write_text_atomically(path, "new\n")
        assert reader.read() == "old\n"  # the whole old file, never a truncated or mixed one
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]


@pytest.mark.parametrize("name", ["rank0_iter1_2.json", "rank0_iter1_2.json.gz"])
def test_export_trace_plain_and_gzipped(tmp_path: Path, name: str) -> None:
    def exporter(path: str) -> None:
        assert not path.endswith(".json") and not path.endswith(".gz")  # invisible to loaders
        Path(path).write_text(json.dumps({"traceEvents": [{"name": "ProfilerStep#1"}]}))

    export_trace(exporter, tmp_path / name)
    assert [p.name for p in tmp_path.iterdir()] == [name]
    assert load_trace(tmp_path / name)["traceEvents"][0]["name"] == "ProfilerStep#1"
    if name.endswith(".gz"):  # really compressed, not a .json named .gz
        assert (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
        with gzip.open(tmp_path / name) as handle:
            assert json.load(handle) == {"traceEvents": [{"name": "ProfilerStep#1"}]}
