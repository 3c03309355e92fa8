"""The taxi saga under faults: a crash at every write boundary (before and after each write) of
every handler, redelivered by the workflow's own Retry, must end exactly like one clean pass; so
must every write that is applied, loses its response and is sent again by botocore.
Also: crashes and a lost response around the API's StartExecution with the client's retry,
executions of the same rows interleaved, and the same rows sent in other orders and groupings.

The phases write their rows on a pool, so writes are named by what they are (kind, table, row;
tests/faults/taxi_etl/saga_write_faults.py), not by their place in the run: each boundary of the
sweep is the same write in every run, and the other rows' writes go on around it, as they would.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.aws.faults import LostResponse, SimulatedCrash, WriteBoundaryCrasher
from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TRANSFORM_HANDLER, VALIDATE_HANDLER, TaxiWorld
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id
from tests.faults.taxi_etl.saga_write_faults import CrashAt, LoseResponse, Write, WriteTap, pooled_saga

LINES = sample_lines()
# One row of each fate: stored, flagged at validation, flagged at transformation, stored.
ROWS = {
    "one good row": [LINES[0]],
    "mixed batch": [LINES[0], bad_at_validation(LINES[1]), bad_at_transformation(LINES[2]), LINES[3]],
}
MIXED_BATCH = "\n".join(ROWS["mixed batch"])
SCENARIOS: dict[str, tuple[str, str]] = {"one good row": ("/trips", LINES[0]), "mixed batch": ("/trips/batch", MIXED_BATCH)}
# The writes of one clean pass, `kind:table:row` (row n is the scenario's n-th line): each phase's
# status row of every row it is given, the flag steps' updates of their rejected rows in every
# table the transaction touched, and the trips item of each good row. Pinned, so a changed write
# path shows up here first.
CLEAN_WRITES: dict[str, tuple[str, ...]] = {
    "one good row": ("begin:validation:r0", "begin:transformation:r0", "begin:store:r0", "put:trips:r0"),
    "mixed batch": (
        *(f"begin:validation:r{row}" for row in range(4)),
        "flag:validation:r1",
        *(f"begin:transformation:r{row}" for row in (0, 2, 3)),
        "flag:validation:r2",
        "flag:transformation:r2",
        *(f"begin:store:r{row}" for row in (0, 3)),
        *(f"put:trips:r{row}" for row in (0, 3)),
    ),
}


def named(scenario: str, label: str) -> Write:
    """The write `kind:table:rN` of a scenario, as the tap names it (the first time it is made)."""
    kind, table, row = label.split(":")
    return Write(kind, table, content_id(ROWS[scenario][int(row.removeprefix("r"))]))


@pytest.fixture
def saga(taxi_etl_template: Any) -> Iterator[TaxiWorld]:
    """tests/conftest.py's `saga`, with moto's DynamoDB calls atomic across threads, as DynamoDB's are."""
    with pooled_saga(taxi_etl_template) as world:
        yield world


def end_state(world: TaxiWorld) -> dict[str, Any]:
    """Everything a crash could leave different: tables, and each execution's outcome."""
    executions = {}
    for execution in world.executions():
        described = world.describe(execution["name"])
        executions[execution["name"]] = (described["status"], described.get("error"), described.get("cause"))
    return {
        "status": {phase.value: rows for phase, rows in world.status_rows().items()},
        "final": world.final_items(),
        "executions": executions,
    }


def run(world: TaxiWorld, scenario: str) -> dict[str, Any]:
    path, body = SCENARIOS[scenario]
    status, _ = world.post(path, body)
    assert status == 202
    return end_state(world)


@pytest.fixture(scope="module")
def clean_passes(taxi_etl_template: Any) -> dict[str, dict[str, Any]]:
    """Each scenario's end state after one clean pass, and its writes by name."""
    passes: dict[str, dict[str, Any]] = {}
    for scenario in SCENARIOS:
        with pooled_saga(taxi_etl_template) as world:
            tap = WriteTap().attach(world)
            passes[scenario] = {"state": run(world, scenario), "writes": tap.count()}
    return passes


@pytest.fixture(scope="module")
def taxi_etl_template(dev_templates: dict[str, Any]) -> Any:
    return dev_templates["Onceflow-dev-TaxiEtl"]


def test_clean_passes_write_what_the_schedule_assumes(clean_passes: dict[str, dict[str, Any]]) -> None:
    # Given one clean pass per scenario
    # When we name their writes
    # Then they are the pinned writes, each made once, and the mixed batch stored its two good rows only
    assert {scenario: clean["writes"] for scenario, clean in clean_passes.items()} == {
        scenario: Counter(named(scenario, label) for label in labels) for scenario, labels in CLEAN_WRITES.items()
    }
    assert set(clean_passes["mixed batch"]["state"]["final"]) == {content_id(LINES[0]), content_id(LINES[3])}


def boundaries() -> list[tuple[str, str, str]]:
    return [(scenario, when, label) for scenario, labels in CLEAN_WRITES.items() for when in ("before", "after") for label in labels]


@pytest.mark.parametrize(("scenario", "when", "label"), boundaries())
def test_a_crash_at_any_write_boundary_ends_like_a_clean_pass(
    saga: TaxiWorld, clean_passes: dict[str, dict[str, Any]], scenario: str, when: str, label: str
) -> None:
    # Given the handler that makes the write `label` dies just before or just after it (its other
    # rows' writes, on other threads, go on)
    crasher = CrashAt(named(scenario, label), when).attach(saga)
    # When the request is posted (the workflow's Retry re-runs the crashed task)
    state = run(saga, scenario)
    # Then the crash happened, the task was retried once, and the end state equals the clean pass
    assert crasher.crashed
    assert len(saga.retry_waits) == 1
    assert state == clean_passes[scenario]["state"]


def lost_responses() -> list[tuple[str, str]]:
    return [(scenario, label) for scenario, labels in CLEAN_WRITES.items() for label in labels]


@pytest.mark.parametrize(("scenario", "label"), lost_responses())
def test_a_write_applied_whose_response_is_lost_and_retried_by_the_sdk_ends_like_a_clean_pass(
    saga: TaxiWorld, clean_passes: dict[str, dict[str, Any]], scenario: str, label: str
) -> None:
    # Given the write `label` is applied, its response lost, and botocore sends it again
    lost = LoseResponse(named(scenario, label)).attach(saga)
    # When the request is posted
    state = run(saga, scenario)
    # Then the retry went out and met the first write's effect: a status begin or a flag is applied
    # again to the same end, and the trips item's own earlier put is recognised by its content
    assert lost.retried
    assert lost.second_answer == ("ConditionalCheckFailedException" if label.startswith("put:") else "ok")
    # and no task failed because of it: nothing was retried by the workflow, and the end state equals the clean pass
    assert saga.retry_waits == []
    assert state == clean_passes[scenario]["state"]


def test_start_execution_applied_whose_response_is_lost_starts_one_transaction(
    saga: TaxiWorld, clean_passes: dict[str, dict[str, Any]]
) -> None:
    # Given the API's StartExecution is applied, its response lost, and botocore sends it again
    lost = LostResponse(at=1).attach(saga.api_stepfunctions)
    path, body = SCENARIOS["one good row"]
    # When the request is posted once
    status, response = saga.post(path, body)
    # Then the client is told its request was accepted (not that it is a duplicate of itself),
    # and one execution ran: the end state is one clean pass
    assert lost.retried and lost.chosen == "StartExecution:"
    assert (status, response["duplicate"]) == (202, False)
    assert end_state(saga) == clean_passes["one good row"]["state"]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_start_execution_with_the_client_retry_is_one_transaction(
    saga: TaxiWorld, clean_passes: dict[str, dict[str, Any]], when: str
) -> None:
    # Given the API function dies just before or just after StartExecution
    crasher = WriteBoundaryCrasher(at=1, when=when).attach(saga.api_stepfunctions)
    path, body = SCENARIOS["one good row"]
    with pytest.raises(SimulatedCrash):
        saga.post(path, body)
    # When the client retries the same request
    status, response = saga.post(path, body)
    # Then the retry was served (a fresh start, or the first start found again), and the end state is one clean pass
    assert crasher.crashed
    assert (status, response["duplicate"]) == ((202, False) if when == "before" else (200, True))
    assert end_state(saga) == clean_passes["one good row"]["state"]


@pytest.mark.parametrize("handler", [VALIDATE_HANDLER, TRANSFORM_HANDLER, STORE_HANDLER])
def test_another_execution_of_the_same_row_in_the_middle_of_a_phase_changes_nothing(saga: TaxiWorld, handler: str) -> None:
    # Given a batch holding the same good row (and one more) starts while the single-row execution is
    # about to run `handler`, and runs to its end first
    row, other = LINES[0], LINES[5]
    batch = [{"StoreRequestId": content_id(row), "tuple": row}, {"StoreRequestId": content_id(other), "tuple": other}]
    interleaved: list[str] = []

    def start_the_batch(name: str, attempt: int) -> None:
        if name == handler and attempt == 1 and not interleaved:
            interleaved.append(name)
            saga.stepfunctions.start_execution(
                stateMachineArn=saga.state_machine_arn, name="cb-interleaved", input=json.dumps({"rows": batch})
            )

    saga.invocations.before = start_the_batch
    # When the single-row request is posted
    _, body = saga.post("/trips", row)
    # Then both executions succeeded, and each row is stored once with reason 0 everywhere
    assert interleaved == [handler]
    assert {name: status for name, (status, _, _) in end_state(saga)["executions"].items()} == {
        body["execution"]: "SUCCEEDED",
        "cb-interleaved": "SUCCEEDED",
    }
    assert set(saga.final_items()) == {content_id(row), content_id(other)}
    assert all(int(status["StatusReason"]) == 0 for rows in saga.status_rows().values() for status in rows.values())


def test_a_flag_step_crash_is_retried_and_flags_once(saga: TaxiWorld) -> None:
    # Given the flag function dies on its first attempt
    def crash_first_flag(name: str, attempt: int) -> None:
        if name == FLAG_HANDLER and attempt == 1:
            raise SimulatedCrash("flag step died")

    saga.invocations.before = crash_first_flag
    # When a row that fails validation is posted
    _, body = saga.post("/trips", bad_at_validation(LINES[0]))
    # Then the flag step ran again and the row carries reason 1 in its one table
    assert saga.invocations.calls.count(FLAG_HANDLER) == 2
    assert saga.describe(body["execution"])["error"] == "ValidationFailed"
    assert int(saga.status_rows()[Phase.VALIDATION][body["StoreRequestId"]]["StatusReason"]) == 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_same_rows_in_any_order_and_grouping_end_in_the_same_tables(saga: TaxiWorld, seed: int) -> None:
    # Given 30 real lines, 3 of them corrupted, sent once as shuffled single requests with repeats,
    # then again as shuffled batches of 7
    rng = random.Random(seed)
    lines = [*LINES[100:127], bad_at_validation(LINES[127]), bad_at_transformation(LINES[128]), bad_at_validation(LINES[129])]
    singles = lines + rng.sample(lines, 10)
    rng.shuffle(singles)
    send: list[Callable[[], Any]] = [lambda line=line: saga.post("/trips", line) for line in singles]
    regrouped = rng.sample(lines, len(lines))
    send += [lambda group=regrouped[i : i + 7]: saga.post("/trips/batch", "\n".join(group)) for i in range(0, len(regrouped), 7)]
    # When all of it is sent
    for request in send:
        request()
    # Then each good line is stored once, and each corrupted one is flagged in its phase (never stored)
    good = lines[:27]
    assert set(saga.final_items()) == {content_id(line) for line in good}
    rows = saga.status_rows()
    assert int(rows[Phase.VALIDATION][content_id(lines[27])]["StatusReason"]) == 1
    assert int(rows[Phase.TRANSFORMATION][content_id(lines[28])]["StatusReason"]) == 2
    # and exactly one execution per distinct single line plus one per batch ran
    assert len(saga.executions()) == len(lines) + len(range(0, len(regrouped), 7))
