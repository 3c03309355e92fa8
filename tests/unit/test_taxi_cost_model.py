"""The pricing model of `make bench`'s saga section (benchmarks/taxi_cost.py): what each log level
sends to CloudWatch Logs, and the share of rows the client re-sends."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from benchmarks.taxi_cost import RETRY_SHARE, execution_log_bytes, requests_for, resent_share, seed_shape_definition

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
    with pytest.raises(ValueError, match="is not a whole number of requests"):
        requests_for([f"line {number}" for number in range(1000)], random.Random(1), 100)


def test_the_seed_shape_chains_three_tasks_each_caught_to_its_flag_step() -> None:
    # Given a template with the saga's functions
    handlers = ["validate", "transform", "store", "flag"]
    template = {
        "Resources": {
            f"{name.title()}Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Handler": f"runtime.taxi_etl.{name}_handler.handler"}}
            for name in handlers
        }
    }
    # When the seed's workflow is written for it
    states = json.loads(seed_shape_definition(template))["States"]
    # Then Validate -> Transform -> Store -> Succeed, with no Choice, each task caught to its flag step
    assert [states[name]["Next"] for name in ("Validation", "Transformation", "Store")] == ["Transformation", "Store", "Stored"]
    assert not [state for state in states.values() if state["Type"] == "Choice"]
    for phase in ("Validation", "Transformation", "Store"):
        assert states[phase]["Catch"][0]["Next"] == f"Flag{phase}"
        assert states[f"Flag{phase}"]["Resource"].endswith(":function:FlagFn")
