"""Races inside one phase invocation: the saga's phases write a batch's rows on a pool of threads.

One batch of real rows (two of them corrupted: one fails validation, one transformation) goes
through the API, so each phase writes many rows at once. Faults hit chosen rows' writes while the
other rows' writes are in flight: a crash in one row's write while others commit (the task dies;
the workflow's Retry runs it again), throttling of several rows at the same moment, before or
after their writes land, and a lost response on one row's write among concurrent ones. Each must
end, after the saga's retries, like a clean pass: every good row stored once, every corrupted row
flagged with the same reason. A throttle that outlasts the retries flags exactly its own rows.
The pool's answer is also compared with one row at a time, byte for byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import TaxiWorld
from runtime.taxi_etl import contract, flag_wiring, phase_wiring
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id
from tests.faults.taxi_etl.saga_write_faults import CrashAt, LoseResponse, Throttle, Write, WriteTap, pooled_saga

LINES = sample_lines()
GOOD = LINES[300:322]
BAD_AT_VALIDATION = bad_at_validation(LINES[322])
BAD_AT_TRANSFORMATION = bad_at_transformation(LINES[323])
BATCH = [*GOOD[:11], BAD_AT_VALIDATION, *GOOD[11:], BAD_AT_TRANSFORMATION]  # 24 rows: all in flight at once in a pool of 32
GOOD_IDS = {content_id(line) for line in GOOD}
CHOSEN = [content_id(GOOD[index]) for index in (2, 7, 13, 19)]  # rows the faults hit, spread over the batch


def row_of(index: int) -> str:
    return content_id(GOOD[index])


def end_state(world: TaxiWorld) -> dict[str, Any]:
    executions = {}
    for execution in world.executions():
        described = world.describe(execution["name"])
        executions[execution["name"]] = (described["status"], described.get("error"), described.get("cause"), described.get("output"))
    return {
        "status": {phase.value: rows for phase, rows in world.status_rows().items()},
        "final": world.final_items(),
        "executions": executions,
    }


def post_batch(world: TaxiWorld) -> dict[str, Any]:
    status, body = world.post(contract.ROUTE_TRIP_BATCH, "\n".join(BATCH))
    assert status == 202
    assert len(body["StoreRequestIds"]) == len(BATCH)
    return end_state(world)


@pytest.fixture(scope="module")
def template(dev_templates: dict[str, Any]) -> Any:
    return dev_templates["Onceflow-dev-TaxiEtl"]


@pytest.fixture(scope="module")
def clean(template: Any) -> dict[str, Any]:
    """The batch's end state after one clean pass on the pool, and its writes."""
    with pooled_saga(template) as world:
        tap = WriteTap().attach(world)
        state = post_batch(world)
        assert world.retry_waits == []
        return {"state": state, "tap": tap}


@pytest.fixture
def saga(template: Any) -> Iterator[TaxiWorld]:
    with pooled_saga(template) as world:
        yield world


def assert_like_the_clean_pass(world: TaxiWorld, state: dict[str, Any], clean: dict[str, Any]) -> None:
    """Every good row stored once with reason 0 everywhere, each corrupted row flagged in its phase: the clean pass's tables."""
    assert state == clean["state"]
    assert set(state["final"]) == GOOD_IDS
    rows = state["status"]
    assert int(rows[Phase.VALIDATION.value][content_id(BAD_AT_VALIDATION)]["StatusReason"]) == 1
    assert int(rows[Phase.TRANSFORMATION.value][content_id(BAD_AT_TRANSFORMATION)]["StatusReason"]) == 2
    assert all(int(rows[phase.value][row]["StatusReason"]) == 0 for phase in Phase for row in GOOD_IDS)


def test_the_clean_pass_on_the_pool_writes_each_row_at_once_and_stores_each_good_row_once(clean: dict[str, Any]) -> None:
    # Given the batch's clean pass on the pool
    tap: WriteTap = clean["tap"]
    # Then every good row's item was written exactly once, and each write was made once
    assert tap.applied_puts() == Counter(dict.fromkeys(GOOD_IDS, 1))
    assert set(tap.count().values()) == {1}
    # And the end state is the clean pass's tables
    assert set(clean["state"]["final"]) == GOOD_IDS


def test_the_pool_answers_byte_for_byte_what_one_row_at_a_time_answers(
    template: Any, clean: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the phases and the flag step built to write one row at a time
    monkeypatch.setattr(phase_wiring, "PHASE_ROW_CONCURRENCY", 1)
    monkeypatch.setattr(flag_wiring, "FLAG_UPDATE_CONCURRENCY", 1)
    with pooled_saga(template) as world:
        tap = WriteTap().attach(world)
        # When the same batch is posted
        state = post_batch(world)
    # Then the writes were the same, and the tables and every execution's status, error, cause
    # and output (the state machine's data, as JSON text) are identical to the pool's
    assert tap.count() == clean["tap"].count()
    assert state == clean["state"]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("write", ["begin:validation", "begin:transformation", "begin:store", "put:trips"])
def test_a_crash_in_one_rows_write_while_other_rows_writes_commit_ends_like_a_clean_pass(
    saga: TaxiWorld, clean: dict[str, Any], write: str, when: str
) -> None:
    # Given the thread writing row 7's `write` dies just before or after it, once three writes of
    # other rows of the same batch have landed meanwhile
    kind, table = write.split(":")
    crasher = CrashAt(Write(kind, table, row_of(7)), when, after_others=3).attach(saga)
    # When the batch is posted (the task fails with the crash; the workflow's Retry runs it again)
    state = post_batch(saga)
    # Then the crash happened while other rows' writes committed, and the task was retried once
    assert crasher.crashed
    assert len(crasher.landed_meanwhile) >= 3
    assert all(landed.row != row_of(7) for landed in crasher.landed_meanwhile)
    assert len(saga.retry_waits) == 1
    # And the end is the clean pass's: every good row stored once, every corrupted row flagged with its reason
    assert_like_the_clean_pass(saga, state, clean)
    assert crasher.applied_puts() == Counter(dict.fromkeys(GOOD_IDS, 1))


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("write", ["begin:validation", "begin:transformation", "begin:store", "put:trips"])
def test_throttling_in_several_rows_at_once_ends_like_a_clean_pass(
    saga: TaxiWorld, clean: dict[str, Any], write: str, when: str, code: str
) -> None:
    # Given four rows' `write` in the same phase invocation, all in flight at the same moment, are
    # throttled once (after the SDK's own retries), before they land or after
    kind, table = write.split(":")
    throttle = Throttle(kind, table, set(CHOSEN), code=code, when=when).attach(saga)
    # When the batch is posted
    state = post_batch(saga)
    # Then each of the four was throttled once, together, and the phase's task failed once and was retried
    assert throttle.throttled == Counter(dict.fromkeys(CHOSEN, 1))
    assert not throttle.together.broken
    assert len(saga.retry_waits) == 1
    # And the end is the clean pass's: a write that had landed met itself on the retry, every good row stored once
    assert_like_the_clean_pass(saga, state, clean)
    assert throttle.applied_puts() == Counter(dict.fromkeys(GOOD_IDS, 1))


@pytest.mark.parametrize("when", ["before", "after"])
def test_throttling_that_outlasts_the_retries_flags_exactly_the_throttled_rows(saga: TaxiWorld, clean: dict[str, Any], when: str) -> None:
    # Given the trips puts of four rows are throttled on every attempt, all four at once on the first,
    # before they land or after (a put that landed is then reported failed every time)
    throttle = Throttle("put", "trips", set(CHOSEN), code="ProvisionedThroughputExceededException", when=when, times=99).attach(saga)
    # When the batch is posted (Store fails on every attempt: a throttle is AWS's failure, so it is retried 8 times,
    # its rows flagged retryable, and Store runs once more after a wait, failing 9 times again; then the flag is final)
    state = post_batch(saga)
    # Then Store ran eighteen times (twice 8 retries) and the execution failed in store
    assert len(saga.retry_waits) == 16
    assert set(throttle.throttled.values()) == {18}
    (execution,) = state["executions"].values()
    assert execution[:2] == ("FAILED", "StoreFailed")
    rows = state["status"]
    unstored = set(CHOSEN) if when == "before" else set()
    # And every other good row is stored, as in the clean pass, with reason 0 everywhere
    assert set(state["final"]) == GOOD_IDS - unstored
    for row in GOOD_IDS - set(CHOSEN):
        assert state["final"][row] == clean["state"]["final"][row]
        assert all(int(rows[phase.value][row]["StatusReason"]) == 0 for phase in Phase)
    # And each throttled row that is not stored is flagged, per row, with reason 3 and the retryable error in all three
    # tables (no verdict on the row); one whose item did land is complete, and is not flagged
    for row in CHOSEN:
        flags = {phase: (int(rows[phase.value][row]["StatusReason"]), rows[phase.value][row].get("StatusDetail")) for phase in Phase}
        expected = (3, "retryable:TransientInfrastructureError") if row in unstored else (0, None)
        assert flags == dict.fromkeys(Phase, expected)
    # And the corrupted rows keep the reasons of the clean pass
    assert int(rows[Phase.VALIDATION.value][content_id(BAD_AT_VALIDATION)]["StatusReason"]) == 1
    assert int(rows[Phase.TRANSFORMATION.value][content_id(BAD_AT_TRANSFORMATION)]["StatusReason"]) == 2


@pytest.mark.parametrize("write", ["begin:validation", "begin:transformation", "begin:store", "put:trips"])
def test_a_lost_response_on_a_concurrent_row_write_ends_like_a_clean_pass(saga: TaxiWorld, clean: dict[str, Any], write: str) -> None:
    # Given row 7's `write` is applied, its response lost, and botocore sends it again once three
    # other rows' writes have started around it
    kind, table = write.split(":")
    lost = LoseResponse(Write(kind, table, row_of(7)), with_others=3).attach(saga)
    # When the batch is posted
    state = post_batch(saga)
    # Then the retry raced with other rows' writes and met the first write's effect: a status row is
    # rewritten to the same end, the trips item's own earlier put is recognised by its content
    assert lost.retried
    assert len(lost.started_meanwhile) >= 3
    assert lost.second_answer == ("ConditionalCheckFailedException" if kind == "put" else "ok")
    # And no task failed because of it, and the end is the clean pass's, every good row stored once
    assert saga.retry_waits == []
    assert_like_the_clean_pass(saga, state, clean)
    # (a put sent twice is answered "already there" the second time: its row is stored, by the first)
    once = GOOD_IDS - {row_of(7)} if kind == "put" else GOOD_IDS
    assert lost.applied_puts() == Counter(dict.fromkeys(once, 1))
