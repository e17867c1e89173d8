"""The job's layout: process groups read from each trace's ``distributedInfo.pg_config`` (as
torch's profiler writes it), DeviceMesh dimensions from their ``mesh_<dim>`` groups, each rank's
coordinates in report.json and report.md; ``--layout`` where the traces name no mesh."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from jobs.commands.report import main
from profiling.analysis.across_ranks.mesh_from_groups import job_layout
from profiling.analysis.per_trace.groups import Group, trace_groups
from profiling.analysis.run.run_rows import Band, node_bands, run_mesh
from profiling.folder.layout import ReportFiles
from profiling.report.build import build_report
from profiling.report.settings import ReportSettings
from profiling.schema.manifest import Manifest
from slurm.common.mesh import LayoutError, mesh_dims, named, parse_layout
from tests.synthetic import cpu_job, write_job
from tests.test_gpu_traces import DATA

# a 2 x 2 x 2 DeviceMesh ("pp", "dp", "tp"), rank = pp * 4 + dp * 2 + tp, as torch names its groups
MESH = {
    "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
    "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
    "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
}


def pg_config(rank: int) -> list[dict]:
    """What ``_get_all_pg_configs`` lists on ``rank``: the default group, then its mesh groups."""
    found = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "pg_size": 8,
              "ranks": list(range(8))}]  # fmt: skip
    for dim, groups in MESH.items():
        group = next(g for g in groups if rank in g)
        found.append({"pg_name": f"{len(found)}", "pg_desc": f"mesh_{dim}", "backend_config": "cpu:gloo",
                      "pg_size": len(group), "ranks": group})  # fmt: skip
    return found


def test_a_traces_groups_as_torch_writes_them() -> None:
    groups, said = trace_groups({"pg_config": pg_config(5)})
    assert said == [] and [g.description for g in groups] == ["default_pg", "mesh_pp", "mesh_dp", "mesh_tp"]
    assert (
        groups[1] == Group("1", "mesh_pp", (1, 5))
        and groups[1].mesh_dim == "pp"
        and groups[0].mesh_dim is None
    )
    # the whole job's group is not kept where the trace says the world's size: a collective of no
    # known group is taken to be its (at 4096 ranks, every record would hold every rank)
    groups, _ = trace_groups({"world_size": 8, "pg_config": pg_config(5)})
    assert [g.description for g in groups] == ["mesh_pp", "mesh_dp", "mesh_tp"]
    # the real GPU traces' one group: the whole job's
    with gzip.open(DATA / "nccl_data.json.gz") as handle:
        info = json.load(handle)["distributedInfo"]
    assert trace_groups(info) == ([], [])


@pytest.mark.parametrize(
    "config",
    [
        {"ranks": [0, 0]},
        {"ranks": [0, 1], "pg_size": 3},
        {"ranks": [-1]},
        {"ranks": ["0"]},
        "x",
        {"ranks": []},
    ],
)
def test_a_group_that_is_none_is_said(config: object) -> None:
    groups, said = trace_groups({"pg_config": [config]})
    assert groups == [] and said[0].startswith("a process group of distributedInfo.pg_config is none: ")


def test_the_mesh_and_each_ranks_coordinates_from_the_groups() -> None:
    groups = {rank: trace_groups({"pg_config": pg_config(rank)})[0] for rank in range(8)}
    layout, mesh, said = job_layout(groups, list(range(8)), 8, None)
    assert said == [] and layout is not None
    assert layout.dims == {"pp": 2, "dp": 2, "tp": 2} and layout.source == "the traces' DeviceMesh groups"
    assert list(layout.dims) == ["pp", "dp", "tp"]  # outermost first, by the groups' strides
    assert mesh[6] == {"pp": 1, "dp": 1, "tp": 0} and mesh[3] == {"pp": 0, "dp": 1, "tp": 1}
    assert named(6, mesh[6]) == "rank 6 (pp 1, dp 1, tp 0)" and named(6, None) == "rank 6"
    flat = {rank: [Group("0", "default_pg", tuple(range(8)))] for rank in range(8)}
    assert job_layout(flat, list(range(8)), 8, None) == (None, {}, [])


def test_a_given_layout_is_read_outermost_first_and_refused_when_it_is_not_the_jobs() -> None:
    dims = parse_layout("dp=2,pp=2,tp=2")
    layout, mesh, said = job_layout({}, list(range(8)), 8, dims)
    assert layout is not None and layout.source == "--layout" and said == []
    assert mesh[5] == {"dp": 1, "pp": 0, "tp": 1}
    layout, mesh, said = job_layout({}, list(range(8)), 8, parse_layout("dp=4,tp=4"))
    assert layout is None and said == ["--layout dp=4,tp=4 makes 16 ranks, the job has 8: not used"]
    with pytest.raises(LayoutError, match=r"--layout 'dp=2,pp': 'pp' is not DIM=SIZE. HINT: --layout dp=4"):
        parse_layout("dp=2,pp")
    with pytest.raises(LayoutError, match=r"names dp twice"):
        parse_layout("dp=2,dp=2")


def test_the_report_names_each_rank_with_its_coordinates(tmp_path: Path) -> None:
    traces = cpu_job(8, lambda step: {6: 30.0}, ranks=8)  # rank 6 reaches every all-reduce late
    for rank, trace in enumerate(traces):
        trace["distributedInfo"]["pg_config"] = pg_config(rank)
    folder = write_job(tmp_path / "job", traces, 8)
    report = build_report(folder, ReportSettings(plot=False, merged_trace=False))
    assert report.layout is not None and report.layout.dims == {"pp": 2, "dp": 2, "tp": 2}
    assert [r.mesh for r in report.ranks][6] == {"pp": 1, "dp": 1, "tp": 0}
    markdown = ReportFiles.of(folder).markdown.read_text()
    assert "Layout: pp 2 × dp 2 × tp 2 (from the traces' DeviceMesh groups)" in markdown
    assert "| 6 (pp 1, dp 1, tp 0) | host6 |" in markdown
    assert report.straggler is not None and report.straggler.rank == 6
    assert report.straggler.text.startswith("straggler: rank 6 (pp 1, dp 1, tp 0) arrived last"), (
        report.straggler
    )


def test_the_layout_option_where_the_traces_name_no_mesh(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = write_job(tmp_path / "job", cpu_job(4, ranks=4), 4)
    assert main([str(folder), "--no-plot", "--no-merged-trace", "--layout", "dp=2,pp=2"]) == 0
    assert "| 3 (dp 1, pp 1) | host3 |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # the parser's one line, exit 2
        main([str(folder), "--layout", "dp=2,pp"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1 and "'pp' is not DIM=SIZE. HINT: --layout" in err


def test_the_toolkits_own_mesh_is_laid_out_as_its_job_builds_it() -> None:
    """However ``--parallel`` was written, the job's DeviceMesh is (pp, dp, tp), dimensions of
    size 1 left out; the run map reads each rank's place from the manifest so, before any trace."""
    assert mesh_dims((("dp", 2), ("tp", 1), ("pp", 3))) == (("pp", 3), ("dp", 2))
    assert mesh_dims((("tp", 1),)) == (("dp", 1),)
    manifest = Manifest(
        job_id="5", launcher="slurm", nodes=2, master="node1", backend="gloo", attempts=[], trace_files=[],
        world_size=4, workload={"parallel": [["dp", 2], ["pp", 2]]},
    )  # fmt: skip
    mesh = run_mesh(None, manifest)
    assert [mesh[rank] for rank in range(4)] == [
        {"pp": 0, "dp": 0}, {"pp": 0, "dp": 1}, {"pp": 1, "dp": 0}, {"pp": 1, "dp": 1}
    ]  # fmt: skip
    assert run_mesh((("tp", 4),), manifest) == {r: {"tp": r} for r in range(4)}  # --layout first
    assert run_mesh((("tp", 8),), manifest) == {}  # not the job's world size: rows by rank
    assert run_mesh(None, None) == {}


def test_a_map_drawn_a_row_per_node_keeps_its_stages_where_each_node_holds_one() -> None:
    stages = [Band("pp", 0, 0, 4), Band("pp", 1, 4, 8), Band("dp", 0, 0, 2)]
    nodes = ["n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"]
    assert node_bands(stages, nodes, ["n1", "n2", "n3", "n4"]) == [Band("pp", 0, 0, 2), Band("pp", 1, 2, 4)]
    split = ["n1", "n1", "n2", "n2", "n2", "n3", "n4", "n4"]  # node n2 holds ranks of both stages
    assert node_bands(stages, split, ["n1", "n2", "n3", "n4"]) == []
