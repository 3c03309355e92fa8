"""The bulk route's tasks on the embedded cloud: Plan -> each Chunk -> Report of a small file of real NYC TLC rows
in a versioned ingest bucket, on the saga's own tables (made from the synthesized template, as the saga's tests
make them). Each task is called as the Distributed Map would call it, through the function its handler calls
(plan_load, ChunkTask.from_event + run_chunk, write_report): a handler's `handle` is audited against its function's
synthesized role, and the bulk functions are the infra's (the bulk-infra branch), not in this branch's templates.
The bulk state machine itself is not run here (the infra's tests run it).

What a load leaves behind is compared with what /trips/batch leaves for the same lines (TaxiWorld.post, which runs
the per-batch state machine), in either order: the same trips items, the same answer from GET /trips/{id} for every
row, and the same status rows (reason, detail, message, tuple) for every flagged row. Status rows differ only for
rows never flagged: /trips/batch leaves three at reason 0, a chunk none (it writes the trips item only). The loads
API and the load starter run against a state machine that does not execute, so only their own decisions are observed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import pytest

from devtools.aws.clients import new_client
from devtools.taxi_rows import SAMPLE, sample_lines
from devtools.taxi_world import FLAG_HANDLER, TaxiWorld
from runtime.shared.aws import Clients
from runtime.shared.dynamo import to_attributes
from runtime.taxi_etl import contract, wiring
from runtime.taxi_etl.bulk_chunk import ChunkSummary, ChunkTask, run_chunk
from runtime.taxi_etl.bulk_chunk_wiring import BulkChunkDeps, BulkChunkSettings
from runtime.taxi_etl.bulk_plan import plan_load
from runtime.taxi_etl.bulk_report import write_report
from runtime.taxi_etl.bulk_wiring import BulkPlanSettings, BulkReportSettings
from runtime.taxi_etl.final_table import DynamoRowReader, FinalTable, PutOutcome
from runtime.taxi_etl.load_objects import LoadFile, manifest_key, report_key, summaries_prefix, summary_key
from runtime.taxi_etl.loads import load_file
from runtime.taxi_etl.models import Phase
from runtime.taxi_etl.requests import submission_rows
from runtime.taxi_etl.row_state import row_state
from runtime.taxi_etl.trip_items import final_item
from runtime.taxi_etl.trip_lines import transform_tuple, validate_line

BUCKET = "onceflow-test-ingest"
KEY = "incoming/yellow_2019-10.csv"
CHUNK_LINES = 10  # small chunks, so a 37-line file is four of them
MAX_LINE_BYTES = 4096
LINES = sample_lines()
HEADER = SAMPLE.read_text(encoding="utf-8").splitlines()[0]


def with_cells(line: str, **cells: str) -> str:
    columns = line.split(",")
    for index, value in cells.items():
        columns[int(index.removeprefix("c"))] = value
    return ",".join(columns)


# A line Validate rejects (no such taxi zone), one Transform rejects (a New York time that never happened), a
# repeated trip, two lines no trip can be (refused alone, by their line numbers in the file), and two trips stored
# with a finding.
VALIDATION_REJECT = with_cells(LINES[30], c7="999")
TRANSFORMATION_REJECT = with_cells(LINES[31], c1="2019-03-10T02:30:00.000", c2="2019-03-10T03:10:00.000")
FILE_LINES = [
    HEADER,
    *LINES[:12],
    VALIDATION_REJECT,
    "1,2,3,4,5",  # line 15
    *LINES[12:20],
    TRANSFORMATION_REJECT,
    LINES[3],  # the same trip again, in another chunk: already stored
    LINES[20].rsplit(",", 1)[0],  # line 26: 17 columns under an 18-column header
    *LINES[21:30],
    LINES[729],  # stored with a finding: drop-off at the pick-up second
    LINES[873],  # stored with a finding: a total that is not the sum of the charges
]
REFUSED_LINES = [15, 26]
DATA_LINES = [line for number, line in enumerate(FILE_LINES, start=1) if number != 1 and number not in REFUSED_LINES]
ROW_IDS = [row.store_request_id for row in submission_rows(DATA_LINES)[1]]
STATUS_TABLE_VARIABLES = {
    Phase.VALIDATION: contract.ENV_VALIDATION_STATUS_TABLE,
    Phase.TRANSFORMATION: contract.ENV_TRANSFORMATION_STATUS_TABLE,
    Phase.STORE: contract.ENV_STORE_STATUS_TABLE,
}


@dataclasses.dataclass
class Bulk:
    world: TaxiWorld
    s3: Any
    plan: Any
    chunk: BulkChunkDeps
    report: Any

    def upload(self, body: bytes, key: str = KEY) -> str:
        return str(self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"])

    def event(self, version_id: str, key: str = KEY) -> dict[str, str]:
        load = load_file(BUCKET, key, version_id)
        return {"bucket": BUCKET, "key": key, "versionId": version_id, "loadId": load.load_id}

    def manifest(self, event: dict[str, str]) -> list[dict[str, int]]:
        return json.loads(self.s3.get_object(Bucket=BUCKET, Key=manifest_key(event["loadId"]))["Body"].read())  # type: ignore[no-any-return]

    def plan_of(self, event: dict[str, str]) -> dict[str, Any]:
        return plan_load(LoadFile.from_event(event), self.plan.bucket, self.plan.chunk_rows)

    def run_chunks(self, event: dict[str, str], plan: dict[str, Any], deps: BulkChunkDeps | None = None) -> list[ChunkSummary | None]:
        """Each chunk of the manifest, with the input the map's ItemSelector gives it."""
        chunk = deps or self.chunk
        return [
            run_chunk(
                ChunkTask.from_event({**event, "layout": plan["layout"], "chunk": item}),
                chunk.bucket,
                chunk.status,
                chunk.final,
                max_line_bytes=chunk.max_line_bytes,
                concurrency=chunk.concurrency,
            )
            for item in self.manifest(event)
        ]

    def load(self, body: bytes) -> tuple[dict[str, str], dict[str, Any]]:
        """Plan, every chunk, Report, as the bulk state machine runs them; the event and the report."""
        event = self.event(self.upload(body))
        plan = self.plan_of(event)
        self.run_chunks(event, plan)
        outcome = write_report(LoadFile.from_event(event), plan, None, self.report.bucket, concurrency=self.report.concurrency)
        assert outcome["report"] == {"bucket": BUCKET, "key": report_key(event["loadId"])}
        return event, self.json(report_key(event["loadId"]))

    def json(self, key: str) -> Any:
        return json.loads(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def summaries(self, event: dict[str, str]) -> list[dict[str, Any]]:
        listed = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=summaries_prefix(event["loadId"])).get("Contents", [])
        return [self.json(entry["Key"]) for entry in listed]

    def forget_summaries(self, event: dict[str, str]) -> None:
        for entry in self.s3.list_objects_v2(Bucket=BUCKET, Prefix=summaries_prefix(event["loadId"])).get("Contents", []):
            self.s3.delete_object(Bucket=BUCKET, Key=entry["Key"])

    def answers(self, store_request_ids: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """What GET /trips/{id} answers for each id (its reader and row_state, as its handler calls them)."""
        environment = self.world.environment(FLAG_HANDLER)
        status_tables = {phase: environment[variable] for phase, variable in STATUS_TABLE_VARIABLES.items()}
        reader = DynamoRowReader(status_tables, environment[contract.ENV_FINAL_TABLE], self.world.dynamodb)
        answers: dict[str, dict[str, Any] | None] = {}
        for store_request_id in store_request_ids:
            state = row_state(store_request_id, *reader.read(store_request_id))
            answers[store_request_id] = None if state is None else state.to_json()
        return answers

    def flagged_status_rows(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The status rows of every row some status row flags, by table."""
        tables = self.tables()
        flagged = {row_id for phase in Phase for row_id, row in tables[phase.value].items() if row.get("StatusReason")}
        return {phase.value: {row_id: row for row_id, row in tables[phase.value].items() if row_id in flagged} for phase in Phase}

    def tables(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {"trips": self.world.final_items(), **{phase.value: rows for phase, rows in self.world.status_rows().items()}}

    def empty_tables(self) -> None:
        environment = self.world.environment(FLAG_HANDLER)
        for variable in (
            contract.ENV_FINAL_TABLE,
            contract.ENV_VALIDATION_STATUS_TABLE,
            contract.ENV_TRANSFORMATION_STATUS_TABLE,
            contract.ENV_STORE_STATUS_TABLE,
        ):
            for store_request_id in self.world.table_items(variable):
                key = to_attributes({contract.KEY_STORE_REQUEST_ID: store_request_id})
                self.world.dynamodb.delete_item(TableName=environment[variable], Key=key)


@pytest.fixture
def bulk(saga: TaxiWorld) -> Bulk:
    return new_bulk(saga)


def new_bulk(saga: TaxiWorld) -> Bulk:
    """The bulk tasks' dependencies on `saga`'s tables and a versioned ingest bucket of the embedded cloud."""
    s3 = new_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    tables = saga.environment(FLAG_HANDLER)  # the saga's status tables and trips table, as the chunk function gets them
    clients = Clients(dynamodb=saga.dynamodb, s3=s3)
    chunk_settings = BulkChunkSettings.from_env(
        {**tables, contract.ENV_INGEST_BUCKET: BUCKET, contract.ENV_MAX_LINE_BYTES: str(MAX_LINE_BYTES)}
    )
    plan = wiring.build(BulkPlanSettings.from_env({contract.ENV_INGEST_BUCKET: BUCKET, contract.ENV_CHUNK_ROWS: "100"}), clients)
    return Bulk(
        saga,
        s3,
        dataclasses.replace(plan, chunk_rows=CHUNK_LINES),  # below the settings' floor of 100: a small file, several chunks
        wiring.build(chunk_settings, clients),
        wiring.build(BulkReportSettings.from_env({contract.ENV_INGEST_BUCKET: BUCKET}), clients),
    )


def file_bytes(lines: list[str] = FILE_LINES, newline: str = "\n") -> bytes:
    return (newline.join(lines) + newline).encode()


def strip_attempt(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without what only its last attempt saw: which of its rows it stored and which were stored before."""
    return {name: value for name, value in summary.items() if name not in ("stored", "alreadyStored")} | {
        "storedByAny": summary["stored"] + summary["alreadyStored"]
    }


# --- a load is what /trips/batch gives the same lines ----------------------------------------------


def test_a_load_leaves_exactly_the_items_and_flags_the_batch_route_leaves(bulk: Bulk) -> None:
    # Given a CRLF file of real trips, a line each phase rejects, a repeated trip and two lines that are no trip
    # When it is loaded: Plan, each chunk, Report
    _, report = bulk.load(file_bytes(newline="\r\n"))
    loaded = bulk.tables()
    # Then the report counts every line and lists the refused ones by their line numbers in the file
    assert report["status"] == "SUCCEEDED"
    assert (report["chunks"], report["chunksDone"], report["lines"]) == (4, 4, len(FILE_LINES))
    assert [line["line"] for line in report["refused"]] == REFUSED_LINES
    assert "line 15 has 5 columns" in report["refused"][0]["reason"]
    assert "line 26 has 17 columns, but the header has 18" in report["refused"][1]["reason"]
    assert report["stored"] == 31 and report["alreadyStored"] == 1  # 31 trips, one of them twice
    assert report["flagged"] == {"transformation": 1, "validation": 1}
    assert report["flaggedByDetail"] == {"nonexistent_local_time": 1, "pickup_location": 1}
    assert report["findings"] == {"dropoff_equals_pickup": 1, "total_amount_mismatch": 1}
    assert len(loaded["trips"]) == 31
    # and a stored row cost one write, its trips item: only the two flagged rows have status rows
    assert {row_id for phase in Phase for row_id in loaded[phase.value]} == set(loaded["validation"]) and len(loaded["validation"]) == 2
    loaded_answers, loaded_flags = bulk.answers(ROW_IDS), bulk.flagged_status_rows()
    assert sorted(str(answer and answer["state"]) for answer in loaded_answers.values()).count("stored") == 31
    # When the same lines (the refused ones left out: a batch would be refused whole) go through /trips/batch instead
    bulk.empty_tables()
    status, body = bulk.world.post("/trips/batch", "\r\n".join([HEADER, *DATA_LINES]))
    assert status == 202, body
    # Then the trips items, every row's GET /trips/{id} answer and the flagged rows' status rows (reason, detail,
    # message, tuple: the flag step's writes create them) are the same
    assert bulk.tables()["trips"] == loaded["trips"]
    assert bulk.answers(ROW_IDS) == loaded_answers
    assert bulk.flagged_status_rows() == loaded_flags


def test_a_load_after_the_batch_route_writes_nothing(bulk: Bulk) -> None:
    # Given the lines sent through /trips/batch first
    status, body = bulk.world.post("/trips/batch", "\n".join([HEADER, *DATA_LINES]))
    assert status == 202, body
    batched = bulk.tables()
    # When the same lines are loaded in bulk after them
    _, report = bulk.load(file_bytes())
    # Then the load wrote nothing: every row was already stored, or flagged as it is with the batch's reason
    assert bulk.tables() == batched
    assert (report["stored"], report["alreadyStored"]) == (0, 32)
    assert report["flaggedByDetail"] == {"nonexistent_local_time": 1, "pickup_location": 1}


def test_the_batch_route_after_a_load_changes_no_trip_no_answer_and_no_flag(bulk: Bulk) -> None:
    # Given the lines loaded in bulk first
    bulk.load(file_bytes())
    loaded, loaded_answers, loaded_flags = bulk.tables(), bulk.answers(ROW_IDS), bulk.flagged_status_rows()
    # When the same lines are sent through /trips/batch after them
    status, body = bulk.world.post("/trips/batch", "\n".join([HEADER, *DATA_LINES]))
    assert status == 202, body
    # Then the trips, every row's GET /trips/{id} answer and the flagged rows' status rows are the load's
    # (the batch only adds reason-0 status rows for the rows the load stored)
    assert bulk.tables()["trips"] == loaded["trips"]
    assert bulk.answers(ROW_IDS) == loaded_answers
    assert bulk.flagged_status_rows() == loaded_flags


def test_a_chunk_run_twice_or_crashed_before_its_summary_then_run_again_equals_one_clean_pass(bulk: Bulk) -> None:
    # Given a file loaded once, cleanly
    event, _ = bulk.load(file_bytes())
    plan = bulk.json(manifest_key(event["loadId"]))
    layout = bulk.plan_of(event)["layout"]
    clean, clean_summaries = bulk.tables(), sorted(map(strip_attempt, bulk.summaries(event)), key=lambda summary: summary["index"])
    assert len(plan) == 4
    # When every chunk runs again (its summary gone, as when two attempts passed the check at once)
    bulk.forget_summaries(event)
    bulk.run_chunks(event, {"layout": layout})
    # Then nothing changed but which attempt stored the rows
    assert bulk.tables() == clean
    assert sorted(map(strip_attempt, bulk.summaries(event)), key=lambda summary: summary["index"]) == clean_summaries
    # When, from empty tables, every chunk crashes after its third row's item, and then runs again
    bulk.empty_tables()
    bulk.forget_summaries(event)
    with pytest.raises(RuntimeError, match="crashed"):
        bulk.run_chunks(event, {"layout": layout}, dataclasses.replace(bulk.chunk, final=CrashingFinal(bulk.chunk.final, after=3)))
    assert bulk.summaries(event) == []  # no summary: the chunk is not done
    bulk.run_chunks(event, {"layout": layout})
    # Then the tables and summaries are one clean pass's
    assert bulk.tables() == clean
    assert sorted(map(strip_attempt, bulk.summaries(event)), key=lambda summary: summary["index"]) == clean_summaries


class CrashingFinal:
    """The trips table of a chunk whose Lambda dies after `after` items are written."""

    def __init__(self, final: FinalTable, *, after: int) -> None:
        self._final = final
        self._left = after

    def put_once(self, item: dict[str, Any]) -> PutOutcome:
        if self._left <= 0:
            raise RuntimeError("the chunk crashed")
        self._left -= 1
        return self._final.put_once(item)

    def stored_items(self, store_request_ids: Any) -> Any:
        return self._final.stored_items(store_request_ids)


class UntouchableTable:
    """A table a chunk that is already done must not touch."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a done chunk called {name}")


def test_a_chunk_whose_summary_is_there_does_nothing(bulk: Bulk) -> None:
    # Given a planned file whose chunks an earlier generation finished (their summaries are there)
    event = bulk.event(bulk.upload(file_bytes()))
    plan = bulk.plan_of(event)
    for item in bulk.manifest(event):
        bulk.s3.put_object(Bucket=BUCKET, Key=summary_key(event["loadId"], item["index"]), Body=json.dumps({"index": item["index"]}))
    before = bulk.summaries(event)
    # When its chunks run again (a later generation), with tables that fail any call
    untouchable: Any = UntouchableTable()
    done = dataclasses.replace(bulk.chunk, status=dict.fromkeys(Phase, untouchable), final=untouchable)
    skipped = bulk.run_chunks(event, plan, done)
    # Then each returned at once: no table was called, and no summary was written again
    assert skipped == [None] * 4
    assert bulk.summaries(event) == before


def test_a_store_conflict_flags_only_the_conflicting_row(bulk: Bulk) -> None:
    # Given the trips table already holds another trip under the id of the file's fifth trip
    data = file_bytes()
    (_, (victim, other)) = submission_rows([LINES[4], LINES[5]])
    transformed = transform_tuple(validate_line(other.tuple).tuple).tuple  # type: ignore[union-attr]
    squatter = {**final_item(other.store_request_id, transformed), contract.KEY_STORE_REQUEST_ID: victim.store_request_id}
    assert bulk.chunk.final.put_once(squatter) == PutOutcome.STORED
    # When the file is loaded
    _, report = bulk.load(data)
    # Then that row is flagged in all three status tables for the conflict, and every other trip is stored
    tables = bulk.tables()
    for phase in Phase:
        row = tables[phase.value][victim.store_request_id]
        assert (row["StatusReason"], row["StatusDetail"]) == (3, "error:StoreConflict")
        assert victim.store_request_id in row["StatusMessage"]
    assert tables["trips"][victim.store_request_id] == squatter
    assert report["stored"] == 30 and report["flaggedByDetail"]["error:StoreConflict"] == 1
    assert report["flagged"]["store"] == 1
    assert report["status"] == "SUCCEEDED"
