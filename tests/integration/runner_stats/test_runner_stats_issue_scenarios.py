"""The input-fidelity scenarios of issue 12 (findings 7-11), as reported, through the real handler.

Each of these failed on the code before the fix (the float and BOM messages were rejected, the
wild sequence made 50 messages too late, the year-3000 message set the run's duration, the late
message for a forgotten range vanished as a duplicate). The unit and fault suites cover the
mechanisms; this file keeps the reported cases themselves.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from devtools.aws.esm import ShardRecord, lambda_event
from devtools.runner_world import RunnerStatsWorld

BASE_TS = 1_760_000_000_000
ARRIVAL_MS = BASE_TS + 2 * 3_600_000  # within the default window (a day before, 5 min after) of every timestamp here
USER = 501


def message(sequence_id: int, meters: float = 100, timestamp_utc: int | None = None) -> dict[str, Any]:
    return {
        "user_id": USER,
        "run_id": 1,
        "sequence_id": sequence_id,
        "timestamp_utc": BASE_TS + 30_000 * sequence_id if timestamp_utc is None else timestamp_utc,
        "distance_meters": meters,
    }


def deliver(world: RunnerStatsWorld, payloads: list[Any], first_sequence: int = 1) -> list[str]:
    """Deliver the payloads in one batch; return their record ids."""
    records = [
        ShardRecord(f"{first_sequence + index:056d}", str(USER), p if isinstance(p, bytes) else json.dumps(p).encode(), ARRIVAL_MS)
        for index, p in enumerate(payloads)
    ]
    event = lambda_event(records)
    assert world.invoke(event) == {"batchItemFailures": []}
    return [record["eventID"] for record in event["Records"]]


def test_finding_7_json_doubles_are_kept_at_millimetres(world: RunnerStatsWorld) -> None:
    # Given a device that sends JSON doubles, one of them a float artefact
    payloads = [message(1, 83.41562937271542), message(2, 110.00000000000001)]
    # When they are delivered
    deliver(world, payloads)
    # Then both are applied, rounded to millimetres
    run = world.view().runs[(USER, 1)]
    assert [m.distance_meters for m in run.archived] == [Decimal("83.416"), Decimal("110.000")]
    assert run.total_meters == Decimal("193.416") and not world.view().rejects


def test_finding_8_one_wild_sequence_does_not_make_the_rest_of_the_run_too_late(world: RunnerStatsWorld) -> None:
    # Given a run of sequences 1-60 at 100 m each, with sequence 999,999 arriving after sequence 10
    payloads = (
        [message(s) for s in range(1, 11)] + [message(999_999, timestamp_utc=BASE_TS + 30_000 * 11)] + [message(s) for s in range(11, 61)]
    )
    # When they are delivered
    ids = deliver(world, payloads)
    # Then all 60 real messages are applied, and the wild one alone is a suspect_jump reject
    view = world.view()
    run = view.runs[(USER, 1)]
    assert (run.total_meters, run.message_count) == (Decimal(6000), 60)
    assert view.rejects == {ids[10]: "suspect_jump"}


def test_finding_9_a_message_from_the_year_3000_does_not_set_the_run_duration(world: RunnerStatsWorld) -> None:
    # Given two messages 30 s apart and one stamped in the year 3000 inside the same run
    payloads = [message(1), message(2), message(3, timestamp_utc=32_503_680_000_000)]
    # When they are delivered
    ids = deliver(world, payloads)
    # Then the run lasts 30 s and the year-3000 message is a bad_timestamp reject
    view = world.view()
    assert view.runs[(USER, 1)].total_seconds == Decimal(30)
    assert view.rejects == {ids[2]: "bad_timestamp"}


def test_finding_10_a_late_message_for_a_forgotten_range_leaves_a_reject(world: RunnerStatsWorld) -> None:
    # Given a run that received only odd sequences up to 199: far more closed gaps than the 16 kept
    deliver(world, [message(s) for s in range(1, 200, 2)])
    before = world.view().runs[(USER, 1)]
    # When the message for sequence 4, long closed, arrives
    (late_id,) = deliver(world, [message(4)], first_sequence=1000)
    # Then it is not applied, and it is a too_late reject, not a silent duplicate
    view = world.view()
    assert view.rejects == {late_id: "too_late"}
    assert (view.runs[(USER, 1)].total_meters, view.runs[(USER, 1)].message_count) == (before.total_meters, before.message_count)


def test_finding_11_a_byte_order_mark_and_device_metadata_are_accepted(world: RunnerStatsWorld) -> None:
    # Given a valid message behind a UTF-8 byte-order mark, and one carrying 5 KB of device metadata
    payloads = [b"\xef\xbb\xbf" + json.dumps(message(1)).encode(), {**message(2), "device": {"firmware": "x" * 5000}}]
    # When they are delivered
    deliver(world, payloads)
    # Then both are applied
    assert world.view().runs[(USER, 1)].message_count == 2 and not world.view().rejects
