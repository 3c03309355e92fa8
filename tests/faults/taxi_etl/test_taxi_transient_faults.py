"""Transient failures are not data verdicts (issue 23, item 3), on the real saga: the synthesized
state machine executed by moto, its tasks routed to the in-process handlers.

A phase's DynamoDB connection is closed under it: every call the phase makes fails with botocore's
ConnectionClosedError, as a call does once the SDK has given up on it (raised before the call goes
out, so the SDK does not retry it again here). The phase's handler names that
TransientInfrastructureError, which the state machine retries longer than a crash; after those
retries the rows are flagged `retryable:...`, and the phase runs once more after a Wait (the
automatic redrive). Retry waits and the Wait are recorded, not slept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ConnectionClosedError

from devtools.taxi_rows import bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TRANSFORM_HANDLER, VALIDATE_HANDLER, TaxiWorld, embedded_saga_cloud
from ops import taxi_redrive
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id

LINES = sample_lines()
GOOD_ROWS = list(LINES[:6])
HANDLERS = {Phase.VALIDATION: VALIDATE_HANDLER, Phase.TRANSFORMATION: TRANSFORM_HANDLER, Phase.STORE: STORE_HANDLER}


@dataclass
class ClosedConnections:
    """Every DynamoDB call `handler` makes fails with ConnectionClosedError: in its first `invocations`
    invocations, or (`invocations=None`) in every invocation before the automatic redrive's Wait, or
    (`forever`) in all of them. Other handlers' calls go through."""

    world: TaxiWorld
    handler: str
    invocations: int | None = None
    forever: bool = False
    attempts: int = 0
    failed_calls: int = 0
    _active: bool = field(default=False, repr=False)

    def attach(self) -> ClosedConnections:
        self.world.invocations.before = self._before
        self.world.invocations.after = self._after
        self.world.dynamodb.meta.events.register("before-call.dynamodb.*", self._call)
        return self

    def _before(self, handler: str, attempt: int) -> None:
        if handler != self.handler:
            return
        self.attempts = attempt
        if self.forever:
            self._active = True
        elif self.invocations is not None:
            self._active = attempt <= self.invocations
        else:
            self._active = not self.world.state_waits  # the outage ends while the execution waits to redrive

    def _after(self, handler: str) -> None:
        self._active = False

    def _call(self, model: Any, **_: Any) -> None:
        if self._active:
            self.failed_calls += 1
            raise ConnectionClosedError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/")


@pytest.fixture
def saga(taxi_etl_template: Any) -> Iterator[TaxiWorld]:
    """The dev saga on moto, with the Wait states' waits recorded in `state_waits`."""
    state_waits: list[float] = []
    with embedded_saga_cloud(state_waits) as waits:
        world = TaxiWorld.create(taxi_etl_template)
        world.retry_waits, world.state_waits = waits, state_waits
        with world.serving_api():
            yield world


@pytest.fixture
def taxi_etl_template(dev_templates: dict[str, Any]) -> Any:
    return dev_templates["Onceflow-dev-TaxiEtl"]


def post_batch(world: TaxiWorld, lines: list[str]) -> tuple[str, list[str]]:
    status, body = world.post("/trips/batch", "\n".join(lines))
    assert status == 202
    return body["execution"], body["StoreRequestIds"]


def states_entered(world: TaxiWorld, execution: str) -> list[str]:
    return [event["stateEnteredEventDetails"]["name"] for event in world.history(execution) if "stateEnteredEventDetails" in event]


def flag_metrics(output: str, name: str) -> dict[str, float]:
    """The flag step's EMF records of metric `name`, by phase."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            record = json.loads(line)
            value = record[name]
            found[record["phase"]] = found.get(record["phase"], 0) + (sum(value) if isinstance(value, list) else value)
    return found


@pytest.mark.parametrize("phase", list(Phase))
def test_a_closed_connection_for_longer_than_a_crash_is_retried_and_every_good_row_is_stored(saga: TaxiWorld, phase: Phase) -> None:
    # Given the phase's DynamoDB connection is closed during its first 4 invocations: more than the 2 retries
    # a crash gets (task_retry_attempts), fewer than the 8 AWS's failures get (transient_retry_attempts)
    fault = ClosedConnections(saga, HANDLERS[phase], invocations=4).attach()
    # When a batch of good rows is posted
    execution, ids = post_batch(saga, GOOD_ROWS)
    # Then the fault happened, and the phase was retried through it with backoff: 4 retries, no automatic redrive
    assert fault.failed_calls >= 4 and fault.attempts == 5
    assert len(saga.retry_waits) == 4 and saga.state_waits == []
    # and every good row is stored, none flagged, and the execution succeeded
    assert set(saga.final_items()) == set(ids)
    assert all(int(row["StatusReason"]) == 0 for rows in saga.status_rows().values() for row in rows.values())
    assert saga.describe(execution)["status"] == "SUCCEEDED"
    assert all(saga.get_row(store_request_id)[1]["state"] == "stored" for store_request_id in ids)


def test_a_closed_connection_outlasting_the_retries_flags_rows_retryable_then_the_redrive_stores_them(
    saga: TaxiWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the store's DynamoDB connection stays closed through all its retries, and the outage is over by the time
    # the execution has waited to redrive; the batch also holds a row that breaks a rule
    flagged_row_state: dict[str, Any] = {}

    def look_while_waiting(handler: str, attempt: int) -> None:
        # the first invocation after the Wait is the clear step: what a client sees just before it
        if handler == FLAG_HANDLER and saga.state_waits and not flagged_row_state:
            flagged_row_state.update(saga.get_row(content_id(GOOD_ROWS[0]))[1])

    fault = ClosedConnections(saga, STORE_HANDLER).attach()
    inner_before = saga.invocations.before
    assert inner_before is not None

    def before(handler: str, attempt: int) -> None:
        look_while_waiting(handler, attempt)
        inner_before(handler, attempt)

    saga.invocations.before = before
    bad = bad_at_validation(LINES[7])
    # When a batch of good rows and the bad row is posted
    execution, ids = post_batch(saga, [*GOOD_ROWS, bad])
    good_ids, bad_id = ids[:-1], ids[-1]
    # Then the store ran its 9 attempts (8 retries with backoff), the rows were flagged retryable, and after one
    # Wait of the configured length the store ran once more, and stored them
    entered = states_entered(saga, execution)
    assert entered.count("FlagStoreRetryable") == 1 and entered.count("RedriveStore") == 1
    assert entered.index("FlagStoreRetryable") < entered.index("WaitStoreRedrive") < entered.index("ClearStoreFlags")
    assert saga.state_waits == [120]
    assert fault.attempts == 10 and len(saga.retry_waits) == 8
    # and while it waited, GET /trips/{id} said the row was flagged by the store as retryable: no verdict on it
    assert flagged_row_state["state"] == "flagged" and flagged_row_state["phase"] == "store"
    assert flagged_row_state["detail"] == "retryable:TransientInfrastructureError" and flagged_row_state["retryable"] is True
    assert "ConnectionClosedError" in flagged_row_state["message"]
    # and in the end every good row is stored with reason 0 everywhere; the bad row keeps its data verdict, unchanged
    assert set(saga.final_items()) == set(good_ids)
    status = saga.status_rows()
    assert all(int(status[phase][store_request_id]["StatusReason"]) == 0 for store_request_id in good_ids for phase in Phase)
    assert (int(status[Phase.VALIDATION][bad_id]["StatusReason"]), status[Phase.VALIDATION][bad_id]["StatusDetail"]) == (
        1,
        "dropoff_before_pickup",
    )
    assert all(saga.get_row(store_request_id)[1]["state"] == "stored" for store_request_id in good_ids)
    # and the rows were counted as awaiting the redrive, none as still retryable
    output = capsys.readouterr().out
    assert flag_metrics(output, "RowsAwaitingRedrive") == {"store": len(good_ids)}
    assert flag_metrics(output, "RowsStillRetryable") == {}


@pytest.mark.parametrize("phase", list(Phase))
def test_an_outage_outlasting_the_redrive_leaves_rows_flagged_retryable_and_alarmed_for_the_operator(
    saga: TaxiWorld, capsys: pytest.CaptureFixture[str], phase: Phase
) -> None:
    # Given the phase's DynamoDB connection stays closed, through the retries and the automatic redrive
    fault = ClosedConnections(saga, HANDLERS[phase], forever=True).attach()
    # When a batch of good rows is posted
    execution, ids = post_batch(saga, GOOD_ROWS)
    # Then the phase was redriven automatically once (9 attempts, the Wait, 9 attempts), not more
    entered = states_entered(saga, execution)
    assert [name for name in entered if name.startswith(("Flag", "Wait", "Clear", "Redrive"))] == [
        f"Flag{phase.value.title()}Retryable",
        f"Wait{phase.value.title()}Redrive",
        f"Clear{phase.value.title()}Flags",
        f"Redrive{phase.value.title()}",
        f"Flag{phase.value.title()}StillRetryable",
    ]
    assert fault.attempts == 18 and saga.state_waits == [120]
    # and the execution failed in that phase, every row flagged retryable in every table the transaction touched
    described = saga.describe(execution)
    assert (described["status"], described["error"]) == ("FAILED", f"{phase.value.title()}Failed")
    assert saga.final_items() == {}
    status = saga.status_rows()
    for store_request_id in ids:
        for touched in phase.touched:
            row = status[touched][store_request_id]
            assert (int(row["StatusReason"]), row["StatusDetail"]) == (int(phase.reason), "retryable:TransientInfrastructureError")
        answer = saga.get_row(store_request_id)[1]
        assert (answer["state"], answer["phase"], answer["retryable"]) == ("flagged", phase.value, True)
    # and the rows still retryable after the automatic redrive were counted: the RowsStillRetryable alarm's metric
    output = capsys.readouterr().out
    assert flag_metrics(output, "RowsStillRetryable") == {phase.value: len(ids)}
    assert flag_metrics(output, "RowsAwaitingRedrive") == {phase.value: len(ids)}
    # When the outage is over and the operator redrives the retryable rows, as the runbook says
    fault.forever = False
    fault.invocations = 0
    with saga.routing():
        exit_status = taxi_redrive.main(
            saga.redrive_arguments("--detail", "retryable:*"),
            dynamodb=saga.dynamodb,
            stepfunctions=saga.stepfunctions,
        )
    # Then every row is stored, as generation 2
    assert exit_status == 0
    assert set(saga.final_items()) == set(ids)
    assert {saga.get_row(store_request_id)[1]["generation"] for store_request_id in ids} == {2}
