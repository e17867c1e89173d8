"""What a warm report (every trace's record fresh) takes again from the last report beside it
rather than computing it: the clocks (meta/clocks.json) and the critical path with its replay
(meta/critical_path.msgpack), each while its inputs are the same, and computed again when any
of them changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiling.folder.layout import meta_of
from profiling.folder.report_json import encode_report
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from tests import trace_variants as tv


def test_a_warm_report_takes_the_clocks_it_kept_and_aligns_again_when_a_trace_changed(tmp_path: Path) -> None:
    base = tv.load("nccl_data.json.gz")
    traces = [tv.as_rank(base, rank, 3, shift_us=rank * 37.0) for rank in range(3)]
    folder = tv.write(tmp_path / "gpu", traces)
    cold = build_report(folder, ReportSettings(merged_trace=False, plot=False))
    kept = meta_of(folder) / "clocks.json"
    written = kept.stat().st_mtime_ns
    warm = build_report(folder, ReportSettings(merged_trace=False, plot=False))
    assert kept.stat().st_mtime_ns == written  # taken, not computed again
    assert warm.ranks == cold.ranks and warm.straggler == cold.straggler
    assert [r.clock.shift_us for r in warm.ranks] == pytest.approx([0.0, -37.0, -74.0], abs=0.01)
    tv.write(tmp_path / "gpu", [traces[0], tv.as_rank(base, 1, 3, shift_us=50.0), traces[2]])
    changed = build_report(folder, ReportSettings(merged_trace=False, plot=False))
    assert kept.stat().st_mtime_ns != written
    assert changed.ranks[1].clock.shift_us == pytest.approx(-50.0, abs=0.01)


def test_a_warm_report_takes_the_critical_path_it_kept_and_walks_again_when_anything_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path and its replay were most of a warm report (0.75 s of 1.5 on issue 60's dense
    folder): kept beside report.json, taken again while the traces, the clocks, the verdict,
    the mesh and the code that walks them are the same; a damaged file is computed again."""
    from profiling.analysis.across_ranks import combine
    from profiling.analysis.across_ranks.critical_path import kept

    base = tv.load("nccl_data.json.gz")
    traces = [tv.as_rank(base, rank, 3, shift_us=rank * 37.0) for rank in range(3)]
    folder = tv.write(tmp_path / "gpu", traces)
    settings = ReportSettings(merged_trace=False, plot=False)
    cold = build_report(folder, settings)
    assert cold.critical_path is not None and cold.critical_path.replay is not None
    walked = []
    walk = combine.critical_path
    monkeypatch.setattr(combine, "critical_path", lambda *a, **k: walked.append(1) or walk(*a, **k))
    warm = build_report(folder, settings)
    assert walked == [] and warm.critical_path == cold.critical_path
    assert encode_report(warm).count(b"ProfilerStep") == encode_report(cold).count(b"ProfilerStep")
    kept_file = meta_of(folder) / "critical_path.msgpack"
    kept_file.write_bytes(kept_file.read_bytes()[:100])  # cut short
    assert build_report(folder, settings).critical_path == cold.critical_path and walked == [1]
    whole = bytearray(kept_file.read_bytes())
    whole[-20] ^= 0x01  # a bit flipped in the path's last numbers: its checksum differs
    kept_file.write_bytes(bytes(whole))
    assert build_report(folder, settings).critical_path == cold.critical_path and walked == [1, 1]
    monkeypatch.setattr(kept, "_code", lambda: "the toolkit changed")
    build_report(folder, settings)
    assert walked == [1, 1, 1]
    monkeypatch.undo()
    monkeypatch.setattr(combine, "critical_path", lambda *a, **k: walked.append(1) or walk(*a, **k))
    (meta_of(folder) / "ideal_trace.json.gz").unlink()  # written as the path is walked
    build_report(folder, settings)
    assert walked == [1, 1, 1, 1] and (meta_of(folder) / "ideal_trace.json.gz").exists()
    tv.write(tmp_path / "gpu", [traces[0], tv.as_rank(base, 1, 3, shift_us=50.0), traces[2]])
    build_report(folder, settings)
    assert walked == [1, 1, 1, 1, 1]
