"""GET /trips/{StoreRequestId} end to end on the embedded cloud: rows go through the API and the
synthesized state machine, then each id is read back through the deployed GET entry point, with
the read-only function's synthesized environment. The answer must agree with the tables."""

from __future__ import annotations

from typing import Any

from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, TaxiWorld
from runtime.shared.dynamo import to_attributes
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from tests.integration.taxi_etl.test_taxi_redrive import flagged_at_store, redrive

LINES = sample_lines()
# Real rows of the sample that the store keeps with a finding (tests/data/taxi_etl/README.md).
MISMATCH_TOTAL = "2,2019-10-23T16:32:30.000,2019-10-23T16:54:57.000,1,2.39,1,N,261,211,1,15.5,1,0.5,3.96,0,0.3,25.71,2.5"


def test_each_row_of_a_batch_reads_back_as_stored_or_flagged_in_its_phase(saga: TaxiWorld) -> None:
    # Given a batch with two good rows, one row Validate rejects and one Transform rejects
    lines = [LINES[0], bad_at_validation(LINES[1]), bad_at_transformation(LINES[2]), LINES[3]]
    status, body = saga.post("/trips/batch", "\n".join(lines))
    assert status == 202
    good_a, bad_validation, bad_transformation, good_b = body["StoreRequestIds"]
    # When each id is read back
    answers = {row_id: saga.get_row(row_id) for row_id in body["StoreRequestIds"]}
    # Then the good rows are stored with their trip, and each bad one is flagged in its phase
    assert all(status == 200 for status, _ in answers.values())
    stored = saga.final_items()
    for row_id in (good_a, good_b):
        answer = answers[row_id][1]
        assert (answer["state"], answer["findings"], answer["unexplainedAmount"]) == ("stored", [], None)
        assert answer["trip"]["total_amount"] == str(stored[row_id]["total_amount"])
        assert answer["trip"]["pickup_at"] == stored[row_id]["pickup_at"]
    assert {name: answers[bad_validation][1][name] for name in ("state", "phase", "reason", "detail")} == {
        "state": "flagged",
        "phase": "validation",
        "reason": 1,
        "detail": "dropoff_before_pickup",
    }
    assert answers[bad_validation][1]["message"]
    assert {name: answers[bad_transformation][1][name] for name in ("state", "phase", "reason", "detail")} == {
        "state": "flagged",
        "phase": "transformation",
        "reason": 2,
        "detail": "nonexistent_local_time",
    }


def test_a_stored_row_with_a_finding_reports_it(saga: TaxiWorld) -> None:
    # Given a real trip whose total is 1.95 above its columns
    _, body = saga.post("/trips", MISMATCH_TOTAL)
    # When it is read back
    status, answer = saga.get_row(body["StoreRequestId"])
    # Then it is stored, with its finding and the unexplained amount to the cent
    assert status == 200
    assert (answer["state"], answer["findings"], answer["unexplainedAmount"]) == ("stored", ["total_amount_mismatch"], "1.95")
    assert answer["trip"] == {
        "pickup_at": saga.final_items()[body["StoreRequestId"]]["pickup_at"],
        "dropoff_at": saga.final_items()[body["StoreRequestId"]]["dropoff_at"],
        "pu_location_id": 261,
        "do_location_id": 211,
        "trip_seconds": 1347,
        "total_amount": "25.71",
    }


def test_an_unknown_id_is_404_and_a_malformed_one_400(saga: TaxiWorld) -> None:
    # Given an id nobody sent, and a path segment that is no id
    # When they are read
    unknown_status, unknown = saga.get_row(content_id(LINES[0]))
    malformed_status, malformed = saga.get_row("cb-0123")
    # Then 404 for the unknown id, 400 naming the id shapes for the other
    assert unknown_status == 404 and "no phase has seen this id" in unknown["error"]
    assert malformed_status == 400 and "k-<key>, kb-<key>-<n> or c-<hash>" in malformed["error"]


def test_a_row_flagged_at_store_reads_flagged_then_stored_after_a_redrive(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store while the trips table refused writes
    (row_id,) = flagged_at_store(saga, LINES[:1])
    status, before = saga.get_row(row_id)
    assert status == 200
    assert (before["state"], before["phase"], before["reason"], before["detail"], before["generation"]) == (
        "flagged",
        "store",
        3,
        "error:ClientError",
        1,
    )
    # When the table is fixed and the operator redrives it
    assert redrive(saga) == 0
    capsys.readouterr()
    # Then the same id reads stored, in its second generation
    status, after = saga.get_row(row_id)
    assert (status, after["state"], after["generation"]) == (200, "stored", 2)


def test_a_row_mid_saga_reads_pending_at_the_phase_it_reached(saga: TaxiWorld) -> None:
    # Given a look at the row just before its Transform and its Store tasks are invoked
    seen: dict[str, tuple[str, str]] = {}

    def look_before_each_phase(handler: str, attempt: int) -> None:
        if attempt == 1 and handler.endswith(("transform_handler.handler", "store_handler.handler")):
            answer = saga.get_row(content_id(LINES[0]))[1]
            seen[handler.rsplit(".", 2)[-2]] = (answer["state"], answer["phase"])

    saga.invocations.before = look_before_each_phase
    # When it is posted, and read while it goes through the saga
    _, body = saga.post("/trips", LINES[0])
    # Then it read pending in validation before Transform, in transformation before Store, and reads stored now
    assert seen == {"transform_handler": ("pending", "validation"), "store_handler": ("pending", "transformation")}
    assert saga.get_row(body["StoreRequestId"])[1]["state"] == "stored"


def test_a_row_whose_id_holds_another_trip_reads_pending_then_flagged_as_a_store_conflict(saga: TaxiWorld) -> None:
    # Given another trip already under the keyed id a line will get (a trips table shared with another writer;
    # a content id names its one trip, so only a key can name another)
    row_id = "k-shared-key"
    validated = validate_line(LINES[1])
    assert isinstance(validated, Accepted)
    transformed = transform_tuple(validated.tuple)
    assert isinstance(transformed, Accepted)
    trips_table = saga.environment(FLAG_HANDLER)["FINAL_TABLE"]
    saga.dynamodb.put_item(TableName=trips_table, Item=to_attributes(final_item(row_id, transformed.tuple)))
    seen: list[tuple[str, str]] = []

    def look_before_flag(handler: str, attempt: int) -> None:
        if attempt == 1 and handler == FLAG_HANDLER:
            answer = saga.get_row(row_id)[1]
            seen.append((answer["state"], answer["phase"]))

    saga.invocations.before = look_before_flag
    # When the line is sent, and its id read just before the store's flag step and after it
    status, _ = saga.post("/trips", LINES[0], idempotency_key="shared-key")
    assert status == 202
    status, after = saga.get_row(row_id)
    # Then it read pending in store while its store was unresolved (the item there is not its own),
    # and reads flagged at store as a conflict once flagged
    assert seen == [("pending", "store")]
    assert (status, after["state"], after["phase"], after["reason"], after["detail"]) == (200, "flagged", "store", 3, "error:StoreConflict")
