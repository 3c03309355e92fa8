"""The largest request the taxi API accepts, through every state of the real saga on the embedded
cloud with AWS's limits enforced (devtools/aws/service_limits.py): no state passes Step Functions'
262,144 bytes, no invocation Lambda's 6 MB, no body the HTTP API's 10 MB; and one row more is
refused at the edge with a 413 that names the limit, before anything starts.

The widest legal row: a real trip whose passenger_count cell is backslashes (validation blanks an
unusable passenger_count and keeps the trip), so the line takes twice its bytes as JSON, at the
dev API's largest line for 100 lines in 64 KiB. The batch mixes rows Validate rejects (they carry
their whole line on), rows Transform rejects (a time in the spring-forward gap), and good rows,
under the longest Idempotency-Key; the Store task then fails on every attempt with an error whose
cause is as long as a Lambda error's gets, so the Catch and the store flag step run too.

The read route, GET /trips/{id}, answers one row: its state, and for a flagged row the detail and
message of one status row (a rule's message, or the cause Step Functions caught, at most 32,768
characters), for a stored one a few fields of its trip. Whatever a status row holds, DynamoDB's
400 KB item bounds it: at 7 bytes a stored byte in Lambda's result (a control character, escaped
twice), the answer stays under 3 MB, half of Lambda's 6 MB, so it needs no cut; the tests below
read the widest row flagged with the longest cause, and a status row filled to DynamoDB's limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws import service_limits as limits
from devtools.taxi_rows import bad_at_transformation, sample_lines, with_columns
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TaxiWorld, http_api_event
from runtime.shared.dynamo import to_attributes
from runtime.shared.refusals import PayloadTooLarge
from runtime.taxi_etl import contract
from runtime.taxi_etl.contract import ROUTE_TRIP, ROUTE_TRIP_BATCH
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import parse_batch
from runtime.taxi_etl.state_budget import STEP_FUNCTIONS_PAYLOAD_BYTES, state_budget
from runtime.taxi_etl.trip_lines import Accepted, validate_line
from runtime.taxi_etl.trips import Reason

KEY = "K" * 64  # the longest Idempotency-Key: the longest row ids (kb-<key>-<line>)
LINES = sample_lines()
MOTO_ITEM_BYTES = 405_000  # the largest item moto stores (moto/dynamodb/models/dynamo_type.py)


def wide(line: str, width: int) -> str:
    """`line` made exactly `width` bytes by a passenger_count of backslashes (blanked by Validate, the trip kept)."""
    padded = with_columns(line, c3="")
    return with_columns(line, c3="\\" * (width - len(padded.encode())))


def wide_batch(rows: int, width: int) -> list[str]:
    """Mostly good rows, every tenth rejected by Validate (unknown vendor), every seventh by Transform."""
    lines = []
    for index in range(rows):
        line = LINES[index]
        if index % 10 == 9:
            line = with_columns(line, c0="9")
        elif index % 7 == 6:
            line = bad_at_transformation(line)
        lines.append(wide(line, width))
    return lines


def budget_of(lines: list[str]) -> int:
    """The largest state the API's check allows for these lines (past the limit when the API refuses them)."""
    try:
        submission = parse_batch("\n".join(lines), KEY, max_lines=10_000, max_line_bytes=4096)
    except PayloadTooLarge:
        return STEP_FUNCTIONS_PAYLOAD_BYTES + 1
    return state_budget(submission.rows, submission.execution_input()).largest_state


def largest_accepted(width: int) -> list[str]:
    """The most wide rows the dev API takes in one batch: within its 100 lines and 64 KiB, and within the saga's budget."""
    rows = 1
    while rows < 100 and budget_of(wide_batch(rows + 1, width)) <= STEP_FUNCTIONS_PAYLOAD_BYTES:
        rows += 1
    return wide_batch(rows, width)


def state_payloads(history: list[dict[str, Any]]) -> Iterator[tuple[str, int]]:
    """(event type, bytes) of every input, output, task input and task result the execution history holds."""
    for event in history:
        for name, details in event.items():
            if not name.endswith("EventDetails") or not isinstance(details, dict):
                continue
            for field in ("input", "output"):
                if isinstance(details.get(field), str):
                    yield f"{event['type']}.{field}", limits.json_bytes(json.loads(details[field]))


def reasons(status: dict[Phase, dict[str, dict[str, Any]]], store_request_id: str) -> dict[Phase, int]:
    """The row's reason in each phase's status table that has it; `status` is the world's status_rows(), read once."""
    return {phase: int(rows[store_request_id]["StatusReason"]) for phase, rows in status.items() if store_request_id in rows}


@pytest.fixture
def width(saga: TaxiWorld) -> int:
    settings = saga.environment("runtime.taxi_etl.api_handler.handler")
    return int(settings["BATCH_MAX_BYTES"]) // int(settings["BATCH_MAX_LINES"]) - 1  # 100 lines and their line breaks


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
def test_the_largest_accepted_batch_stays_within_every_limit_through_every_state(saga: TaxiWorld, width: int) -> None:
    # Given the largest batch of the widest legal rows the API accepts, and a Store task that fails every attempt with
    # a cause as long as Step Functions keeps (32,768 characters, every other one a quote)
    lines = largest_accepted(width)
    assert all(isinstance(validate_line(line), Accepted) for line in lines if not line.startswith("9,"))
    assert len("\n".join(lines).encode()) <= 65_536 and len(lines) <= 100

    def fail_store(handler: str, attempt: int) -> None:
        if handler == STORE_HANDLER:
            raise RuntimeError('"x' * 10_900)  # its Lambda error JSON, the Cause, is 32,750 characters

    saga.invocations.before = fail_store
    event = http_api_event(ROUTE_TRIP_BATCH, "\n".join(lines), idempotency_key=KEY)
    # When it is posted
    status, body = saga.call_api(event)
    # Then the API took it, its event within the HTTP API's 10 MB and Lambda's 6 MB
    assert status == 202, body
    assert limits.http_api_refusal(event["body"].encode()) is None
    limits.check_lambda_request(event)
    # and the execution went through every phase and every flag step, and ended in the store's Fail state,
    # not in States.DataLimitExceeded
    execution = saga.describe(body["execution"])
    assert (execution["status"], execution["error"]) == ("FAILED", "StoreFailed")
    history = saga.history(body["execution"])
    entered = {e["stateEnteredEventDetails"]["name"] for e in history if e["type"].endswith("StateEntered")}
    assert {"Validation", "FlagValidation", "Transformation", "FlagTransformation", "Store", "FlagStore", "StoreFailed"} <= entered
    # and no state input or output, task input or result came near Step Functions' limit: all within the budget
    # the API checked
    sizes = sorted(state_payloads(history), key=lambda pair: -pair[1])
    assert sizes[0][1] <= budget_of(lines) <= STEP_FUNCTIONS_PAYLOAD_BYTES, sizes[:5]
    # and every row ended stored or flagged in its own phase; none was left in progress
    ids = body["StoreRequestIds"]
    status = saga.status_rows()
    for line, store_request_id in zip(lines, ids, strict=True):
        expected = Reason.VALIDATION if line.startswith("9,") else Reason.TRANSFORMATION if "2019-03-10T02:30" in line else Reason.STORE
        assert set(reasons(status, store_request_id).values()) == {int(expected)}, store_request_id


def test_the_largest_accepted_batch_stores_every_good_row(saga: TaxiWorld, width: int) -> None:
    # Given the largest batch of the widest legal rows the API accepts, all good
    lines = [wide(line, width) for line in LINES[: len(largest_accepted(width))]]
    # When it is posted
    status, body = saga.post(ROUTE_TRIP_BATCH, "\n".join(lines), idempotency_key=KEY)
    # Then every row is stored, through the Succeed state
    assert status == 202 and saga.describe(body["execution"])["status"] == "SUCCEEDED"
    assert set(saga.final_items()) == set(body["StoreRequestIds"])
    measured = max(size for _, size in state_payloads(saga.history(body["execution"])))
    assert measured <= STEP_FUNCTIONS_PAYLOAD_BYTES


def test_one_row_more_is_refused_at_the_edge_naming_the_limit_and_nothing_starts(saga: TaxiWorld, width: int) -> None:
    # Given the largest accepted batch of the widest rows with one more row
    lines = wide_batch(len(largest_accepted(width)) + 1, width)
    assert len(lines) <= 100 and len("\n".join(lines).encode()) <= 65_536  # within the line and byte limits
    # When it is posted
    status, body = saga.post(ROUTE_TRIP_BATCH, "\n".join(lines), idempotency_key=KEY)
    # Then the API answers 413 naming Step Functions' limit, and no execution started, no row was written
    assert status == 413
    assert "Step Functions" in body["error"] and str(STEP_FUNCTIONS_PAYLOAD_BYTES) in body["error"]
    assert saga.executions() == []
    assert all(rows == {} for rows in saga.status_rows().values())


def test_the_widest_single_row_passes_every_state(saga: TaxiWorld) -> None:
    # Given one real trip padded to the longest line the API takes (4,096 bytes, 8 KiB as JSON)
    line = wide(LINES[0], 4096)
    # When it is posted to the single-row route
    status, body = saga.post(ROUTE_TRIP, line, idempotency_key=KEY)
    # Then it is stored, every state well within the limit
    assert status == 202 and saga.describe(body["execution"])["status"] == "SUCCEEDED"
    assert max(size for _, size in state_payloads(saga.history(body["execution"]))) <= STEP_FUNCTIONS_PAYLOAD_BYTES


def test_the_widest_row_flagged_with_the_longest_cause_reads_back_within_lambdas_limit(saga: TaxiWorld) -> None:
    # Given the widest single row the API takes (4,096 bytes), whose Store fails every attempt with an error message of
    # backslashes: each is two characters of the cause (Lambda's JSON error) and 4 bytes of a read's answer per
    # character, the most a cause's characters take there; the cause as long as Step Functions keeps it
    line = wide(LINES[0], 4096)

    def fail_store(handler: str, attempt: int) -> None:
        if handler == STORE_HANDLER:
            raise RuntimeError("\\" * 16_350)

    saga.invocations.before = fail_store
    status, body = saga.post(ROUTE_TRIP, line, idempotency_key=KEY)
    assert status == 202
    # When the row is read back through GET /trips/{id}
    result = saga.get_row_result(body["StoreRequestId"])
    answer = json.loads(result["body"])
    # Then it is flagged at the store with the whole cause, close to Step Functions' 32,768 characters
    assert (result["statusCode"], answer["state"], answer["phase"]) == (200, "flagged", "store")
    assert 32_000 < len(answer["message"]) <= limits.STEP_FUNCTIONS_CAUSE_CHARS and answer["message"].count("\\") > 32_000
    # and the whole answer, as Lambda counts it, is four times the cause and far within Lambda's 6 MB
    assert 4 * 32_000 < limits.check_lambda_response(result) < limits.LAMBDA_SYNC_PAYLOAD_BYTES // 40


def test_a_status_row_filled_to_dynamodbs_limit_with_control_characters_reads_back_within_lambdas_limit(saga: TaxiWorld) -> None:
    # Given a keyed row flagged at validation whose status message fills its item with control characters (7 bytes each in
    # Lambda's result): far more than any phase writes, about the most a status row can hold
    store_request_id = f"k-{KEY}"
    table = saga.environment(FLAG_HANDLER)[contract.ENV_VALIDATION_STATUS_TABLE]
    row = {contract.KEY_STORE_REQUEST_ID: store_request_id, "RawTuple": "x", "StatusReason": 1, "StatusDetail": "vendor"}
    # (the embedded cloud keeps moto's own check, which stops at 405,000 bytes: 4.6 KB under AWS's 409,600)
    room = MOTO_ITEM_BYTES - limits.dynamodb_item_bytes(to_attributes({**row, "StatusMessage": ""}))
    item = to_attributes({**row, "StatusMessage": "\x01" * room})
    assert limits.dynamodb_item_bytes(item) == MOTO_ITEM_BYTES < limits.DYNAMODB_ITEM_BYTES
    saga.dynamodb.put_item(TableName=table, Item=item)
    # When the row is read back through GET /trips/{id}
    result = saga.get_row_result(store_request_id)
    # Then it is flagged with that whole message, and the answer, 7 times the item, still fits Lambda's 6 MB
    answer = json.loads(result["body"])
    assert (answer["state"], answer["detail"], len(answer["message"])) == ("flagged", "vendor", room)
    assert 7 * room < limits.check_lambda_response(result) < limits.LAMBDA_SYNC_PAYLOAD_BYTES // 2
