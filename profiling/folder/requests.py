"""Live-capture requests in the job folder: written by ``python -m jobs.commands.capture``, read by every
rank (:mod:`profiling.recording.capture`), and answered with the steps the ranks agreed on."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import msgspec

from profiling.folder.layout import JobFolder
from profiling.ranks import RankSelection
from profiling.schema.manifest import CaptureRecord
from slurm.common.clock import utc_now
from slurm.common.files import SMALL_FILE_BYTES, read_regular, write_json_atomically


@dataclasses.dataclass(frozen=True)
class CaptureRequest:
    id: int
    active: int  # steps to record
    ranks: str  # a --profile-ranks spec: "all", "0,3"
    requested_at: str

    def selection(self) -> RankSelection:
        return RankSelection.parse(self.ranks)


def write_request(folder: JobFolder, *, active: int, ranks: str) -> CaptureRequest:
    """A new request in the job folder; its id is one more than the last (never overwritten)."""
    folder.capture.mkdir(parents=True, exist_ok=True)
    while True:
        number = 1 + max((request.id for request in read_requests(folder)), default=0)
        request = CaptureRequest(number, active, ranks, utc_now())
        try:  # exclusive creation: two requesters at once get two ids
            with open(folder.capture_request(number), "x") as handle:
                json.dump(dataclasses.asdict(request), handle)
            return request
        except FileExistsError:
            continue


def read_requests(folder: JobFolder) -> list[CaptureRequest]:
    found = []
    for path in folder.capture_requests():
        try:
            found.append(CaptureRequest(**json.loads(read_regular(path, SMALL_FILE_BYTES))))
        except (OSError, ValueError, TypeError):
            continue  # being written: seen at the next look
    return sorted(found, key=lambda request: request.id)


def write_accepted(folder: JobFolder, request_id: int, accepted: CaptureRecord) -> None:
    """The steps and ranks the job agreed on for a request (written by one of its ranks)."""
    write_json_atomically(folder.capture_accepted(request_id), msgspec.to_builtins(accepted))


def read_accepted(folder: JobFolder, request_id: int) -> dict[str, Any] | None:
    try:
        return json.loads(read_regular(folder.capture_accepted(request_id), SMALL_FILE_BYTES))
    except (OSError, ValueError):
        return None
