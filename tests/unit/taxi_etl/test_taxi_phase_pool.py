"""The saga's phases and flag step on a pool of threads (runtime/taxi_etl/phases.py, `concurrency`).

The in-memory tables of test_taxi_phases.py, each call made slow by a jittered sleep so that rows
finish in another order than they started: the pool must answer exactly what one row at a time
answers, keep each row's own order (status row, then item), never have more rows in flight than
its limit, finish every row when some fail and raise the failure the serial loop raised, and the
flag step must flag every row's validation status before any other table. Last, the deployed
entry points build their clients with a connection pool as large as their concurrency.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from runtime.taxi_etl import contract, flag_handler, flag_wiring, phase_wiring, store_handler, transform_handler, validate_handler
from runtime.taxi_etl.errors import StoreConflict
from runtime.taxi_etl.final_table import FinalTable, PutOutcome
from runtime.taxi_etl.flag_step import CaughtError, FlagRequest, flag
from runtime.taxi_etl.models import Phase, Row, Verdict
from runtime.taxi_etl.phases import run_transformation, run_validation
from runtime.taxi_etl.store import Flagged, StatusTable
from runtime.taxi_etl.store_phase import StoreReport, run_store
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trips import Reason
from tests.unit.taxi_etl.test_taxi_phases import Tables, given_to, sample_line, transformed

LIMIT = 8
# 40 real rows, every fifth one moved to zone 999 (rejected by validation, and no transformed tuple to store).
LINES = [sample_line(number) for number in range(2, 42)]
LINES = [line.replace(",", ",999,", 1) if index % 5 == 4 else line for index, line in enumerate(LINES)]


@dataclass
class Pool:
    """What the slow tables saw: calls in flight, the peak, and one journal across threads."""

    seed: int = 0
    in_flight: int = 0
    peak: int = 0
    journal: list[tuple[str, str, str]] = field(default_factory=list)  # (table, call, StoreRequestId), in the order calls ended
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def call(self, table: str, name: str, store_request_id: str, action: Callable[[], Any]) -> Any:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            pause = self._random.uniform(0, 0.004)
        try:
            time.sleep(pause)  # rows finish in another order than they started
            result = action()
            with self.lock:
                self.journal.append((table, name, store_request_id))
            return result
        finally:
            with self.lock:
                self.in_flight -= 1

    def index(self, table: str, name: str, store_request_id: str) -> int:
        return self.journal.index((table, name, store_request_id))


@dataclass
class SlowStatus:
    name: str
    inner: StatusTable
    pool: Pool
    failing: Mapping[str, Exception] = field(default_factory=dict)

    def begin(self, store_request_id: str, raw_tuple: str) -> Flagged | None:
        def act() -> Flagged | None:
            if store_request_id in self.failing:
                raise self.failing[store_request_id]
            return self.inner.begin(store_request_id, raw_tuple)

        return self.pool.call(self.name, "begin", store_request_id, act)  # type: ignore[no-any-return]

    def flag(self, store_request_id: str, raw_tuple: str, reason: Reason, detail: str, message: str) -> None:
        self.pool.call(self.name, "flag", store_request_id, lambda: self.inner.flag(store_request_id, raw_tuple, reason, detail, message))

    def clear_retryable(self, store_request_id: str, reason: Reason) -> bool:
        return self.pool.call(self.name, "clear", store_request_id, lambda: self.inner.clear_retryable(store_request_id, reason))  # type: ignore[no-any-return]


@dataclass
class SlowFinal:
    inner: FinalTable
    pool: Pool
    failing: Mapping[str, Exception] = field(default_factory=dict)

    def put_once(self, item: Mapping[str, Any]) -> PutOutcome:
        store_request_id = str(item["StoreRequestId"])

        def act() -> PutOutcome:
            if store_request_id in self.failing:
                raise self.failing[store_request_id]
            return self.inner.put_once(item)

        return self.pool.call("final", "put", store_request_id, act)  # type: ignore[no-any-return]

    def stored_items(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return self.inner.stored_items(store_request_ids)


def slow(tables: Tables, pool: Pool) -> tuple[dict[Phase, StatusTable], FinalTable]:
    return {phase: SlowStatus(phase.value, tables.status[phase], pool) for phase in Phase}, SlowFinal(tables.final, pool)


def rows_for(phase: Phase) -> list[Row]:
    """The rows `phase` is given: the lines' tuples as the earlier phases made them (a rejected line as it is)."""
    made: list[Row] = []
    for index, line in enumerate(LINES):
        try:
            made.append(Row(f"c-{index:02d}", given_to(phase, line)))
        except AssertionError:
            made.append(Row(f"c-{index:02d}", line))  # no earlier phase accepts it: the phase is given what it was
    return made


def run_phase(phase: Phase, tables: Tables, status: Mapping[Phase, StatusTable], final: FinalTable, concurrency: int) -> Any:
    rows = rows_for(phase)
    if phase == Phase.VALIDATION:
        return run_validation(rows, status[phase], concurrency=concurrency)
    if phase == Phase.TRANSFORMATION:
        return run_transformation(rows, status[phase], concurrency=concurrency)
    return run_store(rows, status[phase], final, concurrency=concurrency)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("phase", list(Phase))
def test_a_phase_on_a_pool_answers_exactly_what_one_row_at_a_time_answers(phase: Phase, seed: int) -> None:
    # Given 40 rows given to `phase` (one in five bad), once on plain tables one row at a time,
    # and once on slow tables with jittered calls, LIMIT rows at once
    serial_tables, pooled_tables, pool = Tables(), Tables(), Pool(seed)
    serial = run_phase(phase, serial_tables, serial_tables.ports(), serial_tables.final, 1)
    status, final = slow(pooled_tables, pool)
    # When the phase runs on the pool
    pooled = run_phase(phase, pooled_tables, status, final, LIMIT)
    # Then its answer is the same, verdict for verdict in the rows' order (so its JSON is the same text),
    # and it leaves the same tables
    assert pooled == serial
    result = pooled.result if isinstance(pooled, StoreReport) else pooled
    assert [verdict.store_request_id for verdict in result.verdicts] == [row.store_request_id for row in rows_for(phase)]
    assert all(pooled_tables.status[other].rows == serial_tables.status[other].rows for other in Phase)
    assert pooled_tables.final.items == serial_tables.final.items
    # And rows really overlapped, never more than the limit, and finished out of their order
    assert 1 < pool.peak <= LIMIT
    begun = [store_request_id for _, call, store_request_id in pool.journal if call == "begin"]
    assert begun != sorted(begun)


def test_on_a_pool_each_rows_status_is_written_before_its_item() -> None:
    # Given 40 transformed rows (some not, which are rejected) on slow tables
    tables, pool = Tables(), Pool(3)
    status, final = slow(tables, pool)
    # When the store phase runs on the pool
    report = run_store(rows_for(Phase.STORE), status[Phase.STORE], final, concurrency=LIMIT)
    # Then every stored row's status was begun before its item was put, whatever the other rows did
    stored = [verdict.store_request_id for verdict in report.result.passed]
    assert len(stored) == report.stored == 32
    for store_request_id in stored:
        assert pool.index("store", "begin", store_request_id) < pool.index("final", "put", store_request_id)
    # And the items are the typed items of their tuples
    assert tables.final.items == {
        row.store_request_id: final_item(row.store_request_id, row.tuple) for row in rows_for(Phase.STORE) if row.store_request_id in stored
    }


class Throttled(Exception):
    """Stands in for DynamoDB's throttling after the SDK's retries."""


def test_a_row_failing_on_a_pool_does_not_stop_the_others_and_the_first_failure_in_row_order_is_raised() -> None:
    # Given rows 3 and 17 whose status writes fail
    tables, pool = Tables(), Pool(4)
    failing = {"c-03": Throttled("row 3"), "c-17": Throttled("row 17")}
    status = SlowStatus("validation", tables.validation, pool, failing)
    # When validation runs on the pool
    with pytest.raises(Throttled) as raised:
        run_validation(rows_for(Phase.VALIDATION), status, concurrency=LIMIT)
    # Then the failure raised is row 3's, the first in the rows' order, as the serial loop raised it
    assert str(raised.value) == "row 3"
    # And every other row was begun before it was raised: nothing is left running, nothing half done
    begun = {store_request_id for _, call, store_request_id in pool.journal if call == "begin"}
    assert begun == {row.store_request_id for row in rows_for(Phase.VALIDATION)} - set(failing)
    assert pool.in_flight == 0


def test_store_on_a_pool_raises_a_write_error_before_a_conflict_and_a_conflict_after_the_others() -> None:
    # Given rows 3 and 8 already stored with another trip's item, and row 12's put failing
    rows = rows_for(Phase.STORE)
    other_trip = final_item("c-03", transformed(sample_line(60)))
    for case, failing in (("error", {"c-12": Throttled("row 12")}), ("conflicts only", {})):
        tables, pool = Tables(), Pool(5)
        tables.final.items["c-03"] = other_trip
        tables.final.items["c-08"] = final_item("c-08", transformed(sample_line(61)))
        status, _ = slow(tables, pool)
        final = SlowFinal(tables.final, pool, failing)
        # When the store phase runs on the pool
        with pytest.raises((Throttled, StoreConflict)) as raised:
            run_store(rows, status[Phase.STORE], final, concurrency=LIMIT)
        # Then a write error wins over the conflicts (the serial loop stopped at it); without one, the
        # conflict names the conflicting rows in the rows' order
        if case == "error":
            assert isinstance(raised.value, Throttled) and str(raised.value) == "row 12"
        else:
            assert isinstance(raised.value, StoreConflict)
            assert str(raised.value) == "2 row(s) already stored with different content: c-03, c-08"
        # And every other good row was stored, the conflicting items untouched
        good = {row.store_request_id for row in rows if ",999," not in row.tuple} - {"c-03", "c-08"} - set(failing)
        assert set(tables.final.items) == good | {"c-03", "c-08"} and tables.final.items["c-03"] == other_trip


def test_the_flag_step_on_a_pool_flags_every_rows_validation_status_before_any_other_table() -> None:
    # Given a store that failed as a whole on 30 rows, of which 5 are stored
    tables, pool = Tables(), Pool(6)
    rows = [row for row in rows_for(Phase.STORE) if ",999," not in row.tuple][:30]
    for phase in Phase:
        for row in rows:
            tables.status[phase].begin(row.store_request_id, row.tuple)
    for row in rows[:5]:
        tables.final.items[row.store_request_id] = final_item(row.store_request_id, row.tuple)
    status, final = slow(tables, pool)
    request = FlagRequest(Phase.STORE, rejected=(), rows=tuple(rows), error=CaughtError("ClientError", "throttled"))
    # When the flag step runs on the pool
    outcome = flag(request, status, final, concurrency=LIMIT)
    # Then the 25 rows not stored carry reason 3 in all three tables, the stored ones none
    assert outcome.flagged == 25
    for row in rows:
        expected = Reason.OK if row in rows[:5] else Reason.STORE
        assert tables.reasons(row.store_request_id) == dict.fromkeys(Phase, expected)
    # And every validation flag was written before any flag of the other tables, never more than LIMIT at once
    calls = [(table, call) for table, call, _ in pool.journal if call == "flag"]
    last_validation = max(index for index, (table, _) in enumerate(calls) if table == "validation")
    first_other = min(index for index, (table, _) in enumerate(calls) if table != "validation")
    assert last_validation < first_other
    assert len(calls) == 75 and 1 < pool.peak <= LIMIT


def test_a_flag_outcome_on_a_pool_is_the_serial_one() -> None:
    # Given rejections of 20 rows, flagged once one at a time and once on the pool
    rejected = tuple(Verdict(f"c-{index:02d}", "t", Reason.TRANSFORMATION, "rule" if index % 3 else "other", "m") for index in range(20))
    request = FlagRequest(Phase.TRANSFORMATION, rejected=rejected, rows=(), error=None)
    serial_tables, pooled_tables = Tables(), Tables()
    serial = flag(request, serial_tables.ports(), serial_tables.final)
    status, final = slow(pooled_tables, Pool(7))
    # When the flag step runs on the pool
    pooled = flag(request, status, final, concurrency=LIMIT)
    # Then the outcome and the tables are the same
    assert pooled == serial
    assert all(pooled_tables.status[phase].rows == serial_tables.status[phase].rows for phase in Phase)


# --- the deployed entry points ---------------------------------------------------------------------


@pytest.fixture
def cold_handlers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (contract.ENV_STATUS_TABLE, contract.ENV_FINAL_TABLE, contract.ENV_VALIDATION_STATUS_TABLE):
        monkeypatch.setenv(name, f"table-{name.lower()}")
    monkeypatch.setenv(contract.ENV_TRANSFORMATION_STATUS_TABLE, "table-transformation")
    monkeypatch.setenv(contract.ENV_STORE_STATUS_TABLE, "table-store")
    modules = (validate_handler, transform_handler, store_handler, flag_handler)

    def cold_start() -> None:
        for module in modules:
            module.settings.cache_clear()
            module.deps.cache_clear()

    cold_start()
    yield
    cold_start()


def test_the_deployed_entry_points_write_on_a_pool_with_one_connection_per_thread(cold_handlers: None) -> None:
    # Given each phase's and the flag step's dependencies as their Lambda entry point builds them
    built = {
        "validate": validate_handler.deps(),
        "transform": transform_handler.deps(),
        "store": store_handler.deps(),
        "flag": flag_handler.deps(),
    }
    # Then the phases write 32 rows at once and the flag step 50 updates
    assert {name: deps.concurrency for name, deps in built.items()} == {
        "validate": phase_wiring.PHASE_ROW_CONCURRENCY,
        "transform": phase_wiring.PHASE_ROW_CONCURRENCY,
        "store": phase_wiring.PHASE_ROW_CONCURRENCY,
        "flag": flag_wiring.FLAG_UPDATE_CONCURRENCY,
    }
    assert (phase_wiring.PHASE_ROW_CONCURRENCY, flag_wiring.FLAG_UPDATE_CONCURRENCY) == (32, 50)
    # And each one's DynamoDB client keeps as many connections as it has threads
    pools = {name: deps.status.client.meta.config.max_pool_connections for name, deps in built.items() if name != "flag"}
    pools["flag"] = built["flag"].status[Phase.STORE].client.meta.config.max_pool_connections
    assert pools == {name: deps.concurrency for name, deps in built.items()}
