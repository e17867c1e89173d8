"""Jobs of many groups: each collective's group and each transfer's peer read from the traces
(NCCL's own args; the toolkit's labels on gloo's), clocks chained through the groups and the
sends between stages, the straggler judged within each group and named with its coordinates;
and the toolkit's own job of many groups, ``--parallel``, checked before it is submitted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiling.analysis.clocks.alignment import TRANSFERS, bounded_by_transfers
from profiling.analysis.clocks.group_inference import inferred_groups
from profiling.analysis.per_trace.groups import Group
from profiling.analysis.per_trace.record import load_fresh
from profiling.analysis.reading.collectives import Collective, Instance, transfer_of
from profiling.analysis.reading.instances import instances, transfer_ranks
from profiling.folder.group_label import group_label, parse_group_label
from profiling.folder.traces import list_traces
from profiling.report.build import build_report
from tests.common import REPO
from tests.synthetic import BASE_NS, cpu_job, pipeline_job, write_job, x
from tests.test_task_faults import free_port
from workload.config import PARALLEL_FACTORY, WorkloadConfig, WorkloadError


def test_a_group_label_says_its_group_and_peer() -> None:
    assert group_label("4", "mesh_dp") == "pg 4 mesh_dp"
    assert parse_group_label(group_label("2", "mesh_pp", 5)) == ("2", "mesh_pp", 5)
    assert parse_group_label(group_label("7", "")) == ("7", "undescribed", None)
    for text in ("pg 4", "pg  mesh_dp", "pg 4 mesh_dp peer x", "ProfilerStep#3", "pg 4 a b"):
        assert parse_group_label(text) is None, text


def _op(name: str, start: float, end: float, tid: int = 1, **args: object) -> Collective:
    return Collective(name, start, end, tid, False, tuple(args.items()), step=0)


GROUPS = [
    Group("0", "default_pg", (0, 1, 2, 3)),
    Group("4", "mesh_dp", (1, 3)),
    Group("6", "mesh_tp", (0, 1)),
]


def test_labelled_gloo_collectives_take_their_group_and_their_own_ends() -> None:
    """Rank 1 of two groups, gloo: each group's operators run on that group's two worker threads
    (11, 12: tp; 21, 22: dp), in the order queued; torch records each c10d operator twice around
    the label (the dispatch mode sits between its two entries); a send runs when it is waited."""
    ops = []
    queue = [("6", "mesh_tp", "allreduce_", 0.0), ("4", "mesh_dp", "_allgather_base_", 10.0),
             ("6", "mesh_tp", "allreduce_", 20.0), ("4", "mesh_dp", "_allgather_base_", 30.0),
             ("6", "mesh_tp", "allreduce_", 40.0)]  # fmt: skip
    for name, description, kind, t in queue:
        ops += [_op(f"c10d::{kind}", t, t + 4), _op(group_label(name, description), t + 1, t + 3)]
        ops.append(_op(f"c10d::{kind}", t + 1.5, t + 2.5))
    # workers: tp's at 5, 25 (thread 11), 45 (12); dp's at 12 (21), 33 (22); the second dp one ends last
    ops += [_op("gloo:all_reduce", 5, 8, 11), _op("gloo:all_reduce", 25, 28, 11),
            _op("gloo:all_reduce", 45, 48, 12), _op("gloo:all_gather", 12, 19, 21),
            _op("gloo:all_gather", 33, 60, 22)]  # fmt: skip
    ops += [_op("c10d::send", 70, 71), _op(group_label("0", "default_pg", 3), 70.2, 70.8),
            _op("c10d::send", 70.3, 70.7), _op("gloo:send", 90, 95)]  # fmt: skip
    found = instances(sorted(ops, key=lambda c: c.start), rank=1, groups=GROUPS)
    assert [(i.key, i.group, i.end, i.symmetric) for i in found] == [
        ('["seq","6",0]', (0, 1), 8, True),
        ('["seq","4",0]', (1, 3), 19, True),
        ('["seq","6",1]', (0, 1), 28, True),
        ('["seq","4",1]', (1, 3), 60, True),
        ('["seq","6",2]', (0, 1), 48, True),
        ('["seq","p2p 1>3",0]', (0, 1, 2, 3), 95, False),
    ]
    assert found[-1].peer == 3 and transfer_ranks(found[-1]) == (1, 3)


@pytest.mark.parametrize(
    ("key", "pair"),
    [
        ('["seq","p2p 1>3",0]', (1, 3)),  # as sequence_key writes it: read without decoding
        ('["seq", "p2p 12>0", 7]', (12, 0)),  # any other spelling of it: decoded
        ('["se\\"q","p2p 1>3",0]', (1, 3)),
        ('["seq","p2p 1>3",0,4]', None),  # not three parts
        ('["seq","p2p 1>x",0]', None),
        ('["seq","p2p 1>3"', None),  # not JSON
        ('["seq","6",0]', None),  # a collective's
        ('["p2p 1>3","seq",0]', None),
    ],
)
def test_a_transfers_key_names_its_sender_and_receiver(key: str, pair: tuple[int, int] | None) -> None:
    assert transfer_of(key) == pair


def test_nccl_kernels_name_their_group_and_a_transfer_its_peer() -> None:
    """As torch writes them (``torch/csrc/profiler/util.cpp``): ``Process Group Ranks`` (a list,
    truncated where long: then the group by its name), ``Dst Rank`` / ``Src Rank`` global ranks."""

    def kernel(name: str, start: float, **args: object) -> Collective:
        return Collective(name, start, start + 5, 7, True, tuple(args.items()), correlation=1, step=0)

    found = instances(
        [
            kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 0, **{
                "Process Group Name": "6", "Process Group Ranks": "[0, 1]", "Seq": 3}),
            kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", 10, **{
                "Process Group Name": "4", "Process Group Ranks": "[1, ...]", "Group size": 2, "Seq": 8}),
            kernel("ncclDevKernel_SendRecv(ncclDevComm*)", 20, **{
                "Process Group Name": "0", "Collective name": "send", "Dst Rank": 3, "Seq": 1}),
            kernel("ncclDevKernel_SendRecv(ncclDevComm*)", 30, **{
                "Process Group Name": "0", "Collective name": "recv", "Src Rank": 3, "Seq": 2}),
        ],
        rank=1,
        groups=GROUPS,
    )  # fmt: skip
    assert [(i.key, i.group, i.peer) for i in found] == [
        ('["seq","6",3]', (0, 1), None),
        ('["seq","4",8]', (1, 3), None),
        ('["seq","p2p 1>3",0]', (0, 1, 2, 3), 3),
        ('["seq","p2p 3>1",0]', (0, 1, 2, 3), 3),
    ]


def _transfer(key: str, arrival: float, end: float, peer: int) -> Instance:
    return Instance(key, arrival, end, "send", False, 0, None, peer)


def test_sends_and_receives_bound_the_clock_from_both_sides() -> None:
    """Rank 2's clock is 40 µs ahead of rank 0's: rank 0 sends at 100 (rank 2's receive ends at
    its 150 = 110 on rank 0's clock), rank 2 sends back at its 240 (200), rank 0's receive ends
    at 215: the shift is at least 100 - 150 = -50 and at most 215 - 240 = -25."""
    sender = [_transfer('["seq","p2p 0>2",0]', 100, 105, 2), _transfer('["seq","p2p 2>0",0]', 106, 215, 2)]
    receiver = [_transfer('["seq","p2p 0>2",0]', 45, 150, 0), _transfer('["seq","p2p 2>0",0]', 240, 245, 0)]
    clock = bounded_by_transfers(sender, receiver, (0, 2), prior_us=0.0)
    assert (clock.method, clock.shift_us, clock.uncertainty_us) == (TRANSFERS, -37.5, 12.5)
    one_way = bounded_by_transfers(sender[:1], receiver[:1], (0, 2), prior_us=3.0)
    assert (one_way.method, one_way.shift_us) == ("base time", 3.0)
    assert "go one way only" in one_way.note


def test_a_pipeline_of_four_stages_is_aligned_through_its_groups_and_sends(tmp_path: Path) -> None:
    """Eight ranks, 4 stages x 2 replicas, each on its own host with its own clock (13 µs per rank
    ahead): rank 0 shares a collective with rank 1 alone and passes activations to rank 2 alone,
    yet every rank is put on its clock, exactly; rank 5 (stage 2, replica 1) arrives 100 µs late
    at every all-reduce of its replicas' group, and is named, with its coordinates."""
    folder = write_job(tmp_path / "job", pipeline_job(8, late=lambda step: {5: 100.0}), 8)
    build_report(folder)
    report = json.loads((folder / "meta" / "report.json").read_text())
    for rank in report["ranks"]:
        clock = rank["clock"]
        assert clock["method"] != "base time", clock
        assert abs(clock["shift_us"] + 13.0 * rank["rank"]) <= clock["uncertainty_us"] + 1e-6
        assert clock["uncertainty_us"] < 20.0
    # each rank waits for its own group's last: rank 4 for rank 5, 100 µs a step; nobody else
    waits = {r["rank"]: r["collective_wait"] for r in report["ranks"]}
    assert waits[4]["wait_ms"] == pytest.approx(0.1) and waits[5]["last_arrivals"] == 8
    assert all(waits[r]["wait_ms"] == 0 and waits[r]["collectives"] == 8 for r in (0, 1, 2, 3, 5, 6, 7))
    # the collectives table by group: each replica pair's all-reduce, each stage's transfers
    assert {(r["group"], r["kind"], r["group_size"], r["count"]) for r in report["collectives_across"]} == {
        ("mesh_dp", "allreduce_", 2, 64), ("mesh_pp", "send", None, 96), ("mesh_pp", "recv_", None, 96)
    }  # fmt: skip
    methods = {rank["rank"]: rank["clock"]["method"] for rank in report["ranks"]}
    assert methods[1] == methods[3] == "sequence numbers" and methods[2] == TRANSFERS
    assert report["layout"]["dims"] == {"pp": 4, "dp": 2}
    straggler = report["straggler"]
    assert straggler["verdict"] == "straggler" and straggler["rank"] == 5, straggler["text"]
    assert straggler["text"].startswith("straggler: rank 5 (pp 2, dp 1) arrived last at 8 of 32 collectives")
    assert "rank 5 (pp 2, dp 1)" in (folder / "meta" / "report.md").read_text()
    # the path: rank 4 ends the step last, held by rank 5 at their all-reduce; on rank 5 the
    # 100 µs of host time that made it late; back through the stages of replica 1, each receive
    # met at its send, to rank 1's step start: every segment on the path, adding up to the step
    path = report["critical_path"]
    assert path["undecided"] == [] and len(path["steps"]) == 8
    first = path["steps"][0]
    assert (first["ending_rank"], first["ms"]) == (4, pytest.approx(0.31))
    assert sum(s["end_us"] - s["start_us"] for s in first["segments"]) == pytest.approx(310.0)
    assert [(s["rank"], s["kind"], s["end_us"] - s["start_us"]) for s in first["segments"]][-4:] == [
        (5, "communication", 10.0), (5, "host", 100.0), (4, "communication", 20.0), (4, "host", 10.0)
    ]  # fmt: skip
    crossed = [(s["rank"], s["name"]) for s in first["segments"] if s["kind"] == "communication"]
    assert crossed[:5] == [
        (3, "recv_ 1>3 #0"), (5, "recv_ 3>5 #0"), (7, "recv_ 5>7 #0"), (5, "send 7>5 #0"), (5, "gloo:send")
    ]  # fmt: skip
    assert crossed[-1] == (4, "allreduce_ (group 5, #0)")
    # the pipeline's bubble: the path's work on stages 0-2 while stage 3, its own (the most of
    # its forward and backward: a tie with stage 2's, the later stage), waits for them
    bubble = [(s["rank"], s["end_us"] - s["start_us"]) for s in first["segments"] if s["kind"] == "bubble"]
    assert bubble == [(1, 20.0), (3, 20.0), (5, 20.0), (5, 20.0)]
    assert {w["what"]: w["gain_ms"] for w in path["what_if"]}["bubble"] == pytest.approx(0.08)
    markdown = (folder / "meta" / "report.md").read_text()
    assert "The pipeline's bubble holds 0.08 ms of the critical path a step" in markdown
    # replayed: each step exactly as measured; rank 5's 100 µs of host is the host's share, and
    # most of it is rank 5's (not its stage's: rank 4, its peer there, is on time)
    replay = path["replay"]
    assert (replay["fidelity"]["median"], replay["fidelity"]["worst"]) == (0.0, 0.0) and len(
        replay["steps"]
    ) == 8
    # one model for S and its parts: rank 5's host gaps are its own work, in S and in its part
    assert replay["slowdown"] > 1.05 and replay["host_share"] > 1.2
    assert max(replay["by_rank"].values()) <= 1.1 * replay["slowdown"]
    most = replay["most"]
    assert (most["dimension"], most["index"], most["kinds"]) == ("rank", 5, ["host"])
    assert replay["by_rank"]["5"] == max(replay["by_rank"].values())
    assert "Most of it is **rank 5**" in markdown
    balanced = write_job(tmp_path / "balanced", pipeline_job(8), 8)
    build_report(balanced)
    assert json.loads((balanced / "meta" / "report.json").read_text())["straggler"]["verdict"] == "none"


def test_ranks_that_share_no_group_with_the_rest_are_named(tmp_path: Path) -> None:
    """Stages 1 and 2 pass nothing: ranks 4-7 have nothing in common with ranks 0-3."""
    folder = write_job(tmp_path / "job", pipeline_job(8, cut=2), 8)
    build_report(folder)
    report = json.loads((folder / "meta" / "report.json").read_text())
    clocks = {rank["rank"]: rank["clock"] for rank in report["ranks"]}
    assert all(clocks[r]["method"] != "base time" for r in range(4))
    for rank in range(4, 8):
        assert clocks[rank]["method"] == "base time"
        assert clocks[rank]["note"].startswith(
            "shares no group with any of the 4 rank(s) on the common clock"
        )
    assert report["straggler"]["ranks_without_paired_clock"] == [4, 5, 6, 7]


def test_parallel_sizes_are_checked_before_anything_runs() -> None:
    config = WorkloadConfig(parallel=(("dp", 2), ("pp", 2), ("tp", 2)))
    assert config.workload == PARALLEL_FACTORY
    config.check_ranks(8)
    with pytest.raises(
        WorkloadError, match=r"dp=2,pp=2,tp=2 makes 8 ranks, the job has 4. HINT: sizes whose"
    ):
        config.check_ranks(4)
    with pytest.raises(WorkloadError, match=r"dp=2,cp=2 names cp. HINT: split over pp, dp, tp only"):
        WorkloadConfig(parallel=(("dp", 2), ("cp", 2)))
    with pytest.raises(WorkloadError, match=r"runs the toolkit's parallel LM, not factory mine:build"):
        WorkloadConfig(parallel=(("dp", 2),), factory="mine:build")
    assert WorkloadConfig().workload == "workload.resnet18:build"


def test_a_slow_stage_is_named_as_a_stage_not_a_rank(tmp_path: Path) -> None:
    """Stage 3 computes 60 µs where the others compute 20: its two replicas are alike, nobody in
    a group waits for anybody, and every stage waits for it."""
    folder = write_job(tmp_path / "job", pipeline_job(8, compute=(20.0, 20.0, 20.0, 60.0)), 8)
    build_report(folder)
    report = json.loads((folder / "meta" / "report.json").read_text())
    stages = report["stages"]
    assert (stages["verdict"], stages["stage"]) == ("imbalance", 3)
    assert [s["ranks"] for s in stages["stages"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert stages["text"].startswith("stage imbalance: stage 3 (ranks 6, 7) computes")
    assert report["straggler"]["verdict"] != "straggler"
    markdown = (folder / "meta" / "report.md").read_text()
    assert "**Stage imbalance: stage 3 (ranks 6, 7)" in markdown
    # replayed: stage 3, both its ranks, holds the most; its forward and backward 3x the others'
    # (60 µs against 20); the first gain is the stage like the others. One microbatch a step: the
    # stages run one after another, so a balanced pipeline would take as long (S = 1)
    replay = report["critical_path"]["replay"]
    most = replay["most"]
    assert (most["dimension"], most["index"], most["kinds"]) == ("pp", 3, ["forward", "backward"])
    assert most["longer_fraction"] == pytest.approx(2.0)
    first = replay["gains"][0]
    assert (first["what"], first["coordinate"]) == ("stage like the median stage", "pp 3")
    # (each rank's host gaps at their mean in the ideal: the stages' differ by a few µs)
    assert replay["slowdown"] == pytest.approx(1.0, abs=0.03)
    assert "Most of it is **stage 3**" in markdown and "1. **Stage 3 like the median stage**" in markdown
    heat = replay["heat"]  # stage x replica: stage 3 the hot row
    assert (heat["rows"], heat["columns"], heat["row_labels"]) == ("pp", "dp", [0, 1, 2, 3])
    assert min(heat["values"][3]) > max(max(row) for row in heat["values"][:3])
    # a late rank is no stage's imbalance
    late = write_job(tmp_path / "late", pipeline_job(8, late=lambda step: {5: 100.0}), 8)
    build_report(late)
    assert json.loads((late / "meta" / "report.json").read_text())["stages"]["verdict"] == "balanced"


def _unlabelled_gloo_job(steps: int) -> list[dict]:
    """Four gloo ranks (tp pairs 0-1 and 2-3, dp pairs 0-2 and 1-3) traced without the toolkit's
    labels: every rank runs two all-reduces of 100 elements a step (which group's, nothing
    tells), and each tensor-parallel pair one of its own shape (7 elements on 0-1, 8 on 2-3)."""
    traces = []
    for rank in range(4):
        tp_group, dp_group = [rank & ~1, rank | 1], [rank % 2, rank % 2 + 2]
        events = []
        for k in range(steps):
            t = 1000.0 * k
            events.append(x(f"ProfilerStep#{10 + k}", t, 200.0, cat="user_annotation"))
            events.append(x("aten::linear", t + 5, 20.0))
            for n, (dims, at) in enumerate((([[100]], 40.0), ([[7 + rank // 2]], 80.0), ([[100]], 120.0))):
                events.append(x("c10d::allreduce_", t + at, 5.0))
                events.append(x("gloo:all_reduce", t + at + 1, 20.0, tid=2 + n % 2, **{"Input Dims": dims}))
        configs = [
            {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]},
            {"pg_name": f"dp{rank % 2}", "pg_desc": "mesh_dp", "pg_size": 2, "ranks": dp_group},
            {"pg_name": f"tp{rank // 2}", "pg_desc": "mesh_tp", "pg_size": 2, "ranks": tp_group},
        ]
        traces.append(
            {
                "distributedInfo": {"rank": rank, "world_size": 4, "backend": "gloo", "pg_config": configs},
                "host_name": "host0",
                "baseTimeNanoseconds": BASE_NS,
                "traceEvents": events,
            }
        )
    return traces


def test_the_group_of_an_unlabelled_gloo_collective_is_inferred_where_sure(tmp_path: Path) -> None:
    """The all-reduces of 7 and 8 elements are held by one tensor-parallel pair each: that is
    their group. Those of 100 every rank holds as often: default group, or each pair its own,
    or a mix, nothing tells; the report says so, rank by rank, and takes them as the job's."""
    folder = write_job(tmp_path / "job", _unlabelled_gloo_job(6), 6)
    build_report(folder)
    traces = list_traces(folder)
    records = [load_fresh(trace.source) for trace in traces]
    inferred = inferred_groups(traces, records)
    for record in inferred:
        pair = (record.rank & ~1, record.rank | 1)
        groups = {(i.label.split(" ")[1], i.group) for i in record.instances}
        assert groups == {("[[100]]", None), (f"[[{7 + record.rank // 2}]]", pair)}
        assert record.warnings[-1].startswith(
            "the group of 1 kind(s) of its collectives cannot be told ('gloo:all_reduce [[100]]')"
        )
    report = json.loads((folder / "meta" / "report.json").read_text())
    assert sum("cannot be told" in line for line in report["warnings"]) == 4
    # a job of one group: nothing to infer, nothing said
    flat = write_job(tmp_path / "flat", cpu_job(6, ranks=2), 6)
    build_report(flat)
    flat_records = [load_fresh(t.source) for t in list_traces(flat)]
    assert inferred_groups(list_traces(flat), flat_records) == flat_records


def test_the_parallel_lm_resumes_from_its_own_state(tmp_path: Path) -> None:
    """What a requeued --parallel job does, each rank with its FSDP2 and pipeline shard: the
    restored model's step is the one it would have run."""
    script = REPO / "tests" / "scripts" / "parallel_lm_resume.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(free_port())],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    # two ranks print at once: their lines can run together ("... 5.46rank 3 resumed loss ...")
    resumed = re.findall(r"resumed loss (-?\d+\.\d+) (-?\d+\.\d+)", result.stdout)
    assert len(resumed) == 2 and all(before == after for before, after in resumed), result.stdout
