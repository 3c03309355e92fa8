"""The pricing model of `make bench`'s saga section (benchmarks/taxi_cost.py, observability_cost.py,
seed_saga.py): what each log level sends to CloudWatch Logs, what logs and traces cost, the share
of rows the client re-sends, and the seed's workflow shape."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from benchmarks.observability_cost import (
    CLOUDWATCH_EVENT_OVERHEAD_BYTES,
    GIB,
    LogPrices,
    TracePrices,
    access_log_line,
    default_sampling_share,
    execution_log_messages,
    ingested_bytes,
    is_error_event,
    resent_requests,
)
from benchmarks.seed_saga import FUNCTIONS, seed_definition
from benchmarks.taxi_cost import RETRY_SHARE, execution_log_bytes, function_log_bytes, requests_for, resent_share

ARN = "arn:aws:states:us-east-1:123456789012:execution:machine:c-0123"
AT = datetime(2026, 11, 24, tzinfo=UTC)
ROW_DATA = json.dumps({"rows": [{"StoreRequestId": "c-0123", "tuple": "2,2019-10-23T16:39:42.000," + "x" * 200}]})


def event(number: int, kind: str, details: dict[str, Any]) -> dict[str, Any]:
    name = kind[0].lower() + kind[1:]
    return {"id": number, "type": kind, "timestamp": AT, "previousEventId": number - 1, f"{name}EventDetails": details}


HISTORY = [
    event(1, "ExecutionStarted", {"input": ROW_DATA, "roleArn": "arn:aws:iam::123456789012:role/r"}),
    event(2, "TaskStateEntered", {"name": "Validation", "input": ROW_DATA}),
    event(3, "LambdaFunctionFailed", {"error": "States.TaskFailed", "cause": "a crash"}),
    event(4, "TaskStateExited", {"name": "Validation", "output": ROW_DATA}),
    event(5, "ExecutionSucceeded", {"output": ROW_DATA}),
]
FAILED_HISTORY = [
    event(1, "ExecutionStarted", {"input": ROW_DATA}),
    event(2, "FailStateEntered", {"name": "ValidationFailed", "input": ROW_DATA}),
    event(3, "ExecutionFailed", {"error": "ValidationFailed", "cause": "1 row flagged"}),
]


# --- the state machine's log events -----------------------------------------------------------


def test_level_all_with_data_logs_every_event_with_its_input_and_output() -> None:
    # Given a history whose events carry the row
    # When it is priced at ALL with execution data, and at ALL without
    with_data = execution_log_bytes(HISTORY, ARN, level="ALL", include_data=True)
    without = execution_log_bytes(HISTORY, ARN, level="ALL", include_data=False)
    # Then every event is there, and the data makes the difference: four copies of the row
    assert with_data - without >= 4 * len(ROW_DATA)
    assert without > 5 * len(ARN)


def test_level_error_logs_only_the_failure_events() -> None:
    # Given the same history, with one failed task attempt
    # When it is priced at ERROR without execution data
    error_only = execution_log_bytes(HISTORY, ARN, level="ERROR", include_data=False)
    # Then only the failure is logged, with its error and cause
    assert error_only == execution_log_bytes(HISTORY[2:3], ARN, level="ALL", include_data=False)
    assert execution_log_bytes([HISTORY[0], HISTORY[4]], ARN, level="ERROR", include_data=False) == 0


def test_a_failed_execution_logs_its_fail_state_and_its_end_at_error_without_the_row() -> None:
    # Given an execution that ended in a Fail state
    # When its log messages are written at ERROR without execution data
    messages = [json.loads(message) for message in execution_log_messages(FAILED_HISTORY, ARN, "ERROR", include_data=False)]
    # Then the Fail state and the execution's failure are logged, with no input: no row content
    assert [message["type"] for message in messages] == ["FailStateEntered", "ExecutionFailed"]
    assert messages[0]["details"] == {"name": "ValidationFailed"}
    assert messages[1]["details"] == {"error": "ValidationFailed", "cause": "1 row flagged"}
    assert all(message["execution_arn"] == ARN and message["event_timestamp"] == str(int(AT.timestamp() * 1000)) for message in messages)


@pytest.mark.parametrize(
    ("level", "logged"),
    [("ALL", 3), ("ERROR", 2), ("FATAL", 1), ("OFF", 0)],
)
def test_each_level_logs_a_narrower_set_of_events(level: str, logged: int) -> None:
    # Given a failed execution's three events
    # When they are written at `level`
    messages = execution_log_messages(FAILED_HISTORY, ARN, level, include_data=True)
    # Then ALL logs each, ERROR the failures, FATAL the execution's end, OFF nothing
    assert len(messages) == logged


def test_an_unknown_level_is_refused() -> None:
    # Given a level Step Functions does not have
    # When history is written at it
    # Then it is refused, naming the levels
    with pytest.raises(ValueError, match="ALL, ERROR, FATAL, OFF"):
        execution_log_messages(HISTORY, ARN, "INFO", include_data=False)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("TaskFailed", True),
        ("LambdaFunctionTimedOut", True),
        ("ExecutionAborted", True),
        ("FailStateEntered", True),
        ("TaskStateEntered", False),
        ("LambdaFunctionSucceeded", False),
        ("ExecutionSucceeded", False),
    ],
)
def test_error_events_are_failures_time_outs_aborts_and_fail_states(kind: str, error: bool) -> None:
    # Given a history event type
    # When it is classified
    # Then only the failure kinds are error events
    assert is_error_event(kind) is error


def test_cloudwatch_counts_each_event_with_26_bytes_more() -> None:
    # Given two messages, one with a character of two UTF-8 bytes
    messages = ["abc", "é"]
    # When their ingested size is counted
    # Then each counts its UTF-8 bytes plus 26
    assert ingested_bytes(messages) == 3 + 2 + 2 * CLOUDWATCH_EVENT_OVERHEAD_BYTES


def test_an_access_log_line_fills_each_context_variable() -> None:
    # Given a stage's JSON access-log format
    log_format = json.dumps({"requestId": "$context.requestId", "routeKey": "$context.routeKey", "error": "$context.error.message"})
    # When a line is written with what API Gateway knows of a request
    line = access_log_line(log_format, {"$context.requestId": "abc=", "$context.routeKey": "POST /trips"})
    # Then every variable is replaced, an unknown one with "-"
    assert json.loads(line) == {"requestId": "abc=", "routeKey": "POST /trips", "error": "-"}


# --- the functions' own output ----------------------------------------------------------------


def test_the_functions_logs_keep_metric_records_and_lines_at_or_above_the_level() -> None:
    # Given what the functions printed: a metric record, a DEBUG line and an INFO line
    emf = json.dumps({"_aws": {"CloudWatchMetrics": []}, "RowsStored": [1.0]})
    debug = json.dumps({"level": "DEBUG", "message": "detail"})
    info = json.dumps({"level": "INFO", "message": "submitted"})
    lines = [emf, debug, info]
    # When they are counted at DEBUG and at INFO
    # Then DEBUG keeps all three, INFO drops the DEBUG line, and metric records stay at any level
    assert function_log_bytes(lines, "DEBUG") == ingested_bytes(lines)
    assert function_log_bytes(lines, "INFO") == ingested_bytes([emf, info])
    assert function_log_bytes(lines, "ERROR") == ingested_bytes([emf])


# --- prices -----------------------------------------------------------------------------------


def test_logs_cost_ingestion_once_and_storage_for_the_retention() -> None:
    # Given $0.50 per GiB ingested and $0.03 per GiB-month stored
    prices = LogPrices(ingestion_per_gib=0.50, storage_per_gib_month=0.03)
    # When one GiB is kept for no time, and for 3 months (91.2 days)
    # Then it costs the ingestion, and the ingestion plus three months of storage
    assert prices.cost(GIB, 0) == pytest.approx(0.50)
    assert prices.cost(GIB, 91.2) == pytest.approx(0.50 + 3 * 0.03)


def test_traces_cost_what_is_recorded_and_retrieved_of_the_sampled_share() -> None:
    # Given $5.00 per million traces recorded and $0.50 per million retrieved
    prices = TracePrices(recorded=5.00 / 1e6, retrieved=0.50 / 1e6)
    # When a million requests are traced at 100 % and at 5 %
    # Then each recorded trace costs both, and a share outside 0..1 is refused
    assert prices.cost(1e6) == pytest.approx(5.50)
    assert prices.cost(1e6, sampled=0.05) == pytest.approx(0.275)
    with pytest.raises(ValueError, match=r"0\.\.1"):
        prices.cost(1e6, sampled=1.5)


@pytest.mark.parametrize(("rate", "share"), [(0.5, 1.0), (1.0, 1.0), (21.0, 2.0 / 21.0), (10_001.0, 501.0 / 10_001.0)])
def test_the_default_sampling_rule_records_one_a_second_and_5_percent_of_the_rest(rate: float, share: float) -> None:
    # Given requests at `rate` per second
    # When X-Ray's default rule samples them
    # Then all are recorded under one a second, and the share tends to 5 % above
    assert default_sampling_share(rate) == pytest.approx(share)


# --- the re-sent share ------------------------------------------------------------------------


@pytest.mark.parametrize(("rows", "group", "resent"), [(1000, 1, 50), (2000, 100, 1)])
def test_the_stated_share_of_rows_is_re_sent(rows: int, group: int, resent: int) -> None:
    # Given the rows in requests of `group`
    lines = [f"line {number}" for number in range(rows)]
    # When the client's re-sends are drawn
    requests = requests_for(lines, random.Random(1), group)
    # Then exactly the stated share of the rows goes again, as whole requests
    assert len(requests) == rows // group + resent
    assert resent_share(requests, rows) == RETRY_SHARE


def test_a_share_that_is_no_whole_number_of_requests_is_refused() -> None:
    # Given 1,000 rows in 10 batches: 5 % would be half a batch (the old bench re-sent a whole one: 10 %)
    # When the re-sends are drawn
    # Then it is refused rather than re-sending another share than the stated one
    with pytest.raises(ValueError, match="is not a whole number of requests"):
        requests_for([f"line {number}" for number in range(1000)], random.Random(1), 100)
    with pytest.raises(ValueError, match="is not a whole number of requests"):
        resent_requests(10, 100, 0.05)


# --- the seed's workflow shape ----------------------------------------------------------------


def test_the_seed_shape_chains_three_tasks_with_a_choice_after_validate_and_transform() -> None:
    # Given the seed's workflow as the bench builds it
    states = seed_definition()["States"]
    # When its happy path is followed from the start
    path, name = [], seed_definition()["StartAt"]
    while "Next" in states[name] or states[name]["Type"] == "Choice":
        path.append(name)
        state = states[name]
        name = state["Choices"][0]["Next"] if state["Type"] == "Choice" else state["Next"]
    path.append(name)
    # Then it is Validate -> Choice -> Transform -> Choice -> Store -> Succeed: six states per row
    assert path == ["Validate", "ValidationPassed", "Transform", "TransformationPassed", "Store", "Stored"]
    assert states["Stored"]["Type"] == "Succeed"


def test_the_seed_shape_flags_every_table_the_transaction_touched_in_parallel() -> None:
    # Given the seed's workflow
    states = seed_definition()["States"]
    # When its failure paths are read
    # Then a validation reject flags one table; a transformation reject two, and a failed store three, in parallel
    assert states["ValidationPassed"]["Default"] == "FlagValidation"
    assert states["FlagValidation"]["Parameters"]["FunctionName"].endswith(FUNCTIONS["flag_validation"])
    for parallel, flags in (("FlagTransformation", 2), ("FlagStore", 3)):
        assert states[parallel]["Type"] == "Parallel"
        assert len(states[parallel]["Branches"]) == flags
    assert states["Transform"]["Catch"][0]["Next"] == "FlagValidation"
    assert states["Store"]["Catch"][0]["Next"] == "FlagStore"
    assert "Catch" not in states["Validate"]
    # and every task is the lambda:invoke integration, retried only on Lambda's service errors
    tasks = [state for state in states.values() if state["Type"] == "Task"]
    assert all(task["Resource"] == "arn:aws:states:::lambda:invoke" and task["Retry"][0]["MaxAttempts"] == 3 for task in tasks)


def test_measured_phase_durations_replace_the_assumed_ones_for_the_phases() -> None:
    from benchmarks.taxi_cost import PhaseDurations

    # Given durations measured for 1 row and 100 rows per invocation
    durations = PhaseDurations({"validate": {1: 4.0, 100: 40.0}, "transform": {1: 5.0, 100: 50.0}, "store": {1: 10.0, 100: 80.0}})
    # Then one execution's three phases cost their sum at 1 and at 100 rows, and in between by rows
    assert durations.phases_ms(1) == 19.0
    assert durations.phases_ms(100) == 170.0
    assert durations.phases_ms(50.5) == (19.0 + 170.0) / 2
