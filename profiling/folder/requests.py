"""Live-capture requests in the job folder: written by ``python -m jobs.commands.capture``, read by every
rank (:mod:`profiling.recording.capture`), and answered with the steps the ranks agreed on."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from profiling.folder.layout import JobFolder
from profiling.ranks import RankSelection
from profiling.schema.manifest import CaptureRecord, CaptureTrigger
from slurm.common.clock import utc_now
from slurm.common.files import SMALL_FILE_BYTES, read_regular, write_json_atomically


class CaptureRequest(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    active: int  # steps to record
    ranks: str  # a --profile-ranks spec: "all", "0,3"
    requested_at: str
    trigger: CaptureTrigger | None = None  # --auto-capture's reason; none: a person asked

    def selection(self) -> RankSelection:
        return RankSelection.parse(self.ranks)


def write_request(
    folder: JobFolder, *, active: int, ranks: str, trigger: CaptureTrigger | None = None
) -> CaptureRequest:
    """A new request in the job folder; its id is one more than the last (never overwritten)."""
    folder.capture.mkdir(parents=True, exist_ok=True)
    while True:
        # numbered by the files there, read or not: a damaged one is never taken for a free number
        number = 1 + max((_number(path.name) for path in folder.capture_requests()), default=0)
        request = CaptureRequest(
            id=number, active=active, ranks=ranks, requested_at=utc_now(), trigger=trigger
        )
        content = msgspec.json.encode(request)
        try:  # exclusive creation: two requesters at once get two ids
            with open(folder.capture_request(number), "xb") as handle:
                handle.write(content)
            return request
        except FileExistsError:
            continue


def _number(name: str) -> int:
    digits = name.removeprefix("request-").removesuffix(".json")
    return int(digits) if digits.isdigit() else 0


def read_requests(folder: JobFolder) -> list[CaptureRequest]:
    found = []
    for path in folder.capture_requests():
        try:
            request = msgspec.json.decode(read_regular(path, SMALL_FILE_BYTES), type=CaptureRequest)
            request.selection()  # ranks that parse, or no request: every rank reads it in its loop
        except (OSError, ValueError):  # msgspec's errors are ValueErrors, as RankSpecError is
            continue  # being written (seen at the next look), or not a request
        found.append(request)
    return sorted(found, key=lambda request: request.id)


def write_accepted(folder: JobFolder, request_id: int, accepted: CaptureRecord) -> None:
    """The steps and ranks the job agreed on for a request (written by one of its ranks)."""
    write_json_atomically(folder.capture_accepted(request_id), msgspec.to_builtins(accepted))


def read_accepted(folder: JobFolder, request_id: int) -> dict[str, Any] | None:
    try:
        return json.loads(read_regular(folder.capture_accepted(request_id), SMALL_FILE_BYTES))
    except (OSError, ValueError):
        return None
