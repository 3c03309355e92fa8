"""Bad input never blocks the shard and never costs a valid message.

One batch mixes good device messages with every kind of bad record (tests/events/runner_stats/
bad_inputs.json) and a record one byte over Kinesis's 1 MiB limit: the batch succeeds, each bad
record is kept in the rejects table under its eventID with its reason, and every good message is
applied once.
"""

from __future__ import annotations

import base64
import hashlib
import json
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws.esm import ShardRecord, lambda_event, records_from_payloads
from devtools.runner_world import RunnerStatsWorld
from runtime.shared.dynamo import from_attributes, to_attributes
from runtime.shared.json_depth import MAX_JSON_DEPTH
from tests.events.loader import load_event
from tests.stack_depth import deepest_stack
from tests.unit.runner_stats.test_runner_stats_parsing import VARIANTS, variant_payload

CASES = load_event("runner_stats/bad_inputs.json")
RUN_A = (3000, 3091019)
RUN_B = (3001, 77)


def good_payload(message: dict[str, Any]) -> bytes:
    # The loader reads fractions as Decimal; write them back as the same JSON numbers.
    return json.dumps(message, default=float).encode()


def bad_payload(case: dict[str, Any]) -> bytes:
    if "text" in case:
        return str(case["text"]).encode("utf-8")
    if "payload_base64" in case:
        return base64.b64decode(case["payload_base64"])
    return b"placeholder: kinesis.data is replaced by raw_data"


def one_megabyte_payload(case: dict[str, Any]) -> bytes:
    """A well-formed message padded to exactly `bytes` bytes: rejected for its size alone."""
    size = int(case["bytes"])
    body = json.dumps({**{k: int(v) for k, v in case["message"].items()}, "padding": ""})
    payload = body.replace('"padding": ""', '"padding": "' + "p" * (size - len(body)) + '"').encode()
    assert len(payload) == size
    return payload


def mixed_batch() -> tuple[dict[str, Any], dict[str, tuple[str, bytes, dict[str, Any]]]]:
    """The event, and per bad record's eventID: (expected reason, payload bytes as stored, case)."""
    good = list(CASES["good"])
    bad = list(CASES["bad"])
    too_large = CASES["too_large"]
    entries: list[tuple[str, bytes, dict[str, Any] | None]] = []  # (partition key, payload, bad case or None)
    for index, case in enumerate(bad):
        entries.append(("3000", bad_payload(case), case))
        if index == 6:
            entries.append(("3000", one_megabyte_payload(too_large), too_large))
        if index % 2 == 1 and good:
            message = good.pop(0)
            entries.append((str(message["user_id"]), good_payload(message), None))
    assert not good, "every good message is in the batch"
    event = lambda_event(records_from_payloads([(key, payload) for key, payload, _ in entries]))
    expected: dict[str, tuple[str, bytes, dict[str, Any]]] = {}
    for record, (_, payload, case) in zip(event["Records"], entries, strict=True):
        if case is None:
            continue
        if "raw_data" in case:
            record["kinesis"]["data"] = case["raw_data"]
            payload = str(case["raw_data"]).encode()  # what could be kept of undecodable data
        expected[record["eventID"]] = (str(case["reason"]), payload, case)
    return event, expected


def reject_item(world: RunnerStatsWorld, record_id: str) -> dict[str, Any]:
    response = world.client.get_item(
        TableName=world.settings.tables.rejects, Key=to_attributes({"record_id": record_id}), ConsistentRead=True
    )
    assert "Item" in response, f"no reject stored for {record_id}"
    return from_attributes(response["Item"])


def test_a_batch_mixing_good_and_bad_records(world: RunnerStatsWorld) -> None:
    # Given a batch where every kind of bad record sits between good messages of two runs
    event, expected = mixed_batch()
    assert len(expected) == len(CASES["bad"]) + 1
    # When it is processed
    response = world.invoke(event)
    # Then the batch succeeds: no bad record is worth redelivering
    assert response == {"batchItemFailures": []}
    view = world.view()
    # And every bad record is kept under its eventID with its reason
    assert view.rejects == {record_id: reason for record_id, (reason, _, _) in expected.items()}
    limit = world.settings.reject_payload_max_bytes
    records = {record["eventID"]: record for record in event["Records"]}
    for record_id, (reason, payload, case) in expected.items():
        item = reject_item(world, record_id)
        assert item["reason"] == reason, case["name"]
        assert isinstance(item["detail"], str) and item["detail"], case["name"]
        assert item["sequence_number"] == records[record_id]["kinesis"]["sequenceNumber"]
        assert item["partition_key"] == "3000"
        assert item["payload_bytes"] == len(payload)
        assert item["payload_sha256"] == hashlib.sha256(payload).hexdigest()
        assert item["payload"].value == payload[:limit]
        assert item["payload_truncated"] is (len(payload) > limit)
        if reason == "out_of_range":  # readable enough to name its run
            assert (int(item["user_id"]), int(item["run_id"])) in (RUN_A, RUN_B), case["name"]
    # The oversized record is stored truncated, with its full size and digest
    (large_id,) = [record_id for record_id, (reason, _, _) in expected.items() if reason == "too_large"]
    large = reject_item(world, large_id)
    assert large["payload_bytes"] == 1024 * 1024 + 1 and len(large["payload"].value) == limit < 1024 * 1024
    assert large["payload_truncated"] is True
    assert large["detail"] == f"record is {1024 * 1024 + 1} bytes; the limit is {world.settings.options.max_message_bytes}"
    # And every good message is applied exactly once: nothing valid is lost
    assert set(view.runs) == {RUN_A, RUN_B}
    run_a, run_b = view.runs[RUN_A], view.runs[RUN_B]
    assert [m.sequence_id for m in run_a.archived] == [1, 2, 3, 4, 5]
    assert run_a.total_meters == Decimal(510) and run_a.message_count == 5
    assert run_a.total_seconds == Decimal(240) and run_a.high_water == 5 and run_a.gaps == ()
    assert [m.sequence_id for m in run_b.archived] == [1, 2]
    assert run_b.total_meters == Decimal("150.5") and run_b.total_seconds == Decimal(60)
    assert view.tendencies == {3000: (3091019, "good job", None, None), 3001: (77, "fine", None, None)}
    # And the entry point counted what it did, as its metrics (7 good messages applied, every bad record rejected)
    assert world.counts["AcceptedMessages"] == 7
    assert world.counts["RejectedRecords"] == len(expected)


def test_redelivering_the_mixed_batch_changes_nothing(world: RunnerStatsWorld) -> None:
    event, _ = mixed_batch()
    assert world.invoke(event) == {"batchItemFailures": []}
    before = world.view()
    # When Lambda delivers the same batch again
    assert world.invoke(event) == {"batchItemFailures": []}
    # Then the rejects are overwritten in place and the runs are unchanged
    assert world.view() == before


@pytest.mark.parametrize("case", CASES["unstorable"], ids=lambda case: case["name"])
def test_a_number_dynamodb_cannot_store_is_rejected_not_retried_forever(world: RunnerStatsWorld, case: dict[str, Any]) -> None:
    good = CASES["good"]
    payloads = [("3000", good_payload(good[0])), ("0", bad_payload(case)), ("3001", good_payload(good[1]))]
    event = lambda_event(records_from_payloads(payloads))
    assert world.invoke(event) == {"batchItemFailures": []}
    assert world.view().rejects == {event["Records"][1]["eventID"]: "out_of_range"}


def test_what_real_devices_send_is_kept_and_bad_clocks_are_rejected(world: RunnerStatsWorld) -> None:
    # Given the valid variants real devices send (a JSON double, a float artefact, a BOM, 5 KB of
    # metadata; tests/data/runner_stats/valid_variants.json), and two records from broken clocks:
    # a one-message run stamped in the year 3000 and a message of the same run stamped 1 ms after 1970
    arrival_ms = int(VARIANTS["arrival_ms"])
    payloads = [variant_payload(variant) for variant in VARIANTS["variants"]]
    future = {"user_id": 501, "run_id": 2, "sequence_id": 1, "timestamp_utc": 32_503_680_000_000, "distance_meters": 100}
    ancient = {"user_id": 501, "run_id": 1, "sequence_id": 7, "timestamp_utc": 1, "distance_meters": 100}
    payloads += [json.dumps(future).encode(), json.dumps(ancient).encode()]
    records = [ShardRecord(f"{index + 1:056d}", "501", payload, arrival_ms=arrival_ms) for index, payload in enumerate(payloads)]
    # When they arrive in one batch, stamped by the stream with their arrival time
    assert world.invoke(lambda_event(records)) == {"batchItemFailures": []}
    view = world.view()
    # Then every valid variant is applied, at millimetres
    run = view.runs[(501, 1)]
    assert [str(m.distance_meters) for m in run.archived] == [variant["stored_meters"] for variant in VARIANTS["variants"]]
    assert run.total_meters == sum((Decimal(v["stored_meters"]) for v in VARIANTS["variants"]), Decimal(0))
    assert run.total_seconds == Decimal(150)  # 1760000030000 .. 1760000180000, not 1.76e9 s
    # And the broken clocks are rejects with their own reason: the year-3000 run never becomes a run
    assert (501, 2) not in view.runs
    ids = [f"shardId-000000000000:{record.sequence_number}" for record in records]
    assert view.rejects == {ids[-2]: "bad_timestamp", ids[-1]: "bad_timestamp"}
    assert view.tendencies[501][0] == 1


def test_a_message_32_levels_deep_is_applied_with_no_more_stack_than_a_shallow_one(world: RunnerStatsWorld) -> None:
    # Given three messages of one run, each with an extra field (devices send metadata): the first and the second 3 levels
    # deep in all, the third exactly at the depth limit, which the parser takes on every interpreter
    def payload(sequence_id: int, depth: int) -> bytes:
        text = json.dumps({**CASES["good"][0], "sequence_id": sequence_id}, default=float)
        return (text[:-1] + ', "extra": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}").encode()

    world.invoke(lambda_event(records_from_payloads([("3000", payload(1, 3))])))  # what a first call imports, imported
    # When each of the other two arrives in its own batch, the stack the handler reaches measured
    deepest = {}
    for sequence_id, depth in ((2, 3), (3, MAX_JSON_DEPTH)):
        with deepest_stack() as probe:
            assert world.invoke(lambda_event(records_from_payloads([("3000", payload(sequence_id, depth))]))) == {"batchItemFailures": []}
        deepest[depth] = probe.deepest
    # Then all three are applied, and the deep one stacked no more frames than the shallow one (give or take the odd
    # finalizer): nothing after the parser walks the document level by level, so no interpreter's recursion limit is
    # nearer for it
    view = world.view()
    assert view.rejects == {}
    assert [message.sequence_id for message in view.runs[RUN_A].archived] == [1, 2, 3]
    assert deepest[MAX_JSON_DEPTH] <= deepest[3] + 3, deepest
