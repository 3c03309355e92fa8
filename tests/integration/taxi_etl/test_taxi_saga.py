"""The taxi saga end to end on the embedded cloud: the API entry point, then the state machine
definition taken from the synthesized template, executed by moto, with its Lambda tasks routed to
the in-process phase handlers (settings from their synthesized environments).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools.aws.template_resources import find_function
from devtools.taxi_rows import SAMPLE, bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TRANSFORM_HANDLER, VALIDATE_HANDLER, TaxiWorld, state_transitions
from runtime.shared.dynamo import to_attributes
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from runtime.taxi_etl.trips import Reason

LINES = sample_lines()
GOOD = LINES[0]
SAMPLE_DIR = SAMPLE.parent
HEADER = (  # the open-data export's header line
    "vendorid,tpep_pickup_datetime,tpep_dropoff_datetime,passenger_count,trip_distance,ratecodeid,store_and_fwd_flag,"
    "pulocationid,dolocationid,payment_type,fare_amount,extra,mta_tax,tip_amount,tolls_amount,improvement_surcharge,"
    "total_amount,congestion_surcharge"
)


def expected_item(store_request_id: str, line: str) -> dict[str, Any]:
    """What one clean pass of the row logic stores, computed without the saga."""
    validated = validate_line(line)
    assert isinstance(validated, Accepted)
    transformed = transform_tuple(validated.tuple)
    assert isinstance(transformed, Accepted)
    return final_item(store_request_id, transformed.tuple)


def reasons(world: TaxiWorld, store_request_id: str) -> dict[Phase, int]:
    """StatusReason of the row in each status table that has it."""
    return {phase: int(rows[store_request_id]["StatusReason"]) for phase, rows in world.status_rows().items() if store_request_id in rows}


def test_a_good_row_sent_to_the_api_ends_in_the_trips_table(saga: TaxiWorld) -> None:
    # Given one real trip line
    # When it is posted to the single-row route
    status, body = saga.post("/trips", GOOD + "\r\n")
    # Then the API accepted it under its content id, and its execution succeeded through the three phases
    assert status == 202
    assert body == {"StoreRequestId": content_id(GOOD), "execution": content_id(GOOD), "duplicate": False}
    execution = saga.describe(body["execution"])
    assert execution["status"] == "SUCCEEDED"
    entered = [e["stateEnteredEventDetails"]["name"] for e in saga.history(body["execution"]) if e["type"].endswith("StateEntered")]
    assert entered == ["Validation", "ValidationRejects", "Transformation", "TransformationRejects", "Store", "StoreRejects", "Stored"]
    assert state_transitions(saga.history(body["execution"])) == 7
    # and the trips table holds exactly its typed item, and every status table says reason 0
    assert saga.final_items() == {body["StoreRequestId"]: expected_item(body["StoreRequestId"], GOOD)}
    assert reasons(saga, body["StoreRequestId"]) == {Phase.VALIDATION: 0, Phase.TRANSFORMATION: 0, Phase.STORE: 0}
    stored = saga.final_items()[body["StoreRequestId"]]
    assert stored["pickup_at"] == "2019-10-23T20:39:42Z" and stored["vendor"] == "VeriFone Inc."
    # and the store status row keeps the transformed (tab-separated) tuple, the others their input
    rows = saga.status_rows()
    assert rows[Phase.VALIDATION][body["StoreRequestId"]]["RawTuple"] == GOOD
    assert "\t" in rows[Phase.STORE][body["StoreRequestId"]]["RawTuple"]


@pytest.mark.parametrize(
    ("corrupt", "phase", "detail", "tables"),
    [
        (bad_at_validation, Phase.VALIDATION, "dropoff_before_pickup", (Phase.VALIDATION,)),
        (bad_at_transformation, Phase.TRANSFORMATION, "nonexistent_local_time", (Phase.VALIDATION, Phase.TRANSFORMATION)),
    ],
)
def test_a_row_rejected_by_a_phase_is_flagged_with_that_phase_reason_in_every_table_it_touched(
    saga: TaxiWorld, corrupt: Any, phase: Phase, detail: str, tables: tuple[Phase, ...]
) -> None:
    # Given a real line corrupted so that `phase` rejects it
    line = corrupt(GOOD)
    # When it is posted
    status, body = saga.post("/trips", line)
    store_request_id = body["StoreRequestId"]
    # Then the execution failed in that phase's Fail state, with its reason as the cause
    assert status == 202
    execution = saga.describe(body["execution"])
    assert execution["status"] == "FAILED"
    assert execution["error"] == phase.failure_name
    assert detail in execution["cause"]
    # and the same reason code sits in every status table the transaction touched, and in no other
    assert reasons(saga, store_request_id) == dict.fromkeys(tables, int(phase.reason))
    for table in tables:
        assert saga.status_rows()[table][store_request_id]["StatusDetail"] == detail
    # and nothing reached the trips table
    assert saga.final_items() == {}


def test_a_row_whose_store_write_keeps_failing_is_flagged_in_all_three_tables(saga: TaxiWorld) -> None:
    # Given the trips table refuses every write (as with a missing grant or a deleted table)
    trips_table = saga.environment(STORE_HANDLER)["FINAL_TABLE"]

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == trips_table:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"}}, "PutItem")

    saga.dynamodb.meta.events.register("before-parameter-build.dynamodb.PutItem", refuse)
    # When a good row is posted
    _, body = saga.post("/trips", GOOD)
    # Then the Store task ran once and was retried twice by the workflow (the waits are its backoff)
    assert Counter(saga.invocations.calls)[STORE_HANDLER] == 3
    assert len(saga.retry_waits) == 2
    # and the Catch routed to the store flag step: reason 3 in all three tables, no trips item
    execution = saga.describe(body["execution"])
    assert (execution["status"], execution["error"]) == ("FAILED", "StoreFailed")
    assert reasons(saga, body["StoreRequestId"]) == dict.fromkeys(Phase, int(Reason.STORE))
    assert saga.status_rows()[Phase.STORE][body["StoreRequestId"]]["StatusDetail"] == "error:ClientError"
    assert saga.final_items() == {}


@pytest.mark.parametrize(
    ("field", "lines", "choice", "instead"),
    [
        # moto alone took the Default: on to Transformation and Store, the row stored, the execution succeeded
        ("hasRejected", [GOOD], "ValidationRejects", "Transformation"),
        # moto alone took the Default: ValidationFailed, with the good row never transformed
        ("hasPassed", [GOOD, bad_at_validation(LINES[1])], "AfterFlagValidation", "ValidationFailed"),
    ],
)
def test_a_phase_result_without_a_field_its_choice_reads_fails_the_execution_with_states_runtime(
    saga: TaxiWorld, field: str, lines: list[str], choice: str, instead: str
) -> None:
    # Given the Validation phase answering without `field` (a regression in its result's shape), which a Choice reads
    validation = find_function(saga.template, VALIDATE_HANDLER)
    validate = saga.routes[validation]
    saga.routes[validation] = lambda event: {name: value for name, value in validate(event).items() if name != field}
    # When the lines are posted
    _, body = saga.post("/trips/batch", "\n".join(lines))
    # Then the execution failed in that Choice with States.Runtime naming the path, as on AWS
    execution = saga.describe(body["execution"])
    assert (execution["status"], execution["error"]) == ("FAILED", "States.Runtime")
    assert f"Invalid path '$.{field}': The choice state's condition path references an invalid value." in execution["cause"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in saga.history(body["execution"]) if e["type"].endswith("StateEntered")]
    assert entered[-1] == choice and instead not in entered
    # and no later phase ran and nothing was stored
    assert TRANSFORM_HANDLER not in saga.invocations.calls and STORE_HANDLER not in saga.invocations.calls
    assert saga.final_items() == {}


def test_a_different_item_already_under_the_id_is_a_store_failure_and_stays_untouched(saga: TaxiWorld) -> None:
    # Given the trips table already holds another trip under the id this request will use
    other = expected_item("k-reused", LINES[1])
    saga.dynamodb.put_item(TableName=saga.environment(STORE_HANDLER)["FINAL_TABLE"], Item=to_attributes(other))
    # When a different line is sent with that id's Idempotency-Key
    _, body = saga.post("/trips", GOOD, idempotency_key="reused")
    # Then the store phase failed on the conflict, the row is flagged 3, and the stored trip is unchanged
    assert saga.describe(body["execution"])["error"] == "StoreFailed"
    assert reasons(saga, "k-reused") == dict.fromkeys(Phase, int(Reason.STORE))
    assert saga.status_rows()[Phase.STORE]["k-reused"]["StatusDetail"] == "error:StoreConflict"
    assert saga.final_items() == {"k-reused": other}


def test_the_same_request_twice_is_one_execution_and_one_trip(saga: TaxiWorld) -> None:
    # Given a line that was posted and processed
    first_status, first = saga.post("/trips", GOOD)
    calls_after_first = len(saga.invocations.calls)
    # When the client retries it, once as sent and once with LF instead of CRLF
    again_status, again = saga.post("/trips", GOOD)
    lf_status, lf = saga.post("/trips", GOOD + "\n")
    # Then both retries name the same StoreRequestId, are reported as duplicates and start nothing
    assert (first_status, again_status, lf_status) == (202, 200, 200)
    assert first["StoreRequestId"] == again["StoreRequestId"] == lf["StoreRequestId"]
    assert again["duplicate"] is True
    assert len(saga.executions()) == 1
    assert len(saga.invocations.calls) == calls_after_first
    assert list(saga.final_items()) == [first["StoreRequestId"]]


def test_an_idempotency_key_reused_for_another_line_is_refused(saga: TaxiWorld) -> None:
    # Given a line sent with an Idempotency-Key
    status, body = saga.post("/trips", GOOD, idempotency_key="order-17")
    assert (status, body["StoreRequestId"]) == (202, "k-order-17")
    # When another line comes with the same key
    status, refusal = saga.post("/trips", LINES[1], idempotency_key="order-17")
    # Then it is refused with 422 and a clear message, and the first trip is the one stored
    assert status == 422
    assert "different request" in refusal["error"]
    assert len(saga.executions()) == 1
    assert saga.final_items() == {"k-order-17": expected_item("k-order-17", GOOD)}


def test_a_batch_stores_its_good_rows_and_flags_each_bad_one_in_its_own_phase(saga: TaxiWorld) -> None:
    # Given 40 real lines, one repeated, one bad at validation and one bad at transformation
    good = LINES[10:50]
    rejected_at_validation, rejected_at_transformation = bad_at_validation(LINES[60]), bad_at_transformation(LINES[61])
    batch = [*good, good[0], rejected_at_validation, rejected_at_transformation]
    # When the batch (with its header line) is posted
    status, body = saga.post("/trips/batch", "\n".join([HEADER, *batch]))
    # Then there is one id per data line, the repeated line has its first line's id, and one execution ran
    assert status == 202
    ids = body["StoreRequestIds"]
    assert ids == [content_id(line) for line in batch] and ids[40] == ids[0] and body["skippedHeader"] is True
    assert len(saga.executions()) == 1
    # and it succeeded: its good rows are all stored, each once, and only those
    assert saga.describe(body["execution"])["status"] == "SUCCEEDED"
    assert saga.final_items() == {content_id(line): expected_item(content_id(line), line) for line in good}
    # and each bad row is flagged in its own phase's tables with its own reason
    assert reasons(saga, content_id(rejected_at_validation)) == {Phase.VALIDATION: 1}
    assert reasons(saga, content_id(rejected_at_transformation)) == {Phase.VALIDATION: 2, Phase.TRANSFORMATION: 2}
    # and the whole batch took one flag step per rejecting phase
    assert Counter(saga.invocations.calls)[FLAG_HANDLER] == 2


def test_a_batch_of_only_bad_rows_fails_in_validation(saga: TaxiWorld) -> None:
    # Given a batch whose every line fails validation
    lines = [bad_at_validation(line) for line in LINES[:3]]
    # When it is posted
    _, body = saga.post("/trips/batch", "\n".join(lines))
    # Then the execution fails in validation after flagging all three, and nothing is stored
    execution = saga.describe(body["execution"])
    assert execution["error"] == "ValidationFailed"
    assert execution["cause"].startswith("3 row(s) flagged in validation status")
    assert all(reasons(saga, content_id(line)) == {Phase.VALIDATION: 1} for line in lines)
    assert saga.final_items() == {}


def test_a_row_flagged_before_stays_flagged_when_it_comes_again_in_a_batch(saga: TaxiWorld) -> None:
    # Given a line flagged at transformation by its own execution
    line = bad_at_transformation(GOOD)
    saga.post("/trips", line)
    # When the same line arrives again inside a batch with a good line
    _, body = saga.post("/trips/batch", "\n".join([line, LINES[1]]))
    # Then the batch stores the good line, and the flagged row keeps its reason (never cleared to 0)
    assert saga.describe(body["execution"])["status"] == "SUCCEEDED"
    assert reasons(saga, content_id(line)) == {Phase.VALIDATION: 2, Phase.TRANSFORMATION: 2}
    assert set(saga.final_items()) == {content_id(LINES[1])}


def test_execution_input_is_the_rows_and_their_ids(saga: TaxiWorld) -> None:
    # Given a posted line
    _, body = saga.post("/trips", GOOD)
    # When we read what the execution was started with
    execution_input = json.loads(saga.describe(body["execution"])["input"])
    # Then it is the row under its StoreRequestId (the state machine's documented input)
    assert execution_input == {"rows": [{"StoreRequestId": body["StoreRequestId"], "tuple": GOOD}]}


# The rows of the sample the store phase finds odd: three totals 1.95 above their columns, one zero-length trip.
ODD_ROWS = (729, 873, 1170, 1900)


def test_the_sample_s_odd_rows_and_their_batches_are_stored_with_their_findings(saga: TaxiWorld) -> None:
    # Given the four batches of 100 real rows (header first, as the portal exports them) that hold the sample's odd rows
    # (all 2,000 rows go through the same row logic in test_bulk_load.py's whole-sample load)
    batches = [LINES[start : start + 100] for start in sorted({row // 100 * 100 for row in ODD_ROWS})]
    # When every batch is posted
    for batch in batches:
        status, _ = saga.post("/trips/batch", "\n".join([HEADER, *batch]))
        assert status == 202
    # Then every execution succeeded and every row is a trip, as one clean pass of the row logic stores it
    assert {saga.describe(execution["name"])["status"] for execution in saga.executions()} == {"SUCCEEDED"}
    items = saga.final_items()
    assert items == {content_id(line): expected_item(content_id(line), line) for batch in batches for line in batch}
    assert all(int(row["StatusReason"]) == 0 for rows in saga.status_rows().values() for row in rows.values())
    # and the odd ones carry their findings, and on every stored row the normalized charges sum to the total
    assert {index: items[content_id(LINES[index])]["findings"] for index in ODD_ROWS} == {
        729: ["dropoff_equals_pickup"],
        873: ["total_amount_mismatch"],
        1170: ["total_amount_mismatch"],
        1900: ["total_amount_mismatch"],
    }
    assert sorted(str(item["unexplained_amount"]) for item in items.values() if "unexplained_amount" in item) == ["1.95"] * 3
    assert all(sum(item["charges"].values()) == item["total_amount"] for item in items.values())


def test_every_spelling_of_a_trip_is_stored_once(saga: TaxiWorld) -> None:
    # Given one real trip, and the spellings other clients send of it
    cells = GOOD.split(",")
    tlc_dates = ",".join([cells[0], *(cell.replace("T", " ").removesuffix(".000") for cell in cells[1:3]), *cells[3:]])
    spellings = [GOOD, GOOD + "  ", ",".join(f'"{cell}"' for cell in cells), GOOD + ",", tlc_dates]
    # When each is posted, and then the trip behind a byte-order mark
    answers = [saga.post("/trips", spelling) for spelling in spellings]
    bom_status, bom = saga.post("/trips", "\ufeff" + GOOD)
    # Then the first starts the transaction and the others are its duplicates: one execution, one trip
    assert [status for status, _ in answers] == [202] + [200] * (len(spellings) - 1)
    assert {body["StoreRequestId"] for _, body in answers} == {content_id(GOOD)}
    assert len(saga.executions()) == 1
    assert list(saga.final_items()) == [content_id(GOOD)]
    # and the body with a BOM is no spelling of the trip but a body that is not strict UTF-8 (issue 22): a 400
    assert bom_status == 400 and "byte-order mark" in bom["error"]


def test_a_2020_row_with_empty_codes_is_stored_and_a_2009_row_is_refused_naming_its_layout(saga: TaxiWorld) -> None:
    # Given a 2020 TLC row with empty VendorID, passenger_count, RatecodeID, store_and_fwd_flag and
    # payment_type, and a 2009 row (coordinates, vendor named VTS)
    rows = json.loads((SAMPLE_DIR / "schema_rows.json").read_text(encoding="utf-8"))
    # When both are posted
    stored_status, stored = saga.post("/trips", rows["yellow_2020_empty_codes"]["row"])
    refused_status, refused = saga.post("/trips", rows["yellow_2009"]["row"])
    # Then the 2020 row is a stored trip with its codes unknown, and the 2009 row a 400 that names its layout
    assert stored_status == 202 and saga.describe(stored["execution"])["status"] == "SUCCEEDED"
    item = saga.final_items()[stored["StoreRequestId"]]
    assert "vendor_id" not in item and "payment_type" not in item and item["do_location_id"] == 47
    assert refused_status == 400 and "yellow 2009-2014" in refused["error"]
    assert len(saga.executions()) == 1
