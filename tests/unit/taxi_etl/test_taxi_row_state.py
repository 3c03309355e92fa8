"""What became of one row (runtime/taxi_etl/row_state.py and the GET handler's mapping), from the
status rows and trips item that the phases and the flag step leave behind."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from runtime.shared.dynamo import from_attributes, to_attributes
from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl import row_state_handler
from runtime.taxi_etl.errors import StoreUnavailable
from runtime.taxi_etl.final_table import DynamoRowReader
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.row_state import RowState, State, parse_row_id, row_state
from runtime.taxi_etl.row_state_wiring import RowStateDeps
from runtime.taxi_etl.store import StatusRow
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from tests.events.loader import load_event

ID = "k-load-2019-10-row-1"
# A real row of the sample whose total is 1.95 above its columns (tests/data/taxi_etl/README.md).
LINE = "2,2019-10-23T16:32:30.000,2019-10-23T16:54:57.000,1,2.39,1,N,261,211,1,15.5,1,0.5,3.96,0,0.3,25.71,2.5"
# What Transform hands Store (Store's status row keeps it as RawTuple), and the item Store writes,
# as DynamoDB gives it back (numbers as Decimal).
_validated = validate_line(LINE)
assert isinstance(_validated, Accepted)
_transformed = transform_tuple(_validated.tuple)
assert isinstance(_transformed, Accepted)
STORE_TUPLE = _transformed.tuple
TRIP = from_attributes(to_attributes(final_item(ID, STORE_TUPLE)))


def ok(phase: Phase, **changes: Any) -> StatusRow:
    raw = STORE_TUPLE if phase is Phase.STORE else f"{phase.value} tuple"
    return StatusRow(ID, **{"raw_tuple": raw, "reason": 0, **changes})


def flagged(phase: Phase, detail: str, **changes: Any) -> StatusRow:
    return StatusRow(ID, raw_tuple="t", reason=int(phase.reason), detail=detail, message=f"{detail}: why", **changes)


def rows(*present: tuple[Phase, StatusRow]) -> dict[Phase, StatusRow | None]:
    status: dict[Phase, StatusRow | None] = dict.fromkeys(Phase, None)
    status.update(dict(present))
    return status


def all_passed(**store_changes: Any) -> dict[Phase, StatusRow | None]:
    """The three status rows at reason 0, as after a clean pass."""
    return rows(*((phase, ok(phase, **(store_changes if phase is Phase.STORE else {}))) for phase in Phase))


def test_no_status_row_is_unknown() -> None:
    # Given an id no phase has seen (and no trips item)
    # When its state is read
    # Then there is none
    assert row_state(ID, rows(), None) is None


def test_a_content_id_with_its_trips_item_and_no_status_row_is_stored() -> None:
    # Given a content id a bulk load's chunk stored: its trips item, and no status row (a chunk writes none for a
    # row it stores)
    content = content_id(LINE)
    item = from_attributes(to_attributes(final_item(content, STORE_TUPLE)))
    # When its state is read
    state = row_state(content, rows(), item)
    clean_pass = row_state(content, all_passed(), item)
    # Then it is stored, its findings and trip read from the item, as a clean pass of /trips/batch answers
    assert state is not None and clean_pass is not None
    assert state.to_json() == clean_pass.to_json()
    assert (state.state, state.generation, state.findings) == (State.STORED, 1, ("total_amount_mismatch",))


def test_a_keyed_id_with_only_a_trips_item_is_unknown_and_with_a_status_row_pending() -> None:
    # Given a keyed id whose trips item is there but no status row (a key names whatever was sent under it)
    # When its state is read with no status row, then with only its validation row
    alone = row_state(ID, rows(), TRIP)
    begun = row_state(ID, rows((Phase.VALIDATION, ok(Phase.VALIDATION))), TRIP)
    # Then nothing says the item is its own: unknown, then pending, as before
    assert alone is None
    assert begun is not None and begun.state is State.PENDING


@pytest.mark.parametrize("reached", list(Phase))
def test_a_row_between_phases_is_pending_at_the_last_phase_it_reached(reached: Phase) -> None:
    # Given status rows (reason 0) up to `reached`, and no trips item yet
    present = [(phase, ok(phase)) for phase in Phase][: list(Phase).index(reached) + 1]
    # When its state is read
    state = row_state(ID, rows(*present), None)
    # Then it is pending there
    assert state == RowState(ID, State.PENDING, phase=reached)
    assert state.to_json() == {"StoreRequestId": ID, "state": "pending", "generation": 1, "phase": reached.value}


def test_a_stored_row_reports_its_findings_and_unexplained_amount_without_floats() -> None:
    # Given all three status rows at reason 0 and the trips item Store made from its row's tuple
    state = row_state(ID, all_passed(), TRIP)
    # When it is mapped to JSON
    assert state is not None
    body = state.to_json()
    # Then it is stored, with its findings, and amounts as strings (ints stay ints)
    assert body == {
        "StoreRequestId": ID,
        "state": "stored",
        "generation": 1,
        "findings": ["total_amount_mismatch"],
        "unexplainedAmount": "1.95",
        "trip": {
            "pickup_at": "2019-10-23T20:32:30Z",
            "dropoff_at": "2019-10-23T20:54:57Z",
            "pu_location_id": 261,
            "do_location_id": 211,
            "trip_seconds": 1347,
            "total_amount": "25.71",
        },
    }


def test_a_stored_row_without_findings_has_an_empty_list_and_no_unexplained_amount() -> None:
    # Given a clean trip (its columns add up to its total), stored
    tuple_ = STORE_TUPLE.replace("\t25.71\t", "\t23.76\t")
    trip = from_attributes(to_attributes(final_item(ID, tuple_)))
    assert "findings" not in trip and "unexplained_amount" not in trip
    # When its state is read
    state = row_state(ID, all_passed(raw_tuple=tuple_), trip)
    # Then it is stored with no findings and no unexplained amount
    assert state is not None and state.state is State.STORED
    assert (state.to_json()["findings"], state.to_json()["unexplainedAmount"], state.to_json()["trip"]["total_amount"]) == (
        [],
        None,
        "23.76",
    )


def test_a_trips_item_that_is_not_the_rows_own_does_not_count_as_stored() -> None:
    # Given the store row at reason 0 with this row's tuple, and under the id another trip (another
    # transaction of the id stored it first: Store is about to flag this one as a StoreConflict)
    other = from_attributes(to_attributes(final_item(ID, STORE_TUPLE.replace("\t261\t211\t", "\t262\t211\t"))))
    # When its state is read
    state = row_state(ID, all_passed(), other)
    # Then the row is pending in store, not stored
    assert state == RowState(ID, State.PENDING, phase=Phase.STORE)


@pytest.mark.parametrize("raw_tuple", [None, "not\ta\ttuple"], ids=["no-raw-tuple", "malformed-tuple"])
def test_a_store_row_whose_tuple_makes_no_item_does_not_count_as_stored(raw_tuple: str | None) -> None:
    # Given a store row whose tuple Store cannot turn into an item (it flags such a row malformed_tuple)
    state = row_state(ID, all_passed(raw_tuple=raw_tuple), TRIP)
    # Then the row is not stored: it is pending in store until flagged
    assert state is not None and (state.state, state.phase) == (State.PENDING, Phase.STORE)


def test_an_item_of_the_earlier_layout_is_the_rows_own_trip() -> None:
    # Given the item an earlier version stored (no item_version, no charges nor findings) for this tuple
    legacy = {name: value for name, value in TRIP.items() if name not in ("item_version", "charges", "findings", "unexplained_amount")}
    # When its state is read
    state = row_state(ID, all_passed(), legacy)
    # Then it is stored (same trip across layouts, as the store phase itself decides), without findings
    assert state is not None and (state.state, state.findings, state.unexplained_amount) == (State.STORED, (), None)


@pytest.mark.parametrize("phase", list(Phase))
def test_a_flagged_row_reports_its_phase_reason_detail_and_message(phase: Phase) -> None:
    # Given the flag step set `phase`'s reason in every table the transaction touched
    touched = [(p, flagged(phase, "dropoff_before_pickup")) for p in phase.touched]
    # When its state is read
    state = row_state(ID, rows(*touched), None)
    # Then it is flagged in that phase, with the detail and message the flag step wrote
    assert state is not None
    assert state.to_json() == {
        "StoreRequestId": ID,
        "state": "flagged",
        "generation": 1,
        "phase": phase.value,
        "reason": int(phase.reason),
        "detail": "dropoff_before_pickup",
        "message": "dropoff_before_pickup: why",
        "retryable": False,  # a verdict on the row (a `retryable:<error>` detail would say True)
    }


def test_a_store_conflict_is_flagged_even_though_a_trips_item_exists() -> None:
    # Given a different item already under the id: the store phase was flagged, the item is someone else's
    status = rows(*((p, flagged(Phase.STORE, "error:StoreConflict")) for p in Phase))
    # When its state is read
    state = row_state(ID, status, TRIP)
    # Then it is flagged in store, not stored
    assert state is not None and (state.state, state.phase, state.detail) == (State.FLAGGED, Phase.STORE, "error:StoreConflict")


def test_a_redriven_row_is_pending_in_its_new_generation_until_it_ends() -> None:
    # Given a redrive cleared the validation flag (generation 2, its execution not started yet),
    # and removed the later phases' rows
    state = row_state(ID, rows((Phase.VALIDATION, ok(Phase.VALIDATION, generation=2, pending=True))), None)
    # Then the row is pending in validation, generation 2
    assert state == RowState(ID, State.PENDING, phase=Phase.VALIDATION, generation=2)


def test_a_redriven_row_still_pending_with_its_trip_and_store_row_is_not_yet_stored() -> None:
    # Given the validation row still marked RedrivePending (its generation's start not yet confirmed)
    status = all_passed()
    status[Phase.VALIDATION] = ok(Phase.VALIDATION, generation=2, pending=True)
    # When its state is read, though the store row and the trip are there
    state = row_state(ID, status, TRIP)
    # Then it stays pending until the redrive has confirmed its execution
    assert state is not None and (state.state, state.generation) == (State.PENDING, 2)


def test_a_redriven_row_that_ends_stored_reports_its_generation() -> None:
    # Given generation 2 passed every phase and stored the trip (the redrive's pending mark removed)
    status = all_passed()
    status[Phase.VALIDATION] = ok(Phase.VALIDATION, generation=3)
    # When its state is read
    state = row_state(ID, status, TRIP)
    # Then it is stored, in that generation
    assert state is not None and state.to_json()["state"] == "stored" and state.to_json()["generation"] == 3


def test_a_redriven_row_flagged_again_is_flagged_in_its_new_generation() -> None:
    # Given a redrive whose execution Validate rejected again
    state = row_state(ID, rows((Phase.VALIDATION, flagged(Phase.VALIDATION, "dropoff_before_pickup", generation=2))), None)
    # Then the row is flagged in validation, generation 2
    assert state is not None and (state.state, state.phase, state.reason, state.generation) == (State.FLAGGED, Phase.VALIDATION, 1, 2)


def test_a_trips_item_before_the_store_row_does_not_count_as_stored() -> None:
    # Given only the validation row, and a trips item already there (a table shared with another writer)
    state = row_state(ID, rows((Phase.VALIDATION, ok(Phase.VALIDATION))), TRIP)
    # Then the row is still pending: stored means the store phase wrote its row too
    assert state is not None and state.state is State.PENDING


@pytest.mark.parametrize(
    "row_id",
    [
        "k-load-1",
        "k-" + "K" * 64,  # the longest key
        "k-b-load-1",  # a single row's key may look like a batch row's
        "kb-load-2",  # row 2 of a batch keyed "load"
        "kb-load-2-1",  # row 1 of a batch keyed "load-2"
        "kb-" + "K" * 64 + "-200",
        content_id("2,2019-10-23T16:32:30.000,2019-10-23T16:54:57.000,1,2.39,1,N,261,211,1,15.5,1,0.5,3.96,0,0.3,25.71,2.5"),
    ],
)
def test_the_ids_the_api_gives_are_accepted(row_id: str) -> None:
    assert parse_row_id(row_id) == row_id


@pytest.mark.parametrize(
    ("row_id", "message"),
    [
        (None, "the path has no StoreRequestId"),
        ("", "the path has no StoreRequestId"),
        ("cb-batchid", "k-<key>, kb-<key>-<n> or c-<hash>"),  # a batch's execution, not a row
        ("r2-k-load-1", "k-<key>, kb-<key>-<n> or c-<hash>"),  # a redrive's execution
        ("k-" + "x" * 79, "at most 80"),
        ("k-" + "x" * 65, "1-64 letters"),  # no Idempotency-Key is that long
        ("k-a b", "letters, digits"),
        ("k-", "k-<key>"),
        ("kb-load", "kb-<key>-<n>"),  # a keyed batch's execution, not a row
        ("kb-load-0", "a line number from 1"),
        ("kb-load-x", "a line number from 1"),
        ("c-0123456789abcdef", "32 hex digits"),  # too short for a content hash
        ("c-" + "A" * 32, "32 hex digits"),  # hexdigest is lower case
        ("x-load-1", "k-<key>"),
    ],
)
def test_a_malformed_id_is_refused_naming_the_shapes(row_id: str | None, message: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        parse_row_id(row_id)


class FakeReader:
    def __init__(self, status: dict[Phase, StatusRow | None], trip: dict[str, Any] | None) -> None:
        self.status, self.trip, self.reads = status, trip, 0

    def read(self, store_request_id: str) -> tuple[dict[Phase, StatusRow | None], dict[str, Any] | None]:
        self.reads += 1
        return self.status, self.trip


def test_the_handler_maps_unknown_to_404_and_reads_once() -> None:
    # Given a reader that knows nothing of the id
    reader = FakeReader(rows(), None)
    # When the id is looked up
    status, body = row_state_handler.lookup(ID, reader)
    # Then 404, naming the id and why it can be unknown, after one read
    assert status == 404 and body["StoreRequestId"] == ID and "no phase has seen this id" in body["error"]
    assert reader.reads == 1


def test_the_handler_refuses_a_malformed_id_before_reading() -> None:
    reader = FakeReader(rows(), None)
    with pytest.raises(InvalidRequest):
        row_state_handler.lookup("../etc", reader)
    assert reader.reads == 0


def test_the_sample_event_resolves_to_the_route_and_answers_from_the_tables() -> None:
    # Given the sample API Gateway event for GET /trips/{StoreRequestId}, and a stored row behind it
    event = load_event("taxi_etl/get_row_state.json")
    reader = FakeReader(all_passed(), TRIP)
    # When the entry point's work runs with that reader injected
    response = row_state_handler.handle(event, None, RowStateDeps(reader))  # type: ignore[arg-type]
    # Then it answers 200 with the stored state of the id in the path
    assert response["statusCode"] == 200
    assert '"state": "stored"' in response["body"] and f'"StoreRequestId": "{ID}"' in response["body"]


class UnprocessedFirst:
    """A BatchGetItem stub: leaves the trips table's key unprocessed `times` times, then answers it."""

    def __init__(self, times: int) -> None:
        self.times, self.requests = times, []  # type: ignore[var-annotated]

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        self.requests.append(sorted(RequestItems))
        responses = {table: [{"StoreRequestId": {"S": ID}, "StatusReason": {"N": "0"}}] for table in RequestItems if table != "trips"}
        if "trips" in RequestItems and self.times:
            self.times -= 1
            return {"Responses": responses, "UnprocessedKeys": {"trips": RequestItems["trips"]}}
        if "trips" in RequestItems:
            responses["trips"] = [{"StoreRequestId": {"S": ID}, "total_amount": {"N": "25.71"}}]
        return {"Responses": responses, "UnprocessedKeys": {}}


TABLES = {Phase.VALIDATION: "validation", Phase.TRANSFORMATION: "transformation", Phase.STORE: "store"}


def test_the_reader_asks_again_for_what_dynamodb_left_unprocessed() -> None:
    # Given DynamoDB leaves the trips key unprocessed once
    client = UnprocessedFirst(times=1)
    # When the row is read
    status, trip = DynamoRowReader(TABLES, "trips", client=client).read(ID)  # type: ignore[arg-type]
    # Then the second call asks only for the trips key, and the row is complete
    assert client.requests == [["store", "transformation", "trips", "validation"], ["trips"]]
    assert all(row is not None and row.reason == 0 for row in status.values())
    assert trip == {"StoreRequestId": ID, "total_amount": Decimal("25.71")}


def test_the_reader_gives_up_when_a_key_stays_unprocessed() -> None:
    with pytest.raises(StoreUnavailable, match="left 1 keys unprocessed after 5 rounds"):
        DynamoRowReader(TABLES, "trips", client=UnprocessedFirst(times=99)).read(ID)  # type: ignore[arg-type]
