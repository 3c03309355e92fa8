"""Transient failures are not data verdicts (issue 23, item 3).

runtime/taxi_etl/transient.py classifies what AWS failing a call looks like to a handler, and the
phase and flag handlers turn it into TransientInfrastructureError, the error name the state machine
retries longer. The flag step's modes flag such rows `retryable:<error>`, clear those flags before the
automatic redrive, and flag them for good (counted in RowsStillRetryable) when the redrive fails too.
GET /trips/{id} tells a retryable flag from a verdict.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
)

from runtime.taxi_etl import contract
from runtime.taxi_etl.errors import PhaseInputError, StoreConflict, StoreUnavailable, TransientInfrastructureError
from runtime.taxi_etl.flag_handler import handle
from runtime.taxi_etl.flag_handler import handle_flag as flag_step
from runtime.taxi_etl.flag_step import CaughtError, FlagMode, FlagRequest, clear_retryable, flag, is_retryable_detail, parse_flag_request
from runtime.taxi_etl.flag_wiring import FlagDeps
from runtime.taxi_etl.models import Phase, Row
from runtime.taxi_etl.row_state import RowState, State, row_state
from runtime.taxi_etl.store import StatusRow
from runtime.taxi_etl.transient import as_transient, is_transient, transient_errors
from runtime.taxi_etl.trips import Reason
from tests.unit.taxi_etl.test_taxi_flag_metrics import emf_records, published
from tests.unit.taxi_etl.test_taxi_phases import GOOD, OTHER, Tables, begin_through, given_to
from tests.unit.taxi_etl.test_taxi_phases import StatusRow as FakeRow

URL = "https://dynamodb.us-east-1.amazonaws.com/"


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "UpdateItem")


# --- the classification -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ConnectionClosedError(endpoint_url=URL), id="connection-closed"),
        pytest.param(EndpointConnectionError(endpoint_url=URL), id="endpoint-unreachable"),
        pytest.param(ReadTimeoutError(endpoint_url=URL), id="read-timeout"),
        pytest.param(ConnectTimeoutError(endpoint_url=URL), id="connect-timeout"),
        pytest.param(SSLError(endpoint_url=URL, error="reset"), id="tls-reset"),
        pytest.param(ResponseStreamingError(error="cut"), id="response-cut"),
        pytest.param(client_error("ProvisionedThroughputExceededException"), id="dynamodb-throughput"),
        pytest.param(client_error("ThrottlingException"), id="throttling"),
        pytest.param(client_error("RequestLimitExceeded"), id="account-request-limit"),
        pytest.param(client_error("TransactionInProgressException"), id="transaction-in-progress"),
        pytest.param(client_error("InternalServerError", 500), id="dynamodb-500"),
        pytest.param(client_error("ServiceUnavailable", 503), id="503"),
        pytest.param(client_error("SomethingNew", 502), id="any-5xx"),
        pytest.param(StoreUnavailable("2 keys unprocessed"), id="unprocessed-keys"),
        pytest.param(TransientInfrastructureError("ConnectionClosedError: ..."), id="already-named"),
    ],
)
def test_aws_failing_a_call_is_transient(error: Exception) -> None:
    # Given what AWS failing a call looks like once the SDK has given up on it
    # When it is classified
    # Then it is transient: no verdict on the rows
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(client_error("ConditionalCheckFailedException"), id="conditional-check"),
        pytest.param(client_error("ValidationException"), id="validation"),
        pytest.param(client_error("AccessDeniedException", 403), id="access-denied"),
        pytest.param(client_error("ResourceNotFoundException"), id="no-table"),
        pytest.param(client_error("ItemCollectionSizeLimitExceededException"), id="item-collection-limit"),
        pytest.param(NoCredentialsError(), id="no-credentials"),
        pytest.param(ParamValidationError(report="bad"), id="bad-parameters"),
        pytest.param(StoreConflict("another trip"), id="store-conflict"),
        pytest.param(PhaseInputError("not rows"), id="bad-input"),
        pytest.param(KeyError("tuple"), id="a-bug"),
        pytest.param(TimeoutError("python's own"), id="a-python-timeout"),
    ],
)
def test_data_errors_bugs_and_refusals_are_not_transient(error: Exception) -> None:
    # Given a failure that is a verdict, a bug or a refusal no wait can fix
    # When it is classified
    # Then it is not transient (it keeps today's short retry and its error:<name> flag)
    assert not is_transient(error)


def test_the_error_the_state_machine_matches_is_the_contracts_name() -> None:
    # Given the exception the handlers raise for a transient failure
    # Then its class name is the error name the state machine's Retry and Catch list
    assert TransientInfrastructureError.__name__ == contract.ERROR_TRANSIENT


def test_a_transient_failure_leaves_a_task_as_one_named_error_chained_to_the_original() -> None:
    # Given a task whose DynamoDB connection was closed
    closed = ConnectionClosedError(endpoint_url=URL)
    # When it runs inside transient_errors()
    with pytest.raises(TransientInfrastructureError) as raised, transient_errors():
        raise closed
    # Then it fails with TransientInfrastructureError, naming the original class, chained to it
    assert str(raised.value).startswith("ConnectionClosedError: Connection was closed")
    assert raised.value.__cause__ is closed
    assert as_transient(raised.value) is raised.value


@pytest.mark.parametrize("error", [StoreConflict("another trip"), client_error("ValidationException"), KeyError("x")])
def test_any_other_failure_leaves_a_task_unchanged(error: Exception) -> None:
    # Given a task failing for a reason that is not AWS's
    # When it runs inside transient_errors()
    # Then the same exception leaves it
    with pytest.raises(type(error)) as raised, transient_errors():
        raise error
    assert raised.value is error


def test_the_flag_handler_names_a_throttled_flag_step_transient() -> None:
    # Given a flag step whose table throttles every update (after the SDK's own retries)
    class Throttled:
        def flag(self, *args: Any) -> None:
            raise client_error("ProvisionedThroughputExceededException")

    tables = Tables()
    deps = FlagDeps({phase: Throttled() for phase in Phase}, tables.final)  # type: ignore[misc]
    state = {"rejected": [{"StoreRequestId": "c-1", "tuple": GOOD, "reason": 1, "detail": "vendor", "message": "vendor"}]}
    # When it runs
    # Then it fails with the transient error, which the state machine retries longer
    with pytest.raises(TransientInfrastructureError, match="ClientError"):
        handle({"phase": "validation", "state": state}, None, deps)  # type: ignore[arg-type]


# --- the flag step's modes ----------------------------------------------------------------------


def caught_state(phase: Phase, lines: list[str], error: str = contract.ERROR_TRANSIENT) -> dict[str, Any]:
    rows = [{"StoreRequestId": f"c-{index}", "tuple": given_to(phase, line)} for index, line in enumerate(lines, 1)]
    return {"rows": rows, "error": {"Error": error, "Cause": "ConnectionClosedError: Connection was closed"}}


def test_a_flag_request_carries_its_mode_and_refuses_an_unknown_one() -> None:
    # Given flag requests with each mode, without one, and with one the state machine never sends
    state = caught_state(Phase.STORE, [GOOD])
    # When they are parsed
    # Then the mode is read (FINAL without one), and an unknown mode or a mode without a caught error is bad input
    assert parse_flag_request({"phase": "store", "state": state}).mode is FlagMode.FINAL
    for mode in (FlagMode.RETRYABLE, FlagMode.REDRIVEN, FlagMode.CLEAR):
        assert parse_flag_request({"phase": "store", "state": state, "flagMode": mode.value}).mode is mode
    with pytest.raises(PhaseInputError, match="unknown flag mode"):
        parse_flag_request({"phase": "store", "state": state, "flagMode": "later"})
    with pytest.raises(PhaseInputError, match="must carry the error"):
        parse_flag_request({"phase": "store", "state": {"rejected": []}, "flagMode": "retryable"})


@pytest.mark.parametrize("phase", list(Phase))
def test_rows_aws_failed_are_flagged_retryable_in_every_touched_table(phase: Phase) -> None:
    # Given a phase that AWS failed on two rows, after its retries
    tables = Tables()
    rows = (Row("c-1", given_to(phase, GOOD)), Row("c-2", given_to(phase, OTHER)))
    begin_through(tables, phase, list(rows))
    request = FlagRequest(phase, (), rows, CaughtError(contract.ERROR_TRANSIENT, "closed"), FlagMode.RETRYABLE)
    # When the retryable flag step runs
    outcome = flag(request, tables.ports(), tables.final)
    # Then each row has the phase's code, the distinct retryable detail and the cause, in every touched table
    for row in rows:
        for touched in phase.touched:
            assert tables.status[touched].rows[row.store_request_id] == FakeRow(
                row.tuple, phase.reason, "retryable:TransientInfrastructureError", "closed"
            )
    assert outcome.by_detail == (("retryable:TransientInfrastructureError", 2),)
    assert is_retryable_detail("retryable:Lambda.TooManyRequestsException")
    assert not is_retryable_detail("error:StoreConflict") and not is_retryable_detail("vendor") and not is_retryable_detail(None)


def test_the_final_flag_of_a_non_transient_error_is_unchanged() -> None:
    # Given a store that failed with a conflict (a verdict), flagged without a mode
    tables = Tables()
    rows = (Row("c-1", given_to(Phase.STORE, GOOD)),)
    begin_through(tables, Phase.STORE, list(rows))
    request = FlagRequest(Phase.STORE, (), rows, CaughtError("StoreConflict", "another trip"))
    # When the flag step runs
    flag(request, tables.ports(), tables.final)
    # Then the detail is error:<name>, as before
    assert tables.store.rows["c-1"].detail == "error:StoreConflict"


def test_clearing_removes_only_this_phases_retryable_flags_validation_last() -> None:
    # Given a store AWS failed on two rows, flagged retryable, and a third row flagged by a verdict meanwhile
    tables = Tables()
    rows = (Row("c-1", given_to(Phase.STORE, GOOD)), Row("c-2", given_to(Phase.STORE, OTHER)), Row("c-3", given_to(Phase.STORE, GOOD)))
    begin_through(tables, Phase.STORE, list(rows))
    flag(FlagRequest(Phase.STORE, (), rows[:2], CaughtError(contract.ERROR_TRANSIENT, "closed"), FlagMode.RETRYABLE), tables.ports())
    for phase in Phase:
        tables.status[phase].flag("c-3", rows[2].tuple, Reason.STORE, "error:StoreConflict", "another trip")
    tables.journal.clear()
    # When the clear step runs on all three rows
    cleared = clear_retryable(
        FlagRequest(Phase.STORE, (), rows, CaughtError(contract.ERROR_TRANSIENT, "closed"), FlagMode.CLEAR), tables.ports()
    )
    # Then the two retryable rows are back at reason 0 in every table, and the verdict stays
    assert cleared == 2
    for store_request_id in ("c-1", "c-2"):
        assert tables.reasons(store_request_id) == dict.fromkeys(Phase, Reason.OK)
    assert tables.reasons("c-3") == dict.fromkeys(Phase, Reason.STORE)
    # and every validation row is cleared after the rows' other tables (a clear cut short leaves the row flagged)
    order = [table for table, call, _ in tables.journal if call == "clear"]
    assert order[-3:] == ["validation"] * 3 and "validation" not in order[:-3]
    # and clearing again changes nothing
    assert clear_retryable(FlagRequest(Phase.STORE, (), rows, None, FlagMode.CLEAR), tables.ports()) == 0


def test_the_flag_steps_metrics_say_awaiting_redrive_then_still_retryable(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a transformation AWS failed on two rows
    tables = Tables()
    state = caught_state(Phase.TRANSFORMATION, [GOOD, OTHER])
    begin_through(tables, Phase.TRANSFORMATION, [Row(row["StoreRequestId"], row["tuple"]) for row in state["rows"]])
    service = ("service", "tests")
    # When the retryable flag step runs
    flag_step({"phase": "transformation", "state": state, "flagMode": "retryable"}, tables.ports(), tables.final)
    # Then the rows are counted as awaiting the redrive, and no flagged execution is counted (nothing is final yet)
    assert published(emf_records(capsys.readouterr().out)) == {("RowsAwaitingRedrive", (("phase", "transformation"), service)): 2}
    # When the clear step runs
    assert flag_step({"phase": "transformation", "state": state, "flagMode": "clear"}, tables.ports(), tables.final) == {"cleared": 2}
    # Then it publishes nothing
    assert published(emf_records(capsys.readouterr().out)) == {}
    # When the redrive fails the same way and the rows are flagged for good
    outcome = flag_step({"phase": "transformation", "state": state, "flagMode": "redriven"}, tables.ports(), tables.final)
    # Then the execution fails in its phase, and the rows still retryable are counted: what the alarm watches
    assert outcome["error"] == "TransformationFailed" and outcome["flagged"] == 2
    assert published(emf_records(capsys.readouterr().out)) == {
        ("ExecutionsFlagged", (("phase", "transformation"), service)): 1,
        ("RowsFlagged", (("phase", "transformation"), ("reason", "retryable:TransientInfrastructureError"), service)): 2,
        ("RowsStillRetryable", (("phase", "transformation"), service)): 2,
    }


# --- what GET /trips/{id} answers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("detail", "retryable"),
    [
        ("retryable:TransientInfrastructureError", True),
        ("retryable:Lambda.TooManyRequestsException", True),
        ("error:ClientError", False),
        ("vendor", False),
    ],
)
def test_the_row_state_tells_a_retryable_flag_from_a_verdict(detail: str, retryable: bool) -> None:
    # Given a row flagged by its store with `detail`
    status = {phase: StatusRow("c-1", "t", int(Reason.STORE), detail, "why") for phase in Phase}
    # When its state is read
    state = row_state("c-1", status, None)
    # Then it is flagged, and `retryable` says whether the flag is AWS's failure or a verdict on the row
    assert state is not None and state.state is State.FLAGGED
    assert state.to_json()["retryable"] is retryable
    assert state.to_json()["detail"] == detail
    # and a row that is not flagged never is retryable, nor says so
    assert "retryable" not in RowState("c-1", State.PENDING, phase=Phase.STORE).to_json()
