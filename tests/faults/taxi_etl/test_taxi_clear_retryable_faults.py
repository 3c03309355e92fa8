"""The automatic redrive's clear step under write faults, on the real saga: the synthesized state
machine executed by moto, its tasks routed to the in-process handlers.

The store's DynamoDB connection is closed until the execution waits to redrive (ClosedConnections,
tests/faults/taxi_etl/test_taxi_transient_faults.py), so the store's rows are flagged
`retryable:TransientInfrastructureError` in the three status tables; after the Wait, ClearStoreFlags
clears them with one conditional UpdateItem per row and table (store and transformation first,
validation last, the one it counts), and RedriveStore stores them.

The clear writes are named as the shared tap names writes (tests/faults/taxi_etl/saga_write_faults.py),
taken from a clean pass of the same scenario. A clear sets reason 0, as a phase's begin does, so the
tap calls it a `begin`; the clear step's are the `begin`s the flag function makes.

- A crash just before or just after each clear write: the workflow's Retry runs the step again.
- Each clear write applied, its response lost and sent again by botocore: the retry fails its
  condition against its own first success, and must be taken for that success.
Each ends like the clean pass: every good row stored once, the flags as in the clean pass, no row
left flagged retryable, and the clear step's count of cleared rows exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from devtools.taxi_rows import bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TaxiWorld, embedded_saga_cloud
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.store import CLEAR_TOKEN
from tests.faults.taxi_etl.saga_write_faults import CrashAt, LoseResponse, Write, WriteTap
from tests.faults.taxi_etl.test_taxi_faults import end_state
from tests.faults.taxi_etl.test_taxi_transient_faults import ClosedConnections, post_batch, states_entered

LINES = sample_lines()
GOOD = [LINES[0], LINES[3]]  # the store fails on these, transiently
BATCH = [GOOD[0], bad_at_validation(LINES[1]), GOOD[1]]  # and a row validation rejects, for good
CLEARED_TABLES = ("store", "transformation", "validation")  # every table the store's transaction touched
REDRIVE_PATH = ["FlagStoreRetryable", "WaitStoreRedrive", "ClearStoreFlags", "RedriveStore"]  # in the states entered, in order


@contextmanager
def store_outage_saga(template: Any) -> Iterator[TaxiWorld]:
    """The dev saga on moto, the store's DynamoDB connection closed until the execution waits to
    redrive; Retry waits recorded in `retry_waits`, the Wait's in `state_waits`, none slept."""
    state_waits: list[float] = []
    with embedded_saga_cloud(state_waits) as retry_waits:
        world = TaxiWorld.create(template)
        world.retry_waits, world.state_waits = retry_waits, state_waits
        ClosedConnections(world, STORE_HANDLER).attach()
        with world.serving_api():
            yield world


@dataclass
class ClearAttempts:
    """The answers to the clear writes of each attempt of the clear step: the flag function's
    invocations after the Wait. The state machine runs one task at a time here, so an invocation's
    answers are the tap's answers between its start and its end."""

    tap: WriteTap
    attempts: list[list[tuple[Write, str]]] = field(default_factory=list)

    def attach(self, world: TaxiWorld) -> ClearAttempts:
        before, after = world.invocations.before, world.invocations.after
        start = 0

        def around_before(handler: str, attempt: int) -> None:
            nonlocal start
            start = len(self.tap.answers)
            if before is not None:
                before(handler, attempt)

        def around_after(handler: str) -> None:
            if after is not None:
                after(handler)
            if handler == FLAG_HANDLER and world.state_waits:
                self.attempts.append([(write, answer) for write, answer in self.tap.answers[start:] if write.kind == "begin"])

        world.invocations.before, world.invocations.after = around_before, around_after
        return self


def run(world: TaxiWorld) -> tuple[str, dict[str, Any]]:
    """Post the batch; the execution and its end state, each clear's random token replaced by a mark
    (which rows hold one is compared, not its value)."""
    execution, ids = post_batch(world, BATCH)
    assert ids[::2] == [content_id(line) for line in GOOD]
    state = end_state(world)
    for rows in state["status"].values():
        for row in rows.values():
            if CLEAR_TOKEN in row:
                row[CLEAR_TOKEN] = "<a clear's token>"
    return execution, state


def cleared_counts(world: TaxiWorld, execution: str) -> list[int]:
    """What each ClearStoreFlags that ended answered (the state machine keeps it at $.cleared)."""
    return [
        json.loads(event["stateExitedEventDetails"]["output"])["cleared"]["cleared"]
        for event in world.history(execution)
        if event.get("stateExitedEventDetails", {}).get("name") == "ClearStoreFlags"
    ]


@pytest.fixture(scope="module")
def taxi_etl_template(dev_templates: dict[str, Any]) -> Any:
    return dev_templates["Onceflow-dev-TaxiEtl"]


@pytest.fixture(scope="module")
def clean(taxi_etl_template: Any) -> dict[str, Any]:
    """The scenario's clean pass: its end state, its clear writes by (table, row), what it counted."""
    with store_outage_saga(taxi_etl_template) as world:
        tap = WriteTap().attach(world)
        clears = ClearAttempts(tap).attach(world)
        execution, state = run(world)
        return {
            "state": state,
            "clears": clears.attempts,
            "writes": {(write.table, write.row): write for write, _ in clears.attempts[0]},
            "cleared": cleared_counts(world, execution),
            "entered": states_entered(world, execution),
            "retry_waits": len(world.retry_waits),
        }


@pytest.fixture
def saga(taxi_etl_template: Any) -> Iterator[TaxiWorld]:
    with store_outage_saga(taxi_etl_template) as world:
        yield world


def clear_write(clean: dict[str, Any], table: str, row: int) -> Write:
    """The clean pass's clear write of good row `row` in `table`."""
    write: Write = clean["writes"][(table, content_id(GOOD[row]))]
    return write


def assert_like_the_clean_pass(world: TaxiWorld, execution: str, state: dict[str, Any], clean: dict[str, Any], tap: WriteTap) -> None:
    # the same states entered (the automatic redrive once), and the same tables and outcome as the clean pass
    assert states_entered(world, execution) == clean["entered"]
    assert state == clean["state"]
    # so: every good row stored once, with reason 0 in every table; nothing left flagged retryable
    good = {content_id(line) for line in GOOD}
    assert set(state["final"]) == good and set(tap.applied_puts().values()) == {1} and set(tap.applied_puts()) == good
    status = state["status"]
    assert all(int(status[phase.value][row]["StatusReason"]) == 0 for row in good for phase in Phase)
    assert not [row for rows in status.values() for row in rows.values() if str(row.get("StatusDetail", "")).startswith("retryable:")]
    assert world.describe(execution)["status"] == "SUCCEEDED"


def test_the_clean_pass_clears_each_good_row_in_each_table_once_and_counts_them(clean: dict[str, Any]) -> None:
    # Given the scenario run once without a crash or a lost response
    # When its clear step is looked at
    (attempt,) = clean["clears"]
    # Then it ran once, cleared each good row once in each table the store touched (validation last), all applied
    assert sorted(clean["writes"]) == sorted((table, content_id(line)) for table in CLEARED_TABLES for line in GOOD)
    assert len(attempt) == len(CLEARED_TABLES) * len(GOOD) and {answer for _, answer in attempt} == {"ok"}
    assert [write.table for write, _ in attempt][-len(GOOD) :] == ["validation"] * len(GOOD)
    # and the execution went through the automatic redrive once
    assert [name for name in clean["entered"] if name in REDRIVE_PATH] == REDRIVE_PATH
    # and the step counted the good rows, and left its token on each row it cleared, in each table
    assert clean["cleared"] == [len(GOOD)]
    status = clean["state"]["status"]
    assert {(table, row) for table, rows in status.items() for row, item in rows.items() if CLEAR_TOKEN in item} == set(clean["writes"])
    # and the bad row kept its verdict, and the good ones were stored
    assert set(clean["state"]["final"]) == {content_id(line) for line in GOOD}
    assert clean["state"]["status"]["validation"][content_id(BATCH[1])]["StatusDetail"] == "dropoff_before_pickup"


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("table", CLEARED_TABLES)
@pytest.mark.parametrize("row", range(len(GOOD)))
def test_a_crash_at_a_clear_write_boundary_ends_like_the_clean_pass(
    saga: TaxiWorld, clean: dict[str, Any], row: int, table: str, when: str
) -> None:
    # Given the clear step dies just before or just after its write of good row `row` in `table`
    # (its writes of the other rows and tables, on other threads, go on)
    crasher = CrashAt(clear_write(clean, table, row), when)
    crasher.attach(saga)
    clears = ClearAttempts(crasher).attach(saga)
    # When the batch is posted (the workflow's Retry runs the dead clear step again)
    execution, state = run(saga)
    # Then the crash happened, and the clear step alone was retried, once
    assert crasher.crashed
    assert len(saga.retry_waits) == clean["retry_waits"] + 1
    assert len(clears.attempts) == 2
    # and the end state is the clean pass's
    assert_like_the_clean_pass(saga, execution, state, clean, crasher)
    # and each good row's validation flag was cleared once, by one of the two attempts; the step's count is
    # what its second attempt cleared (the dead attempt's count died with it)
    cleared_by = [sum(1 for write, answer in attempt if write.table == "validation" and answer == "ok") for attempt in clears.attempts]
    assert sum(cleared_by) == len(GOOD)
    assert cleared_counts(saga, execution) == [cleared_by[1]]


@pytest.mark.parametrize("table", CLEARED_TABLES)
@pytest.mark.parametrize("row", range(len(GOOD)))
def test_a_clear_write_applied_whose_response_is_lost_is_taken_for_its_own_success(
    saga: TaxiWorld, clean: dict[str, Any], row: int, table: str
) -> None:
    # Given the clear step's write of good row `row` in `table` is applied, its response lost, and botocore sends it again
    lost = LoseResponse(clear_write(clean, table, row))
    lost.attach(saga)
    # When the batch is posted
    execution, state = run(saga)
    # Then the retry met the first write's effect: its condition failed against it
    assert lost.retried and lost.second_answer == "ConditionalCheckFailedException"
    # and the step took that for its own success: nothing failed or was retried for it, the end state is the clean pass's
    assert len(saga.retry_waits) == clean["retry_waits"]
    assert_like_the_clean_pass(saga, execution, state, clean, lost)
    # and it counted every row it cleared, that one included
    assert cleared_counts(saga, execution) == clean["cleared"] == [len(GOOD)]
