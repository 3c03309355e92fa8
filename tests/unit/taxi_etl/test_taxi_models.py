"""What travels between the saga's states (runtime/taxi_etl/models.py): phase input, flag requests, phases.

Pure: every event is a plain dict shaped as the state machine hands it over.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.taxi_etl.errors import PhaseInputError
from runtime.taxi_etl.flag_step import CaughtError, FlagRequest, parse_flag_request
from runtime.taxi_etl.models import Phase, Row, Verdict, parse_rows
from runtime.taxi_etl.trips import Reason


def row(store_request_id: str, text: str = "2,x") -> dict[str, Any]:
    return {"StoreRequestId": store_request_id, "tuple": text}


# --- parse_rows -----------------------------------------------------------------------------------


def test_rows_are_parsed_in_order() -> None:
    # Given a phase input with two rows
    event = {"rows": [row("c-1", "a"), row("k-key-2", "b")]}
    # When it is parsed
    rows = parse_rows(event)
    # Then the rows come back in order
    assert rows == [Row("c-1", "a"), Row("k-key-2", "b")]


def test_extra_fields_of_a_verdict_are_ignored() -> None:
    # Given the previous phase's output: verdicts with success/reason beside the row fields
    event = {"rows": [{"success": True, "reason": 0, **row("c-1", "t")}], "rejected": [], "hasPassed": True, "hasRejected": False}
    # When it is parsed as the next phase's input
    # Then the row is read from it
    assert parse_rows(event) == [Row("c-1", "t")]


def test_an_empty_rows_list_is_no_rows() -> None:
    # Given an input with no rows
    # When it is parsed
    # Then there are none (not an error)
    assert parse_rows({"rows": []}) == []


@pytest.mark.parametrize("event", [{}, {"rows": None}, {"rows": {"StoreRequestId": "c-1"}}, {"rows": "c-1"}, ["rows"], None])
def test_an_input_without_a_rows_list_is_refused(event: Any) -> None:
    # Given an input that is not an object with a rows list
    # When it is parsed
    # Then it is a PhaseInputError (no retry can fix it)
    with pytest.raises(PhaseInputError, match="'rows' list"):
        parse_rows(event)


@pytest.mark.parametrize(
    "store_request_id",
    ["", "has space", "a" * 81, "c/1", "c.1", "ключ", 7, None],
)
def test_a_row_without_a_valid_id_is_refused_with_its_position(store_request_id: Any) -> None:
    # Given a second row whose id is not usable as an execution name
    event = {"rows": [row("c-ok"), {"StoreRequestId": store_request_id, "tuple": "t"}]}
    # When it is parsed
    # Then the error names the row's position
    with pytest.raises(PhaseInputError, match="row 1 has no valid StoreRequestId"):
        parse_rows(event)


def test_an_id_of_80_characters_is_valid() -> None:
    # Given an id at the execution-name limit
    # When it is parsed
    # Then it is accepted
    assert parse_rows({"rows": [row("a" * 80)]}) == [Row("a" * 80, "2,x")]


@pytest.mark.parametrize(
    "document", [{"StoreRequestId": "c-1"}, {"StoreRequestId": "c-1", "tuple": 5}, {"StoreRequestId": "c-1", "tuple": None}]
)
def test_a_row_without_tuple_text_is_refused(document: dict[str, Any]) -> None:
    # Given a row with no tuple string
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError, match="row 0 has no tuple text"):
        parse_rows({"rows": [document]})


@pytest.mark.parametrize("document", ["c-1", 1, None, ["c-1", "t"]])
def test_a_row_that_is_not_an_object_is_refused(document: Any) -> None:
    # Given a row that is not an object
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError, match="row 0 is not an object"):
        parse_rows({"rows": [document]})


def test_duplicate_ids_keep_the_first_row() -> None:
    # Given three rows, the first and the third with the same id and different tuples
    event = {"rows": [row("c-1", "first"), row("c-2", "other"), row("c-1", "second")]}
    # When they are parsed
    rows = parse_rows(event)
    # Then the id is one transaction: the first row, at its first position
    assert rows == [Row("c-1", "first"), Row("c-2", "other")]


# --- parse_flag_request ---------------------------------------------------------------------------


def test_the_error_form_from_a_catch_carries_the_rows_and_the_error() -> None:
    # Given the flag step's input after a Catch put the Lambda error at $.error of the phase's input
    event = {
        "phase": "store",
        "state": {
            "rows": [row("c-1", "t1"), row("c-2", "t2")],
            "error": {"Error": "StoreConflict", "Cause": '{"errorMessage": "1 row(s) already stored"}'},
        },
    }
    # When it is parsed
    request = parse_flag_request(event)
    # Then it is the store phase, the rows it was given, and the caught error
    assert request == FlagRequest(
        phase=Phase.STORE,
        rejected=(),
        rows=(Row("c-1", "t1"), Row("c-2", "t2")),
        error=CaughtError("StoreConflict", '{"errorMessage": "1 row(s) already stored"}'),
    )


def test_an_error_without_a_name_is_a_task_failure() -> None:
    # Given a caught error with no Error and no Cause
    event = {"phase": "validation", "state": {"rows": [row("c-1")], "error": {}}}
    # When it is parsed
    request = parse_flag_request(event)
    # Then the error is named as Step Functions names a task failure, with an empty cause
    assert request.error == CaughtError("States.TaskFailed", "")


def test_the_error_form_refuses_bad_rows() -> None:
    # Given a caught error whose state has no rows list
    event = {"phase": "validation", "state": {"error": {"Error": "Lambda.Unknown", "Cause": "x"}}}
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError):
        parse_flag_request(event)


def test_the_rejected_form_carries_the_phase_verdicts() -> None:
    # Given a transformation output with a passed row and two rejected ones (one flagged earlier in validation)
    event = {
        "phase": "transformation",
        "state": {
            "rows": [{"success": True, "reason": 0, **row("c-ok", "out")}],
            "rejected": [
                {"success": False, "reason": 2, **row("c-gap", "in"), "detail": "nonexistent_local_time", "message": "gap"},
                {"success": False, "reason": 1, **row("c-old", "raw"), "detail": "vendor", "message": "old flag"},
            ],
            "hasPassed": True,
            "hasRejected": True,
        },
    }
    # When it is parsed
    request = parse_flag_request(event)
    # Then the rejected verdicts are kept, each with its own reason; no rows and no error
    assert request == FlagRequest(
        phase=Phase.TRANSFORMATION,
        rejected=(
            Verdict("c-gap", "in", Reason.TRANSFORMATION, "nonexistent_local_time", "gap"),
            Verdict("c-old", "raw", Reason.VALIDATION, "vendor", "old flag"),
        ),
        rows=(),
        error=None,
    )


@pytest.mark.parametrize("reason", [0, 9, -1, "1", None, 2.0])
def test_a_rejected_verdict_without_a_failure_code_gets_the_phase_code(reason: Any) -> None:
    # Given a rejected verdict whose reason is OK, unknown or not an integer
    event = {"phase": "store", "state": {"rejected": [{**row("c-1", "t"), "reason": reason}]}}
    # When it is parsed
    (verdict,) = parse_flag_request(event).rejected
    # Then it names the failure of the phase that rejected it, with empty detail and message
    assert verdict == Verdict("c-1", "t", Reason.STORE, "", "")
    assert not verdict.success


def test_a_rejected_verdict_with_a_bad_id_is_refused() -> None:
    # Given a rejected verdict without a usable id
    event = {"phase": "validation", "state": {"rejected": [{"StoreRequestId": "bad id", "tuple": "t", "reason": 1}]}}
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError, match="StoreRequestId"):
        parse_flag_request(event)


@pytest.mark.parametrize("phase", ["Validation", "load", "", None, 1])
def test_an_unknown_phase_is_refused(phase: Any) -> None:
    # Given a flag request for a phase that does not exist
    event = {"phase": phase, "state": {"rejected": []}}
    # When it is parsed
    # Then the error names it
    with pytest.raises(PhaseInputError, match="unknown phase"):
        parse_flag_request(event)


@pytest.mark.parametrize("event", [{"phase": "store"}, {"phase": "store", "state": None}, {"phase": "store", "state": ["rows"]}])
def test_a_flag_request_without_a_state_is_refused(event: dict[str, Any]) -> None:
    # Given a flag request with no state object
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError, match="must carry the state"):
        parse_flag_request(event)


@pytest.mark.parametrize("state", [{"rows": [row("c-1")]}, {"rejected": None}, {"rejected": {"c-1": 1}}, {"error": "boom", "rows": []}])
def test_a_state_with_neither_an_error_nor_rejected_rows_is_refused(state: dict[str, Any]) -> None:
    # Given a state without a caught error object and without a rejected list
    # When it is parsed
    # Then it is refused
    with pytest.raises(PhaseInputError, match="rejected rows"):
        parse_flag_request({"phase": "validation", "state": state})


# --- Phase ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "touched"),
    [
        (Phase.VALIDATION, (Phase.VALIDATION,)),
        (Phase.TRANSFORMATION, (Phase.VALIDATION, Phase.TRANSFORMATION)),
        (Phase.STORE, (Phase.VALIDATION, Phase.TRANSFORMATION, Phase.STORE)),
    ],
)
def test_a_phase_has_touched_its_own_and_every_earlier_status_table(phase: Phase, touched: tuple[Phase, ...]) -> None:
    # Given a phase
    # When the tables it has touched are asked
    # Then they are its own and the earlier phases', in saga order
    assert phase.touched == touched


@pytest.mark.parametrize(
    ("phase", "reason", "name"),
    [
        (Phase.VALIDATION, Reason.VALIDATION, "ValidationFailed"),
        (Phase.TRANSFORMATION, Reason.TRANSFORMATION, "TransformationFailed"),
        (Phase.STORE, Reason.STORE, "StoreFailed"),
    ],
)
def test_a_phase_has_its_reason_code_and_failure_name(phase: Phase, reason: Reason, name: str) -> None:
    # Given a phase
    # When its code and failure name are asked
    # Then they are the documented ones (1, 2, 3; <Phase>Failed)
    assert phase.reason == reason and int(phase.reason) == list(Phase).index(phase) + 1
    assert phase.failure_name == name


def test_the_phases_are_the_three_saga_steps_by_their_input_names() -> None:
    # Given the Phase enum
    # When its values are listed
    # Then they are the names the state machine passes
    assert [phase.value for phase in Phase] == ["validation", "transformation", "store"]
