"""The operator's redrive, `python -m ops.taxi_redrive`, against the embedded saga: the synthesized
state machine executed by moto, its tasks routed to the in-process handlers. The tool gets its own
clients (as the operator's process would), so faults injected into the saga's client hit only the
phases, and faults injected into the tool's clients hit only the tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools.aws.faults import LostResponse, SimulatedCrash, WriteBoundaryCrasher
from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines, with_columns
from devtools.taxi_world import FLAG_HANDLER, STORE_HANDLER, TaxiWorld, client
from ops import taxi_redrive
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import content_id, redrive_submission
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line

LINES = sample_lines()


def expected_item(store_request_id: str, line: str) -> dict[str, Any]:
    """What one clean pass of the row logic stores, computed without the saga."""
    validated = validate_line(line)
    assert isinstance(validated, Accepted)
    transformed = transform_tuple(validated.tuple)
    assert isinstance(transformed, Accepted)
    return final_item(store_request_id, transformed.tuple)


def redrive(world: TaxiWorld, *extra: str, dynamodb: Any = None, stepfunctions: Any = None) -> int:
    """Run the command with the tool's own clients; the executions it starts run before it returns."""
    with world.routing():
        return taxi_redrive.main(
            world.redrive_arguments(*extra), dynamodb=dynamodb or client("dynamodb"), stepfunctions=stepfunctions or client("stepfunctions")
        )


def listed(out: str, title: str = "redrive") -> list[str]:
    """The ids a run listed under `title` (redrive, complete, stored)."""
    return [line.split()[1] for line in out.splitlines() if line.startswith(f"  {title} ")]


@contextmanager
def failing_store(world: TaxiWorld) -> Iterator[None]:
    """The trips table refuses the phases' writes (a mis-granted table) while open. Not a throttle: AWS failing
    a call is retried longer and redriven once by the state machine itself (tests/faults/taxi_etl/test_taxi_transient_faults.py)."""
    trips_table = world.environment(STORE_HANDLER)["FINAL_TABLE"]

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == trips_table:
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"}}, "PutItem")

    world.dynamodb.meta.events.register("before-parameter-build.dynamodb.PutItem", refuse)
    try:
        yield
    finally:
        world.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.PutItem", refuse)


def flagged_at_store(world: TaxiWorld, lines: list[str]) -> list[str]:
    """Post each line while the store fails: every one ends flagged 3 in all three tables."""
    ids = []
    with failing_store(world):
        for line in lines:
            status, body = world.post("/trips", line)
            assert status == 202
            ids.append(body["StoreRequestId"])
    return ids


def reasons(world: TaxiWorld, store_request_id: str) -> dict[Phase, int]:
    return {phase: int(rows[store_request_id]["StatusReason"]) for phase, rows in world.status_rows().items() if store_request_id in rows}


def anchor(world: TaxiWorld, store_request_id: str) -> dict[str, Any]:
    return world.status_rows()[Phase.VALIDATION][store_request_id]


def execution_names(world: TaxiWorld) -> set[str]:
    return {execution["name"] for execution in world.executions()}


def snapshot(world: TaxiWorld) -> dict[str, Any]:
    executions = {execution["name"]: execution["status"] for execution in world.executions()}
    return {"status": world.status_rows(), "final": world.final_items(), "executions": executions}


def test_rows_flagged_by_a_failing_store_are_stored_by_a_redrive_once_the_store_is_fixed(saga: TaxiWorld, capsys: Any) -> None:
    # Given two single rows and a batch of two, all flagged at Store while the trips table refused writes
    singles = flagged_at_store(saga, LINES[:2])
    with failing_store(saga):
        _, batch = saga.post("/trips/batch", "\n".join(LINES[2:4]))
    ids = [*singles, *batch["StoreRequestIds"]]
    assert all(reasons(saga, store_request_id) == dict.fromkeys(Phase, 3) for store_request_id in ids)
    assert saga.final_items() == {}
    # When the table is fixed and the operator runs the redrive
    assert redrive(saga) == 0
    out = capsys.readouterr().out
    # Then each row was redriven by an execution of its own, named by its second generation, which succeeded
    assert sorted(listed(out)) == sorted(ids)
    for store_request_id in ids:
        name = redrive_submission(store_request_id, "", 2).execution_name
        assert name == f"r2-{store_request_id}"
        assert saga.describe(name)["status"] == "SUCCEEDED"
        assert json.loads(saga.describe(name)["input"]) == {
            "rows": [{"StoreRequestId": store_request_id, "tuple": anchor(saga, store_request_id)["RawTuple"]}]
        }
    # and the trips table holds exactly the four trips a clean pass stores, under their first ids
    assert saga.final_items() == {
        store_request_id: expected_item(store_request_id, line) for store_request_id, line in zip(ids, LINES[:4], strict=True)
    }
    # and no status row is flagged any more; the validation row remembers the generation and what it cleared
    for store_request_id in ids:
        assert reasons(saga, store_request_id) == dict.fromkeys(Phase, 0)
        row = anchor(saga, store_request_id)
        assert row["Generation"] == 2 and "RedrivePending" not in row and "StatusDetail" not in row
        assert row["RedrivenFlag"].startswith("3 error:ClientError")
    assert "redrove 4 rows, completed 0 pending redrives; 0 failed" in out


def test_a_dry_run_lists_what_it_would_redrive_and_changes_nothing(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store and a row flagged at Validation
    (at_store,) = flagged_at_store(saga, [LINES[0]])
    _, body = saga.post("/trips", bad_at_validation(LINES[1]))
    at_validation = body["StoreRequestId"]
    before = snapshot(saga)
    # When the operator runs a dry run
    assert redrive(saga, "--dry-run") == 0
    out = capsys.readouterr().out
    # Then both rows are listed with their phase, reason, detail, generation and message
    assert sorted(listed(out)) == sorted([at_store, at_validation])
    line = next(line for line in out.splitlines() if at_validation in line)
    assert "validation  reason 1  dropoff_before_pickup  generation 1" in line and "pick" in line
    assert "store  reason 3  error:ClientError  generation 1" in next(line for line in out.splitlines() if at_store in line)
    assert "dry run: would redrive 2 rows" in out
    # and nothing changed: status rows, trips and executions
    assert snapshot(saga) == before


def test_a_second_run_redrives_nothing(saga: TaxiWorld, capsys: Any) -> None:
    # Given rows flagged at Store, redriven once after the fix
    flagged_at_store(saga, LINES[:3])
    assert redrive(saga) == 0
    capsys.readouterr()
    after_first = snapshot(saga)
    # When the redrive runs again
    assert redrive(saga) == 0
    out = capsys.readouterr().out
    # Then it finds nothing to do, starts nothing and writes nothing
    assert listed(out) == []
    assert "redrove 0 rows, completed 0 pending redrives; 0 failed" in out
    assert snapshot(saga) == after_first


# The tool's writes for one row: the claim (TransactWriteItems), StartExecution, the end of pending (UpdateItem).
TOOL_WRITES = 3


@pytest.mark.parametrize(("when", "at"), [(when, at) for at in range(1, TOOL_WRITES + 1) for when in ("before", "after")])
def test_a_redrive_that_crashes_at_any_write_is_completed_by_a_rerun_and_stores_the_row_once(
    saga: TaxiWorld, capsys: Any, when: str, at: int
) -> None:
    # Given a row flagged at Store, the store fixed, and the tool's process dying at one of its write boundaries
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    dynamodb, stepfunctions = client("dynamodb"), client("stepfunctions")
    crasher = WriteBoundaryCrasher(at=at, when=when).attach(dynamodb, stepfunctions)
    with pytest.raises(SimulatedCrash):
        redrive(saga, dynamodb=dynamodb, stepfunctions=stepfunctions)
    tables = saga.environment(FLAG_HANDLER)
    status_tables = "+".join(tables[f"{phase}_STATUS_TABLE"] for phase in ("VALIDATION", "TRANSFORMATION", "STORE"))
    tool_writes = [f"TransactWriteItems:{status_tables}", "StartExecution:", f"UpdateItem:{tables['VALIDATION_STATUS_TABLE']}"]
    assert crasher.operations == tool_writes[: crasher.writes]
    capsys.readouterr()
    # When the operator runs it again
    assert redrive(saga) == 0
    out = capsys.readouterr().out
    # Then the row is stored exactly once, by the one execution of its second generation
    assert saga.final_items() == {store_request_id: expected_item(store_request_id, LINES[0])}
    assert execution_names(saga) == {store_request_id, f"r2-{store_request_id}"}
    assert saga.describe(f"r2-{store_request_id}")["status"] == "SUCCEEDED"
    # and its status rows say so: reason 0 everywhere, generation 2, no longer pending
    assert reasons(saga, store_request_id) == dict.fromkeys(Phase, 0)
    assert anchor(saga, store_request_id)["Generation"] == 2 and "RedrivePending" not in anchor(saga, store_request_id)
    # and a crash between the claim and the end of pending left it pending: the rerun completed it, not claimed it again
    left_pending = (when, at) in {("after", 1), ("before", 2), ("after", 2), ("before", 3)}
    nothing_written = (when, at) == ("before", 1)
    assert listed(out, "complete") == ([store_request_id] if left_pending else [])
    assert listed(out) == ([store_request_id] if nothing_written else [])
    # and a third run has nothing left to do
    assert redrive(saga) == 0
    assert "redrove 0 rows, completed 0 pending redrives" in capsys.readouterr().out


@pytest.mark.parametrize("at", range(1, TOOL_WRITES + 1))
def test_a_redrive_write_applied_whose_response_is_lost_is_recognised_and_the_row_is_redriven_in_one_run(
    saga: TaxiWorld, capsys: Any, at: int
) -> None:
    # Given a row flagged at Store, the store fixed, and the tool's write number `at` applied, its
    # response lost, and sent again by botocore
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    dynamodb, stepfunctions = client("dynamodb"), client("stepfunctions")
    lost = LostResponse(at=at).attach(dynamodb, stepfunctions)
    # When the operator runs the redrive once
    assert redrive(saga, dynamodb=dynamodb, stepfunctions=stepfunctions) == 0
    out = capsys.readouterr().out
    # Then the retry met the write's own effect, and the tool took it as its own: the row was
    # redriven as a new start, not reported as changed by someone else or left pending
    assert lost.retried
    assert listed(out) == [store_request_id]
    assert f"as r2-{store_request_id} (started)" in out
    assert "0 failed" in out
    # and the row is stored once, by its second generation, and no longer pending
    assert saga.final_items() == {store_request_id: expected_item(store_request_id, LINES[0])}
    assert execution_names(saga) == {store_request_id, f"r2-{store_request_id}"}
    assert reasons(saga, store_request_id) == dict.fromkeys(Phase, 0)
    assert anchor(saga, store_request_id)["Generation"] == 2 and "RedrivePending" not in anchor(saga, store_request_id)


def test_a_rival_run_that_claims_the_row_between_our_read_and_our_claim_wins_and_ours_reports_it(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store, and a second operator's run that redrives it after our run read
    # it and just before our claim (so our claim finds the rival's claim, with another token)
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    dynamodb = client("dynamodb")
    rival_codes: list[int] = []

    def rival_claims_first(**_: Any) -> None:
        if not rival_codes:
            rival_codes.append(redrive(saga))

    dynamodb.meta.events.register("before-call.dynamodb.TransactWriteItems", rival_claims_first)
    # When our run claims
    assert redrive(saga, dynamodb=dynamodb) == 1
    out = capsys.readouterr().out
    # Then the rival redrove the row, and ours wrote nothing and reports that the row changed
    assert rival_codes == [0]
    assert f"NOT REDRIVEN {store_request_id}: its status rows changed after this run read them" in out
    # and the row was redriven once: one second generation, stored once
    assert execution_names(saga) == {store_request_id, f"r2-{store_request_id}"}
    assert anchor(saga, store_request_id)["Generation"] == 2 and "RedrivePending" not in anchor(saga, store_request_id)
    assert saga.final_items() == {store_request_id: expected_item(store_request_id, LINES[0])}


def test_a_start_refused_leaves_the_row_pending_exits_1_and_a_rerun_completes_it(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store, the store fixed, and Step Functions refusing the tool's StartExecution
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    stepfunctions = client("stepfunctions")

    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"}}, "StartExecution")

    stepfunctions.meta.events.register("before-call.sfn.StartExecution", refuse)
    # When the redrive runs
    assert redrive(saga, stepfunctions=stepfunctions) == 1
    out = capsys.readouterr().out
    # Then the row is listed as not redriven, and left claimed and pending (no longer flagged, not lost)
    assert f"NOT REDRIVEN {store_request_id}: StartExecution failed (AccessDeniedException)" in out
    assert anchor(saga, store_request_id)["RedrivePending"] is True
    # When the permission is fixed and a dry run, then a real run, follow
    assert redrive(saga, "--dry-run") == 0
    assert listed(capsys.readouterr().out, "complete") == [store_request_id]
    assert redrive(saga) == 0
    # Then the pending redrive was completed and the row stored
    assert saga.final_items() == {store_request_id: expected_item(store_request_id, LINES[0])}
    assert execution_names(saga) == {store_request_id, f"r2-{store_request_id}"}


@pytest.fixture
def four_flags(saga: TaxiWorld) -> dict[str, str]:
    """One row of each kind of flag, by a name for the test: two validation rules, transformation, store."""
    rows = {
        "pickup_order": bad_at_validation(LINES[0]),
        "vendor": with_columns(LINES[1], c0="9"),
        "local_time": bad_at_transformation(LINES[2]),
    }
    ids = {}
    for name, line in rows.items():
        _, body = saga.post("/trips", line)
        ids[name] = body["StoreRequestId"]
    (ids["store"],) = flagged_at_store(saga, [LINES[3]])
    return ids


# Each filter, and the result it selects, over the same four flagged rows (a dry run changes nothing:
# test_a_dry_run_lists_what_it_would_redrive_and_changes_nothing), so one world serves them all.
FILTERS_AND_SELECTIONS = [
    (["--phase", "validation"], {"pickup_order", "vendor"}),
    (["--reason", "2"], {"local_time"}),
    (["--detail", "error:*"], {"store"}),
    (["--phase", "validation", "--detail", "vendor"], {"vendor"}),
    (["--id", "<pickup_order>", "--id", "<store>"], {"pickup_order", "store"}),
    (["--phase", "transformation", "--detail", "vendor"], set()),
    ([], {"pickup_order", "vendor", "local_time", "store"}),
]


def test_filters_select_only_the_matching_rows(saga: TaxiWorld, four_flags: dict[str, str], capsys: Any) -> None:
    # Given four rows flagged for four different reasons
    for filters, selected in FILTERS_AND_SELECTIONS:
        argv = [four_flags[value[1:-1]] if value.startswith("<") else value for value in filters]
        # When a dry run is filtered
        assert redrive(saga, *argv, "--dry-run") == 0
        # Then it lists exactly the matching rows
        assert sorted(listed(capsys.readouterr().out)) == sorted(four_flags[name] for name in selected), filters


def test_a_filtered_run_redrives_the_matching_rows_and_leaves_the_others_flagged(
    saga: TaxiWorld, four_flags: dict[str, str], capsys: Any
) -> None:
    # Given four rows flagged for four reasons, and the store fixed
    before = saga.status_rows()
    # When only the rows the store failed are redriven
    assert redrive(saga, "--detail", "error:*") == 0
    # Then that row is stored under its generation 2
    assert set(saga.final_items()) == {four_flags["store"]}
    assert anchor(saga, four_flags["store"])["Generation"] == 2
    # and the other three are untouched: same status rows, no redrive execution
    after = saga.status_rows()
    for name in ("pickup_order", "vendor", "local_time"):
        store_request_id = four_flags[name]
        assert {phase: rows.get(store_request_id) for phase, rows in after.items()} == {
            phase: rows.get(store_request_id) for phase, rows in before.items()
        }
        assert f"r2-{store_request_id}" not in execution_names(saga)


def test_a_row_its_redrive_flags_again_shows_its_new_generation_and_can_be_redriven_later(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    # When it is redriven before the store is fixed (the bug is still there)
    with failing_store(saga):
        assert redrive(saga) == 0
    capsys.readouterr()
    # Then its second generation ran and was flagged again, in all three tables, with nothing stored
    assert saga.describe(f"r2-{store_request_id}")["error"] == "StoreFailed"
    assert reasons(saga, store_request_id) == dict.fromkeys(Phase, 3)
    row = anchor(saga, store_request_id)
    assert (row["Generation"], row["StatusDetail"]) == (2, "error:ClientError")
    assert saga.final_items() == {}
    # and a dry run shows it flagged, in generation 2
    assert redrive(saga, "--dry-run") == 0
    assert f"{store_request_id}  store  reason 3  error:ClientError  generation 2" in capsys.readouterr().out
    # When the store is fixed and the redrive runs again
    assert redrive(saga) == 0
    # Then the third generation stores the trip once, and the row is clear
    assert saga.describe(f"r3-{store_request_id}")["status"] == "SUCCEEDED"
    assert saga.final_items() == {store_request_id: expected_item(store_request_id, LINES[0])}
    assert reasons(saga, store_request_id) == dict.fromkeys(Phase, 0)
    assert anchor(saga, store_request_id)["Generation"] == 3


def test_a_flagged_row_whose_trip_is_stored_is_not_redriven(saga: TaxiWorld, capsys: Any) -> None:
    # Given a row flagged at Store as a StoreConflict: its id already holds another trip
    other = expected_item("k-reused", LINES[1])
    from runtime.shared.dynamo import to_attributes

    saga.dynamodb.put_item(TableName=saga.environment(STORE_HANDLER)["FINAL_TABLE"], Item=to_attributes(other))
    saga.post("/trips", LINES[0], idempotency_key="reused")
    assert reasons(saga, "k-reused") == dict.fromkeys(Phase, 3)
    # When the redrive runs
    assert redrive(saga) == 0
    out = capsys.readouterr().out
    # Then the row is listed as already stored and left alone: still flagged, the stored trip unchanged, nothing started
    assert listed(out, "stored") == ["k-reused"] and listed(out) == []
    assert reasons(saga, "k-reused") == dict.fromkeys(Phase, 3)
    assert saga.final_items() == {"k-reused": other}
    assert execution_names(saga) == {"k-reused"}


def test_resources_come_from_the_stack_outputs(saga: TaxiWorld, capsys: Any) -> None:
    # Given a stack whose outputs name the saga's resources (as the TaxiEtl stack's do)
    tables = saga.environment(FLAG_HANDLER)
    outputs = {
        "StateMachineArn": saga.state_machine_arn,
        "TripsTableName": tables["FINAL_TABLE"],
        "ValidationStatusTableName": tables["VALIDATION_STATUS_TABLE"],
        "TransformationStatusTableName": tables["TRANSFORMATION_STATUS_TABLE"],
        "StoreStatusTableName": tables["STORE_STATUS_TABLE"],
    }
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    cloudformation = client("cloudformation")
    cloudformation.create_stack(StackName="Onceflow-dev-TaxiEtl", TemplateBody=json.dumps(template))
    (store_request_id,) = flagged_at_store(saga, [LINES[0]])
    # When the redrive is given the stack only
    with saga.routing():
        code = taxi_redrive.main(["--stack", "Onceflow-dev-TaxiEtl"], cloudformation=cloudformation)
    # Then it found the tables and the state machine, and redrove the row
    assert code == 0
    assert listed(capsys.readouterr().out) == [store_request_id]
    assert set(saga.final_items()) == {store_request_id}


@pytest.mark.parametrize(
    "argv",
    [
        ["--phase", "store", "--reason", "1"],
        ["--reason", "7"],
        ["--id", "not an id"],
        ["--limit", "0"],
        ["--phase", "nowhere"],
    ],
)
def test_usage_errors_exit_2(saga: TaxiWorld, argv: list[str]) -> None:
    # Given a command line the tool cannot act on
    # When it runs
    with pytest.raises(SystemExit) as exited:
        redrive(saga, *argv)
    # Then it exits with 2 and changes nothing
    assert exited.value.code == 2
    assert saga.executions() == []


def test_missing_resources_are_a_usage_error(capsys: Any) -> None:
    # Given neither --stack nor the resource names
    # When the tool runs
    with pytest.raises(SystemExit) as exited:
        taxi_redrive.main(["--dry-run"])
    # Then it exits with 2, naming what it needs
    assert exited.value.code == 2
    assert "--stack" in capsys.readouterr().err


def test_an_unknown_id_is_listed_and_exits_1(saga: TaxiWorld, capsys: Any) -> None:
    # Given a stored row and an id no transaction ever had
    _, body = saga.post("/trips", LINES[0])
    # When both are named
    code = redrive(saga, "--id", body["StoreRequestId"], "--id", "k-never-sent")
    out = capsys.readouterr().out
    # Then the unknown id is listed as not redriven (exit 1) and the stored one as needing nothing
    assert code == 1
    assert "NOT REDRIVEN k-never-sent: no status row has this id" in out
    assert f"not flagged: {body['StoreRequestId']}" in out
    assert execution_names(saga) == {body["StoreRequestId"]}


def test_limit_redrives_at_most_that_many_rows(saga: TaxiWorld, capsys: Any) -> None:
    # Given three rows flagged at Store, and the store fixed
    ids = flagged_at_store(saga, LINES[:3])
    # When the redrive is limited to two
    assert redrive(saga, "--limit", "2") == 0
    out = capsys.readouterr().out
    # Then two rows (in id order) are stored and the third is reported held back, still flagged
    assert set(saga.final_items()) == set(sorted(ids)[:2])
    assert "1 more over --limit 2" in out
    assert reasons(saga, sorted(ids)[2]) == dict.fromkeys(Phase, 3)


def test_redrive_names_depend_only_on_the_id_and_the_generation() -> None:
    # Given ids of every length a StoreRequestId may have
    short, longest = content_id(LINES[0]), "k" * 80
    # When their redrive submissions are built
    first, again, third = (
        redrive_submission(short, LINES[0], 2),
        redrive_submission(short, LINES[0], 2),
        redrive_submission(short, LINES[0], 3),
    )
    hashed = redrive_submission(longest, LINES[0], 2)
    # Then the same (id, generation) gives the same name and input, another generation another name
    assert (first.execution_name, first.execution_input()) == (again.execution_name, again.execution_input())
    assert first.execution_name == f"r2-{short}" and third.execution_name == f"r3-{short}"
    # and a name that would be too long for Step Functions is hashed, still under its generation
    assert hashed.execution_name.startswith("rh2-") and len(hashed.execution_name) <= 80
    assert json.loads(hashed.execution_input()) == {"rows": [{"StoreRequestId": longest, "tuple": LINES[0]}]}
