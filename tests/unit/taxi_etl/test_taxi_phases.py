"""The saga's phases and its flag step (runtime/taxi_etl/phases.py) on in-memory status and final tables.

The fakes implement the store ports with the DynamoDB adapters' semantics (runtime/taxi_etl/store.py):
begin() never clears a flag and answers with it; flag() keeps the first raw tuple; put_once() writes an
item once, answers ALREADY_STORED for the same item and raises StoreConflict for a different one. Every
call is recorded in one journal shared by all tables, so the order of writes across tables is visible.
The rows are real NYC TLC lines from tests/data/taxi_etl/yellow_2019-10_sample.csv.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from runtime.taxi_etl.errors import StoreConflict
from runtime.taxi_etl.final_table import FinalTable, PutOutcome
from runtime.taxi_etl.flag_step import CaughtError, FlagOutcome, FlagRequest, flag, parse_flag_request
from runtime.taxi_etl.models import Phase, PhaseResult, Row, Verdict
from runtime.taxi_etl.phases import run_transformation, run_validation
from runtime.taxi_etl.store import ChunkStatusTable, Flagged
from runtime.taxi_etl.store import StatusRow as StoredStatusRow
from runtime.taxi_etl.store_phase import run_store
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import Accepted, transform_tuple, validate_line
from runtime.taxi_etl.trips import Reason, Rule

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"


@cache
def sample_lines() -> tuple[str, ...]:
    return tuple(SAMPLE.read_text(encoding="utf-8").splitlines())


def sample_line(number: int) -> str:
    """Line `number` of the sample file as an editor numbers it (1 is the header)."""
    return sample_lines()[number - 1]


GOOD = sample_line(2)
OTHER = sample_line(3)
THIRD = sample_line(4)
BAD_LOCATION = GOOD.replace(",138,", ",999,", 1)  # pu_location_id 999 is no taxi zone
# GOOD moved into the spring-forward gap: valid as a line, but 02:30 on 2019-03-10 never happened in New York.
IN_THE_GAP = GOOD.replace("2019-10-23T16:39:42.000", "2019-03-10T02:30:00.000").replace(
    "2019-10-23T17:14:10.000", "2019-03-10T03:14:10.000"
)
NOT_A_TRANSFORMED_TUPLE = "VeriFone Inc.\tnot a time"


def validated(line: str) -> str:
    outcome = validate_line(line)
    assert isinstance(outcome, Accepted), outcome
    return outcome.tuple


def transformed(line: str) -> str:
    outcome = transform_tuple(validated(line))
    assert isinstance(outcome, Accepted), outcome
    return outcome.tuple


def given_to(phase: Phase, line: str) -> str:
    """The tuple `phase` is given for `line`: the raw line, the validated tuple, or the transformed tuple."""
    return {Phase.VALIDATION: line, Phase.TRANSFORMATION: validated(line), Phase.STORE: transformed(line)}[phase]


# --- the fakes ------------------------------------------------------------------------------------

Journal = list[tuple[str, str, str]]  # (table, call, StoreRequestId), in call order across all tables


@dataclass(frozen=True, slots=True)
class StatusRow:
    raw_tuple: str
    reason: Reason
    detail: str = ""
    message: str = ""


@dataclass
class FakeStatusTable:
    name: str
    journal: Journal = field(default_factory=list)
    rows: dict[str, StatusRow] = field(default_factory=dict)

    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        self.journal.append((self.name, "begin", store_request_id))
        current = self.rows.get(store_request_id)
        if current is not None and current.reason != Reason.OK:
            return Flagged(current.reason, current.detail, current.message)  # a flag is never cleared
        self.rows[store_request_id] = StatusRow(raw_tuple, Reason.OK)
        return None

    def flag(self, store_request_id: str, raw_tuple: str, reason: Reason, detail: str, message: str) -> None:
        self.journal.append((self.name, "flag", store_request_id))
        current = self.rows.get(store_request_id)
        raw = current.raw_tuple if current is not None else raw_tuple  # if_not_exists(RawTuple)
        self.rows[store_request_id] = StatusRow(raw, reason, detail or "unspecified", message or detail or "unspecified")

    def clear_retryable(self, store_request_id: str, reason: Reason) -> bool:
        self.journal.append((self.name, "clear", store_request_id))
        current = self.rows.get(store_request_id)
        if current is None or current.reason != reason or not current.detail.startswith("retryable:"):
            return False  # the condition: only this phase's retryable flag is cleared
        self.rows[store_request_id] = StatusRow(current.raw_tuple, Reason.OK)
        return True

    def status_rows(self, store_request_ids: Iterable[str]) -> dict[str, StoredStatusRow]:
        self.journal.append((self.name, "read", ",".join(sorted(store_request_ids))))
        return {
            key: StoredStatusRow(key, row.raw_tuple, int(row.reason), row.detail or None, row.message or None)
            for key in store_request_ids
            if (row := self.rows.get(key)) is not None
        }

    def reason_of(self, store_request_id: str) -> Reason | None:
        current = self.rows.get(store_request_id)
        return None if current is None else current.reason

    def flags(self) -> list[str]:
        return [store_request_id for table, call, store_request_id in self.journal if table == self.name and call == "flag"]


@dataclass
class FakeFinalTable:
    journal: Journal = field(default_factory=list)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def put_once(self, item: Mapping[str, Any]) -> PutOutcome:
        store_request_id = str(item["StoreRequestId"])
        self.journal.append(("final", "put", store_request_id))
        existing = self.items.get(store_request_id)
        if existing is None:
            self.items[store_request_id] = dict(item)
            return PutOutcome.STORED
        if existing != dict(item):
            raise StoreConflict(f"StoreRequestId {store_request_id} is already stored with different content")
        return PutOutcome.ALREADY_STORED

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return {key: dict(self.items[key]) for key in set(store_request_ids) if key in self.items}


_status_port: ChunkStatusTable = FakeStatusTable("port-check")  # the fakes implement the ports (checked by type checkers)
_final_port: FinalTable = FakeFinalTable()


@dataclass
class Tables:
    """The saga's four tables sharing one journal."""

    journal: Journal = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = {phase: FakeStatusTable(phase.value, self.journal) for phase in Phase}
        self.final = FakeFinalTable(self.journal)

    @property
    def validation(self) -> FakeStatusTable:
        return self.status[Phase.VALIDATION]

    @property
    def transformation(self) -> FakeStatusTable:
        return self.status[Phase.TRANSFORMATION]

    @property
    def store(self) -> FakeStatusTable:
        return self.status[Phase.STORE]

    def ports(self) -> dict[Phase, ChunkStatusTable]:
        return dict(self.status)

    def reasons(self, store_request_id: str) -> dict[Phase, Reason | None]:
        return {phase: table.reason_of(store_request_id) for phase, table in self.status.items()}


# --- run_validation -------------------------------------------------------------------------------


def test_validation_passes_a_good_row_and_rejects_a_bad_one_with_its_rule() -> None:
    # Given a good trip and one whose pick-up zone is 999
    tables = Tables()
    rows = [Row("c-good", GOOD), Row("c-bad", BAD_LOCATION)]
    # When validation runs
    result = run_validation(rows, tables.validation)
    # Then the good row passes with its validated tuple
    assert result.passed == [Verdict("c-good", validated(GOOD))]
    # And the bad one is rejected with reason 1, the rule as detail, and the row as it was given
    (rejected,) = result.rejected
    assert (rejected.store_request_id, rejected.tuple, rejected.reason, rejected.detail) == (
        "c-bad",
        BAD_LOCATION,
        Reason.VALIDATION,
        "pickup_location",
    )
    assert "'999'" in rejected.message


def test_validation_writes_every_row_status_in_order_before_judging_it() -> None:
    # Given two rows, one of them bad
    tables = Tables()
    rows = [Row("c-good", GOOD), Row("c-bad", BAD_LOCATION)]
    # When validation runs
    run_validation(rows, tables.validation)
    # Then each row was begun in the validation table, in input order, and nothing else was written
    assert tables.journal == [("validation", "begin", "c-good"), ("validation", "begin", "c-bad")]
    # And both rows have an in-progress status (reason 0) with the raw line: the flag step has a row to flag
    assert tables.validation.rows == {"c-good": StatusRow(GOOD, Reason.OK), "c-bad": StatusRow(BAD_LOCATION, Reason.OK)}


def test_a_row_flagged_earlier_stays_flagged_with_the_same_reason_and_is_not_validated() -> None:
    # Given the id of a good line that an earlier transaction flagged in validation (vendor) and another it flagged in store
    tables = Tables()
    tables.validation.rows["c-old"] = StatusRow("9,old line", Reason.VALIDATION, "vendor", "vendor_id: '9' is not a TLC vendor code")
    tables.validation.rows["c-stored"] = StatusRow("raw", Reason.STORE, "error:StoreConflict", "conflict")
    # When validation runs on those ids with a good line (with a blank a validation would strip)
    line = " " + GOOD
    result = run_validation([Row("c-old", line), Row("c-stored", line)], tables.validation)
    # Then each is rejected again with its earlier reason, detail and message, and the line left as given (not validated)
    assert result.verdicts == (
        Verdict("c-old", line, Reason.VALIDATION, "vendor", "vendor_id: '9' is not a TLC vendor code"),
        Verdict("c-stored", line, Reason.STORE, "error:StoreConflict", "conflict"),
    )
    # And the flags are untouched
    assert tables.validation.rows["c-old"] == StatusRow(
        "9,old line", Reason.VALIDATION, "vendor", "vendor_id: '9' is not a TLC vendor code"
    )
    assert tables.validation.rows["c-stored"].reason == Reason.STORE


def test_a_retried_validation_rewrites_its_own_in_progress_row() -> None:
    # Given a row begun by a first attempt that did not finish (reason 0)
    tables = Tables()
    run_validation([Row("c-1", GOOD)], tables.validation)
    # When the phase is retried
    result = run_validation([Row("c-1", GOOD)], tables.validation)
    # Then the row is validated again, not treated as flagged
    assert result.verdicts == (Verdict("c-1", validated(GOOD)),)
    assert tables.validation.rows["c-1"] == StatusRow(GOOD, Reason.OK)


# --- run_transformation ---------------------------------------------------------------------------


def test_transformation_passes_validated_rows_and_rejects_the_gap_with_reason_2() -> None:
    # Given a validated good row and a validated row whose pick-up is in the spring-forward gap
    tables = Tables()
    rows = [Row("c-good", validated(GOOD)), Row("c-gap", validated(IN_THE_GAP))]
    # When transformation runs
    result = run_transformation(rows, tables.transformation)
    # Then the good row carries its transformed tuple
    assert result.passed == [Verdict("c-good", transformed(GOOD))]
    # And the gap row is rejected with reason 2 and the rule, with the tuple it was given
    (rejected,) = result.rejected
    assert (rejected.store_request_id, rejected.tuple, rejected.reason, rejected.detail) == (
        "c-gap",
        validated(IN_THE_GAP),
        Reason.TRANSFORMATION,
        Rule.NONEXISTENT_LOCAL_TIME.value,
    )
    # And both rows were begun in the transformation table only, before the result
    assert tables.journal == [("transformation", "begin", "c-good"), ("transformation", "begin", "c-gap")]
    assert tables.transformation.rows["c-gap"] == StatusRow(validated(IN_THE_GAP), Reason.OK)


def test_transformation_rejects_a_tuple_validation_did_not_produce() -> None:
    # Given a raw line with blanks around a cell (validation would rewrite it)
    tables = Tables()
    # When transformation runs on it
    (verdict,) = run_transformation([Row("c-raw", " " + GOOD)], tables.transformation).verdicts
    # Then it is rejected in transformation as a malformed tuple
    assert (verdict.reason, verdict.detail) == (Reason.TRANSFORMATION, Rule.MALFORMED_TUPLE.value)


def test_a_row_flagged_in_transformation_is_not_transformed_again() -> None:
    # Given a row an earlier transaction flagged in the transformation table
    tables = Tables()
    tables.transformation.rows["c-1"] = StatusRow("t", Reason.TRANSFORMATION, "nonexistent_local_time", "gap")
    # When transformation runs on a good tuple under that id
    result = run_transformation([Row("c-1", validated(GOOD))], tables.transformation)
    # Then it is rejected with the same reason and keeps the tuple it was given
    assert result.verdicts == (Verdict("c-1", validated(GOOD), Reason.TRANSFORMATION, "nonexistent_local_time", "gap"),)


# --- run_store ------------------------------------------------------------------------------------


def test_store_writes_each_status_before_its_item() -> None:
    # Given two transformed rows
    tables = Tables()
    rows = [Row("c-a", transformed(GOOD)), Row("c-b", transformed(OTHER))]
    # When the store phase runs
    report = run_store(rows, tables.store, tables.final)
    # Then for each row the store status was begun, then the item put, row by row
    assert tables.journal == [
        ("store", "begin", "c-a"),
        ("final", "put", "c-a"),
        ("store", "begin", "c-b"),
        ("final", "put", "c-b"),
    ]
    # And the items are the typed items of the tuples, and the statuses hold the transformed tuples
    assert tables.final.items == {"c-a": final_item("c-a", transformed(GOOD)), "c-b": final_item("c-b", transformed(OTHER))}
    assert tables.store.rows["c-a"] == StatusRow(transformed(GOOD), Reason.OK)
    assert (report.stored, report.already_stored) == (2, 0)
    assert report.result.verdicts == (Verdict("c-a", transformed(GOOD)), Verdict("c-b", transformed(OTHER)))


def test_store_twice_writes_one_item_and_the_second_is_already_stored() -> None:
    # Given a transformed row stored once
    tables = Tables()
    rows = [Row("c-a", transformed(GOOD))]
    first = run_store(rows, tables.store, tables.final)
    # When the store phase runs again for it (a redelivery)
    second = run_store(rows, tables.store, tables.final)
    # Then there is still one item, the same
    assert tables.final.items == {"c-a": final_item("c-a", transformed(GOOD))}
    # And the first run stored it, the second found it already stored; both pass the row
    assert (first.stored, first.already_stored) == (1, 0)
    assert (second.stored, second.already_stored) == (0, 1)
    assert first.result == second.result == PhaseResult((Verdict("c-a", transformed(GOOD)),))


def test_a_conflicting_row_does_not_hold_back_the_others_then_raises() -> None:
    # Given c-b already stored with another trip's item
    tables = Tables()
    other_item = final_item("c-b", transformed(THIRD))
    tables.final.items["c-b"] = other_item
    rows = [Row("c-a", transformed(GOOD)), Row("c-b", transformed(OTHER)), Row("c-c", transformed(THIRD))]
    # When the store phase runs on three rows, c-b in the middle
    with pytest.raises(StoreConflict) as raised:
        run_store(rows, tables.store, tables.final)
    # Then the conflict names c-b alone
    assert str(raised.value) == "1 row(s) already stored with different content: c-b"
    # And the rows around it were stored, while c-b's item is unchanged
    assert tables.final.items == {
        "c-a": final_item("c-a", transformed(GOOD)),
        "c-b": other_item,
        "c-c": final_item("c-c", transformed(THIRD)),
    }


def test_a_malformed_tuple_is_rejected_in_store_and_not_stored() -> None:
    # Given a row whose tuple is not a transformed tuple, and a good one
    tables = Tables()
    rows = [Row("c-bad", NOT_A_TRANSFORMED_TUPLE), Row("c-good", transformed(GOOD))]
    # When the store phase runs
    report = run_store(rows, tables.store, tables.final)
    # Then the bad row is rejected with reason 3 and malformed_tuple, after its status was written
    (rejected,) = report.result.rejected
    assert (rejected.store_request_id, rejected.reason, rejected.detail) == ("c-bad", Reason.STORE, Rule.MALFORMED_TUPLE.value)
    assert tables.store.rows["c-bad"] == StatusRow(NOT_A_TRANSFORMED_TUPLE, Reason.OK)
    # And only the good row was stored
    assert list(tables.final.items) == ["c-good"] and report.stored == 1


def test_a_row_flagged_in_store_is_not_stored() -> None:
    # Given a row flagged in the store table by an earlier transaction
    tables = Tables()
    tables.store.rows["c-a"] = StatusRow("t", Reason.STORE, "error:StoreConflict", "conflict")
    # When the store phase runs on a good tuple under that id
    report = run_store([Row("c-a", transformed(GOOD))], tables.store, tables.final)
    # Then nothing is put, and the row is rejected with its earlier reason
    assert tables.final.items == {} and ("final", "put", "c-a") not in tables.journal
    assert report.result.verdicts == (Verdict("c-a", transformed(GOOD), Reason.STORE, "error:StoreConflict", "conflict"),)
    assert (report.stored, report.already_stored) == (0, 0)


# --- flag: a phase's own rejections ---------------------------------------------------------------


def begin_through(tables: Tables, phase: Phase, rows: list[Row]) -> None:
    """The status rows the saga has written by the time `phase` has run: in-progress rows in every touched table."""
    for touched in phase.touched:
        for row in rows:
            assert tables.status[touched].begin(row.store_request_id, row.tuple) is None


@pytest.mark.parametrize("phase", list(Phase))
def test_flagging_rejections_sets_the_code_in_every_touched_table_and_nowhere_else(phase: Phase) -> None:
    # Given two rows that went as far as `phase`, which rejected the second
    tables = Tables()
    rows = [Row("c-ok", "ok tuple"), Row("c-no", "no tuple")]
    begin_through(tables, phase, rows)
    state = PhaseResult((Verdict("c-ok", "ok tuple"), Verdict("c-no", "no tuple", phase.reason, "some_rule", "why"))).to_json()
    # When the flag step runs with the phase's output
    outcome = flag(parse_flag_request({"phase": phase.value, "state": state}), tables.ports(), tables.final)
    # Then the rejected row has the phase's code in each table the phase touched, and no row in the others
    expected = {other: (phase.reason if other in phase.touched else None) for other in Phase}
    assert tables.reasons("c-no") == expected
    for touched in phase.touched:
        assert tables.status[touched].rows["c-no"] == StatusRow("no tuple", phase.reason, "some_rule", "why")
    # And the passed row is left in progress, flagged nowhere
    assert all(table.flags() == ["c-no"] for table in (tables.status[touched] for touched in phase.touched))
    assert all(tables.status[touched].rows["c-ok"].reason == Reason.OK for touched in phase.touched)
    # And the execution fails with the phase's name, one row counted
    assert outcome.error == phase.failure_name and outcome.flagged == 1
    assert outcome.cause.startswith(f"1 row(s) flagged in {', '.join(touched.value for touched in phase.touched)} status")


def test_a_rejection_carrying_an_earlier_reason_is_flagged_with_that_reason_in_every_table() -> None:
    # Given a store-phase output rejecting a row that an earlier transaction flagged in validation (reason 1)
    tables = Tables()
    begin_through(tables, Phase.STORE, [Row("c-1", "t")])
    state = PhaseResult((Verdict("c-1", "t", Reason.VALIDATION, "vendor", "old"),)).to_json()
    # When the flag step runs
    flag(parse_flag_request({"phase": "store", "state": state}), tables.ports(), tables.final)
    # Then all three tables carry reason 1: the same code everywhere
    assert tables.reasons("c-1") == dict.fromkeys(Phase, Reason.VALIDATION)


def test_the_transformation_saga_flags_only_its_rejected_row() -> None:
    # Given a good trip and a trip in the spring-forward gap, run through validation and transformation
    tables = Tables()
    rows = [Row("c-good", GOOD), Row("c-gap", IN_THE_GAP)]
    validation = run_validation(rows, tables.validation).to_json()
    assert validation["hasRejected"] is False
    transformation = run_transformation([Row(r["StoreRequestId"], r["tuple"]) for r in validation["rows"]], tables.transformation)
    # When the transformation flag step runs with the transformation output
    outcome = flag(parse_flag_request({"phase": "transformation", "state": transformation.to_json()}), tables.ports(), tables.final)
    # Then the gap row has code 2 in validation and transformation, and the good row is still in progress
    assert tables.reasons("c-gap") == {
        Phase.VALIDATION: Reason.TRANSFORMATION,
        Phase.TRANSFORMATION: Reason.TRANSFORMATION,
        Phase.STORE: None,
    }
    assert tables.reasons("c-good") == {Phase.VALIDATION: Reason.OK, Phase.TRANSFORMATION: Reason.OK, Phase.STORE: None}
    # And the validation table keeps the raw line, the transformation table the validated tuple
    assert tables.validation.rows["c-gap"].raw_tuple == IN_THE_GAP
    assert tables.transformation.rows["c-gap"].raw_tuple == validated(IN_THE_GAP)
    assert outcome == FlagOutcome(
        "TransformationFailed",
        f"1 row(s) flagged in validation, transformation status: 2 {Rule.NONEXISTENT_LOCAL_TIME}",
        1,
        ((str(Rule.NONEXISTENT_LOCAL_TIME), 1),),
    )


# --- flag: a phase that failed as a whole ---------------------------------------------------------


@pytest.mark.parametrize("phase", list(Phase))
def test_a_caught_error_flags_every_row_with_the_error_name_and_the_phase_code(phase: Phase) -> None:
    # Given two rows given to `phase`, which failed as a whole (a Catch put the error at $.error)
    tables = Tables()
    rows = [Row("c-1", given_to(phase, GOOD)), Row("c-2", given_to(phase, OTHER))]
    begin_through(tables, phase, rows)
    request = FlagRequest(phase, rejected=(), rows=tuple(rows), error=CaughtError("Lambda.Unknown", "the task timed out"))
    # When the flag step runs
    outcome = flag(request, tables.ports(), tables.final)
    # Then every row has the phase's code, detail error:<Name> and the cause as message, in each touched table only
    for row in rows:
        assert tables.reasons(row.store_request_id) == {other: (phase.reason if other in phase.touched else None) for other in Phase}
        for touched in phase.touched:
            assert tables.status[touched].rows[row.store_request_id] == StatusRow(
                row.tuple, phase.reason, "error:Lambda.Unknown", "the task timed out"
            )
    # And the outcome names the failure and counts both rows
    touched_names = ", ".join(touched.value for touched in phase.touched)
    assert outcome == FlagOutcome(
        phase.failure_name,
        f"2 row(s) flagged in {touched_names} status: {int(phase.reason)} error:Lambda.Unknown",
        2,
        (("error:Lambda.Unknown", 2),),
    )


def test_a_caught_error_flags_rows_that_never_got_a_status_row() -> None:
    # Given a validation that failed before writing any status (e.g. the table was throttled)
    tables = Tables()
    request = FlagRequest(Phase.VALIDATION, rejected=(), rows=(Row("c-1", "raw"),), error=CaughtError("ThrottlingException", ""))
    # When the flag step runs
    flag(request, tables.ports(), tables.final)
    # Then the row is created flagged, with its raw tuple
    assert tables.validation.rows["c-1"] == StatusRow("raw", Reason.VALIDATION, "error:ThrottlingException", "error:ThrottlingException")


def test_a_failed_store_skips_the_rows_whose_item_is_already_there() -> None:
    # Given a store that failed on a batch of three: c-a stored as expected, c-b holding another trip's item, c-c not stored
    tables = Tables()
    rows = [Row("c-a", transformed(GOOD)), Row("c-b", transformed(OTHER)), Row("c-c", transformed(THIRD))]
    begin_through(tables, Phase.STORE, rows)
    tables.final.items["c-a"] = final_item("c-a", transformed(GOOD))
    tables.final.items["c-b"] = final_item("c-b", transformed(THIRD))
    request = FlagRequest(Phase.STORE, rejected=(), rows=tuple(rows), error=CaughtError("StoreConflict", "1 row(s)"))
    # When the flag step runs
    outcome = flag(request, tables.ports(), tables.final)
    # Then the complete row is left alone, and the two others are flagged with code 3 in all three tables
    assert tables.reasons("c-a") == dict.fromkeys(Phase, Reason.OK)
    assert tables.reasons("c-b") == tables.reasons("c-c") == dict.fromkeys(Phase, Reason.STORE)
    assert tables.store.rows["c-b"].detail == "error:StoreConflict"
    assert outcome == FlagOutcome(
        "StoreFailed",
        "2 row(s) flagged in validation, transformation, store status: 3 error:StoreConflict",
        2,
        (("error:StoreConflict", 2),),
    )


def test_a_failed_store_flags_a_row_with_a_malformed_tuple_that_was_not_stored() -> None:
    # Given a store that failed on a batch holding a row whose tuple is not a transformed tuple (it has no item, none is stored)
    tables = Tables()
    rows = [Row("c-good", transformed(GOOD)), Row("c-bad", NOT_A_TRANSFORMED_TUPLE)]
    begin_through(tables, Phase.STORE, rows)
    tables.final.items["c-good"] = final_item("c-good", transformed(GOOD))
    request = FlagRequest(Phase.STORE, rejected=(), rows=tuple(rows), error=CaughtError("StoreConflict", "x"))
    # When the flag step runs
    outcome = flag(request, tables.ports(), tables.final)
    # Then the stored row is left alone and the row that was never stored is flagged (it is not complete)
    assert tables.reasons("c-good") == dict.fromkeys(Phase, Reason.OK)
    assert tables.reasons("c-bad") == dict.fromkeys(Phase, Reason.STORE)
    assert outcome.flagged == 1


def test_a_failed_store_without_a_final_table_flags_every_row() -> None:
    # Given a store failure and no final table to check
    tables = Tables()
    tables.final.items["c-a"] = final_item("c-a", transformed(GOOD))
    request = FlagRequest(Phase.STORE, rejected=(), rows=(Row("c-a", transformed(GOOD)),), error=CaughtError("States.Timeout", ""))
    # When the flag step runs without it
    outcome = flag(request, tables.ports())
    # Then the row is flagged
    assert outcome.flagged == 1 and tables.reasons("c-a") == dict.fromkeys(Phase, Reason.STORE)


def test_the_flag_cause_lists_each_reason_once_sorted() -> None:
    # Given three rejections: two with one rule, one with another
    tables = Tables()
    rejected = (
        Verdict("c-1", "t", Reason.VALIDATION, "vendor", "m"),
        Verdict("c-2", "t", Reason.VALIDATION, "amount", "m"),
        Verdict("c-3", "t", Reason.VALIDATION, "vendor", "m"),
    )
    # When the flag step runs
    outcome = flag(FlagRequest(Phase.VALIDATION, rejected=rejected, rows=(), error=None), tables.ports())
    # Then the cause counts the three rows and lists the two reasons once, sorted
    assert outcome.cause == "3 row(s) flagged in validation status: 1 amount; 1 vendor"
    assert outcome.to_json() == {"error": "ValidationFailed", "cause": outcome.cause, "flagged": 3}


# --- PhaseResult.to_json --------------------------------------------------------------------------


def test_a_phase_result_document_separates_passed_and_rejected_verdicts() -> None:
    # Given a passed and a rejected verdict
    result = PhaseResult((Verdict("c-1", "out"), Verdict("c-2", "in", Reason.VALIDATION, "vendor", "vendor_id: '9'")))
    # When it is written for the next state
    document = result.to_json()
    # Then passed verdicts have no detail/message, rejected ones do, and the flags say which lists are non-empty
    assert document == {
        "rows": [{"success": True, "reason": 0, "StoreRequestId": "c-1", "tuple": "out"}],
        "rejected": [
            {"success": False, "reason": 1, "StoreRequestId": "c-2", "tuple": "in", "detail": "vendor", "message": "vendor_id: '9'"},
        ],
        "hasPassed": True,
        "hasRejected": True,
    }
    assert type(document["rejected"][0]["reason"]) is int


def test_an_empty_phase_result_has_neither_passed_nor_rejected() -> None:
    # Given no verdicts
    # When the result is written
    # Then both lists are empty and both flags false
    assert PhaseResult(()).to_json() == {"rows": [], "rejected": [], "hasPassed": False, "hasRejected": False}


def test_a_rejected_verdict_truncates_its_detail_and_message() -> None:
    # Given a rejection with a very long detail and message
    verdict = Verdict("c-1", "t", Reason.STORE, "d" * 100, "m" * 1000)
    # When it is written
    document = verdict.to_json()
    # Then detail keeps 64 characters and message 512
    assert (document["detail"], document["message"]) == ("d" * 64, "m" * 512)


def test_a_phase_output_reads_back_as_the_next_phase_input_and_as_a_flag_request() -> None:
    # Given a validation output with a passed and a rejected row
    tables = Tables()
    document = run_validation([Row("c-good", GOOD), Row("c-bad", BAD_LOCATION)], tables.validation).to_json()
    # When the flag step reads it
    request = parse_flag_request({"phase": "validation", "state": document})
    # Then it finds exactly the rejected row, with its rule
    assert [(verdict.store_request_id, verdict.reason, verdict.detail) for verdict in request.rejected] == [
        ("c-bad", Reason.VALIDATION, "pickup_location"),
    ]
