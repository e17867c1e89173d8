"""The waits between a rank's GPU streams its trace records (profiling/analysis/per_trace/
stream_waits.py): a Stream Wait Event ties the waiting stream's next kernel to the last kernel
launched on the stream waited on before the cudaEventRecord it names, as HTA's critical path
ties them; a wait whose record or streams the trace lacks ties nothing. The step's lane keeps
the waits of its kernels, for the replay (tests/test_replay.py replays them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from profiling.analysis.per_trace.breakdown import analyse
from profiling.analysis.per_trace.launches import launch_times
from profiling.analysis.per_trace.stream_waits import stream_waits
from profiling.analysis.reading.trace_events import from_document

COMPUTE, NCCL = 7, 20


def x(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    gpu = cat in ("kernel", "cuda_sync")
    pid, tid = (0, args.get("stream", 1)) if gpu else (1, 1)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def trace(wait_args: dict[str, Any]) -> dict[str, Any]:
    """A step whose compute kernel waits for a receive on the NCCL stream: the receive launched
    (correlation 1), the event recorded after it (2), the compute stream told to wait for it,
    then the compute launched (4); a later NCCL kernel (5) launched after the record. The
    compute is recorded to begin 10 µs before the receive's recorded end."""
    return {
        "distributedInfo": {"rank": 0, "world_size": 2},
        "traceEvents": [
            x("ProfilerStep#3", "user_annotation", 90, 400),
            x("cudaLaunchKernel", "cuda_runtime", 100, 2, correlation=1),
            x("cudaEventRecord", "cuda_runtime", 103, 1, correlation=2),
            x("cudaStreamWaitEvent", "cuda_runtime", 105, 1, correlation=3),
            x("cudaLaunchKernel", "cuda_runtime", 107, 2, correlation=4),
            x("cudaLaunchKernel", "cuda_runtime", 110, 2, correlation=5),
            x("ncclDevKernel_SendRecv", "kernel", 200, 100, correlation=1, stream=NCCL),
            x("Stream Wait Event", "cuda_sync", 150, 0, correlation=3, **wait_args),
            x("aten::addmm kernel", "kernel", 290, 50, correlation=4, stream=COMPUTE),
            x("ncclDevKernel_AllReduce", "kernel", 300, 20, correlation=5, stream=NCCL),
        ],
    }


TIED = {"stream": COMPUTE, "wait_on_stream": NCCL, "wait_on_cuda_event_record_corr_id": 2}


def test_a_stream_wait_ties_the_next_kernel_to_the_last_launched_before_the_record() -> None:
    events = from_document(trace(TIED))
    ended, resumed = stream_waits(events, launch_times(events))
    assert ended.tolist() == [300.0] and resumed.tolist() == [290.0]  # the receive, not the all-reduce


@pytest.mark.parametrize(
    "odd",
    [
        {**TIED, "wait_on_cuda_event_record_corr_id": 99},  # no such record in the trace
        {**TIED, "wait_on_cuda_event_record_corr_id": "2"},
        {**TIED, "wait_on_stream": COMPUTE},  # a stream waiting on itself
        {**TIED, "wait_on_stream": 3},  # a stream with no kernel
        {"stream": COMPUTE},  # torch before the args named what it waits on
    ],
    ids=["no record", "record id not a number", "itself", "empty stream", "no args"],
)
def test_a_wait_the_trace_cannot_tie_ties_nothing(odd: dict[str, Any]) -> None:
    events = from_document(trace(odd))
    ended, resumed = stream_waits(events, launch_times(events))
    assert len(ended) == len(resumed) == 0


def test_the_steps_lane_keeps_its_kernels_waits() -> None:
    analysis = analyse(from_document(trace(TIED)))
    (lane,) = analysis.lanes
    assert lane.lane(1000.0, analysis.lane_names).waits.tolist() == [[1300.0, 1290.0]]  # on the shifted clock
    untied = analyse(from_document(trace({"stream": COMPUTE}))).lanes[0]
    assert np.frombuffer(untied.waits).size == 0
