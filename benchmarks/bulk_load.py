"""`make bench`, bulk section (issue 36 item 6): a file through the bulk route against the same rows
through `/trips/batch`, on the embedded cloud, in one run; then what that means on AWS.

Rows: the 2,000 real rows of tests/data/taxi_etl, repeated with their pick-up and drop-off moved by
whole seconds (copy k by k seconds), so every copy is another trip with another id (100,000 by
default, `--bulk-rows` for fewer).
  bulk   one CSV object under the ingest bucket's incoming/, one load through the embedded world's
         bulk state machine (POST /loads: Plan, a Distributed Map of chunks, Report), timed end to
         end; checked: every row that passes validation stored once (the trips table's count),
         and the report's totals (rows read, stored, flagged).
  batch  the same rows (all of them, or the first `--http-rows`: moto runs a few executions a
         second) through POST /trips/batch in 100-line batches, each starting one execution,
         then every row read back with GET /trips/{id}, as a loader must to learn its rows' fate.
Counted on both: DynamoDB request units per row per table (devtools.aws.capacity), every AWS call
by operation (devtools.aws.latency), state transitions (the parent's from its history; a Distributed
Map's children are not executions on moto, so theirs are counted from the definition), Lambda
invocations. One chunk is also run alone with every AWS call delayed, for its serial round trips.

Then the AWS model of a month (`month_model`, pure, its inputs printed) and dollars per million
rows for both routes from one price table (benchmarks.taxi_cost.PRICES). This prints figures; it is
not a pass/fail test.

The model: a load is Plan (one pass over the file), then the Distributed Map's chunks, then the
Report. The chunks run `concurrency` at a time, the least of the map's MaxConcurrency (the
`bulk_max_concurrency` prop), the Distributed Map's default of 10,000 parallel child executions and
the account's Lambda concurrency (1,000 by default, shared by every function). A chunk takes its
serial round trips x an assumed call latency, plus its CPU on the share of a vCPU Lambda gives its
memory (a full core at 1,769 MB). Each table takes at most its on-demand initial throughput: a new
table serves 4,000 write and 12,000 read request units a second (DynamoDB developer guide,
"On-demand capacity mode: initial throughput"; more only up to double the previous peak within
30 minutes, or once pre-warmed). The map takes the longest of the chunks' waves and, per table, its
request units over that throughput; what takes longest is the bottleneck.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

from benchmarks.taxi_cost import (
    API_MS_PER_REQUEST,
    BATCH_LINES,
    LAMBDA_GB,
    PHASE_MS_PER_INVOCATION,
    PHASE_MS_PER_ROW,
    PRICES,
    PRICES_CHECKED,
)
from devtools.aws.capacity import CapacityMeter
from devtools.aws.latency import LatencyRun
from devtools.taxi_rows import DROPOFF, PICKUP, sample_header, sample_lines
from runtime.shared.observability import metrics
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trip_lines import Accepted, line_columns, transform_tuple, validate_line

FULL_CORE_MB = 1769  # Lambda's memory at which a function gets one whole vCPU
API_SECONDS = API_MS_PER_REQUEST / 1000  # assumed duration of an API function's request (benchmarks/taxi_cost.py)
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.000"  # the sample's spelling of a pick-up or drop-off
# The API functions of the batch route (priced per request); the others are the state machine's phases.
API_HANDLERS = frozenset({taxi_etl_contract.HANDLER_API, taxi_etl_contract.HANDLER_ROW_STATE})


@dataclass(frozen=True)
class Quotas:
    """AWS defaults the model runs at (per account and region unless said otherwise)."""

    map_children: int = 10_000  # a Distributed Map's parallel child executions when MaxConcurrency is not set
    lambda_concurrency: int = 1_000  # concurrent executions of all the account's functions
    table_write_units_per_s: float = 4_000.0  # a new on-demand table's initial throughput, per table
    table_read_units_per_s: float = 12_000.0


@dataclass(frozen=True)
class ChunkProfile:
    """One chunk task, as measured on the embedded cloud."""

    rows: int  # data rows in the chunk
    dynamodb_round_trips: float  # DynamoDB calls on the chunk's longest chain (its serial depth)
    s3_round_trips: float  # S3 calls, one after another (the summary check, the range read, the summary)
    cpu_s: float  # the handler's and the SDK's CPU for the chunk, on a full core


@dataclass(frozen=True)
class MonthInputs:
    rows: int  # rows in the file
    bytes_per_row: float  # the file's size over its rows
    chunk: ChunkProfile
    max_concurrency: int  # the map's MaxConcurrency (the bulk_max_concurrency prop)
    memory_mb: int  # the chunk function's
    timeout_s: float  # the chunk function's
    wru_per_row: Mapping[str, float]  # per table, measured
    rru_per_row: Mapping[str, float]  # per table, measured
    dynamodb_call_ms: float = 5.0  # assumed: one DynamoDB call from Lambda in the same region
    s3_call_ms: float = 20.0  # assumed: one small S3 call
    plan_mb_per_s: float = 50.0  # assumed: one GetObject stream read by the Plan function
    report_readers: int = 16  # assumed: the report's pool reading the chunks' summaries
    quotas: Quotas = field(default_factory=Quotas)


@dataclass(frozen=True)
class MonthModel:
    inputs: MonthInputs
    chunks: int
    concurrency: int  # chunks running at once
    concurrency_bound: str  # which of the three limits sets it
    chunk_s: float  # one chunk unthrottled: round trips x latency + CPU / share
    plan_s: float
    report_s: float
    limits_s: dict[str, float]  # how long the map takes by each limit alone
    bottleneck: str
    map_s: float
    total_s: float
    rows_per_s: float  # over the whole load, plan and report included
    chunk_billed_s: float  # a chunk's Lambda duration: longer than chunk_s when a table holds it back
    saturating_concurrency: int  # the MaxConcurrency at which the chunks alone reach the slowest table's rate

    @property
    def fits_timeout(self) -> bool:
        return self.chunk_billed_s <= self.inputs.timeout_s


def cpu_share(memory_mb: int) -> float:
    """The share of one vCPU Lambda gives a function of this memory."""
    return min(memory_mb / FULL_CORE_MB, 1.0)


def chunk_seconds(chunk: ChunkProfile, memory_mb: int, dynamodb_call_ms: float, s3_call_ms: float) -> float:
    """One chunk's duration when nothing throttles it."""
    waits = (chunk.dynamodb_round_trips * dynamodb_call_ms + chunk.s3_round_trips * s3_call_ms) / 1000
    return waits + chunk.cpu_s / cpu_share(memory_mb)


def month_model(inputs: MonthInputs) -> MonthModel:
    """How long `inputs.rows` rows take through the bulk route at the quotas given, and why."""
    quotas = inputs.quotas
    chunks = math.ceil(inputs.rows / inputs.chunk.rows)
    bounds = {
        "the map's MaxConcurrency": inputs.max_concurrency,
        "the Distributed Map's parallel children": quotas.map_children,
        "the account's Lambda concurrency": quotas.lambda_concurrency,
    }
    concurrency_bound = min(bounds, key=lambda name: bounds[name])
    concurrency = max(1, min(bounds[concurrency_bound], chunks))
    chunk_s = chunk_seconds(inputs.chunk, inputs.memory_mb, inputs.dynamodb_call_ms, inputs.s3_call_ms)
    limits_s = {f"chunks: {concurrency} at a time ({concurrency_bound})": math.ceil(chunks / concurrency) * chunk_s}
    for table, units in inputs.wru_per_row.items():
        limits_s[f"DynamoDB writes, {table}"] = inputs.rows * units / quotas.table_write_units_per_s
    for table, units in inputs.rru_per_row.items():
        limits_s[f"DynamoDB reads, {table}"] = inputs.rows * units / quotas.table_read_units_per_s
    bottleneck = max(limits_s, key=lambda name: limits_s[name])
    map_s = limits_s[bottleneck]
    plan_s = inputs.rows * inputs.bytes_per_row / (inputs.plan_mb_per_s * 1e6)
    # A list page per 1,000 summaries, then the summaries read `report_readers` at a time, and the report written.
    report_s = (math.ceil(chunks / 1000) + math.ceil(chunks / inputs.report_readers) + 1) * inputs.s3_call_ms / 1000
    total_s = plan_s + map_s + report_s
    # While a table holds the load back, every slot runs a chunk for the whole map: each chunk lasts its share.
    chunk_billed_s = chunk_s if bottleneck.startswith("chunks") else max(chunk_s, map_s * concurrency / chunks)
    tables_s = max((seconds for name, seconds in limits_s.items() if name.startswith("DynamoDB")), default=0.0)
    # More chunks at once than this only wait longer on the tables (and are billed for it).
    saturating = math.ceil(inputs.rows / tables_s * chunk_s / inputs.chunk.rows) if tables_s else quotas.lambda_concurrency
    return MonthModel(
        inputs=inputs,
        chunks=chunks,
        concurrency=concurrency,
        concurrency_bound=concurrency_bound,
        chunk_s=chunk_s,
        plan_s=plan_s,
        report_s=report_s,
        limits_s=limits_s,
        bottleneck=bottleneck,
        map_s=map_s,
        total_s=total_s,
        rows_per_s=inputs.rows / total_s,
        chunk_billed_s=chunk_billed_s,
        saturating_concurrency=saturating,
    )


@dataclass(frozen=True)
class RouteCounts:
    """What one route bills for `rows` rows (counted, measured or modelled; see each caller)."""

    label: str
    rows: int
    lambda_requests: float
    lambda_gb_s: float
    transitions: float  # Step Functions Standard state transitions
    wru: float
    rru: float
    s3_put_class: float  # PUT, COPY, POST, LIST
    s3_get_class: float  # GET, HEAD and the rest
    api_requests: float  # HTTP API requests


def cost_per_million_rows(counts: RouteCounts, prices: Mapping[str, float] = PRICES) -> dict[str, float]:
    """Dollars per million rows, by what bills them."""
    scale = 1e6 / counts.rows
    costs = {
        "lambda": counts.lambda_requests * prices["lambda_request"] + counts.lambda_gb_s * prices["lambda_gb_second_arm"],
        "step functions": counts.transitions * prices["standard_transition"],
        "dynamodb": counts.wru * prices["wru"] + counts.rru * prices["rru"],
        "s3": counts.s3_put_class * prices["s3_put_request"] + counts.s3_get_class * prices["s3_get_request"],
        "api": counts.api_requests * prices["http_api_request"],
    }
    return {name: value * scale for name, value in costs.items()}


# --- the bulk route at a month's size -------------------------------------------------------------


MULTIPART_PART_BYTES = 8 * 1024 * 1024  # boto3's managed transfer: parts of 8 MiB above 8 MiB
POLL_SECONDS = 2.0  # the loader's GET /loads/{LoadId} while a load runs (onceflow/clients/taxi_loader.py)


@dataclass(frozen=True)
class BulkShape:
    """What a load costs besides its rows' DynamoDB units, per load and per chunk (measured on the
    embedded cloud, the transitions counted from the definition)."""

    parent_transitions: float  # the parent execution's, per load
    child_transitions: float  # per chunk: one for the child execution the map starts, plus its states
    load_invocations: float  # Plan, Report and the loads API's POST (the polls are added by duration)
    load_s3_put_class: float  # per load, the upload aside: the manifest, the report
    load_s3_get_class: float  # per load: the Plan's read, the map's ItemReader, the report's list and reads besides the summaries
    chunk_s3_put_class: float  # per chunk: its summary
    chunk_s3_get_class: float  # per chunk: the summary check, the range read, the report's read of its summary


def upload_requests(file_bytes: float) -> int:
    """S3 PUT-class requests of the loader's upload: one PUT, or a multipart upload (create, the parts, complete)."""
    if file_bytes <= MULTIPART_PART_BYTES:
        return 1
    return 2 + math.ceil(file_bytes / MULTIPART_PART_BYTES)


def month_counts(model: MonthModel, shape: BulkShape, memory_mb: int) -> RouteCounts:
    """What the modelled load bills: its chunks at their modelled (or held back) duration, Plan and
    Report for their modelled durations, the loader's polls while it runs."""
    inputs = model.inputs
    gb = memory_mb / 1024
    polls = math.ceil(model.total_s / POLL_SECONDS)
    file_bytes = inputs.rows * inputs.bytes_per_row
    return RouteCounts(
        label=f"bulk route, a {inputs.rows:,}-row file (modelled)",
        rows=inputs.rows,
        lambda_requests=model.chunks + shape.load_invocations + polls,
        lambda_gb_s=gb * (model.chunks * model.chunk_billed_s + model.plan_s + model.report_s + polls * API_SECONDS),
        transitions=shape.parent_transitions + model.chunks * shape.child_transitions,
        wru=inputs.rows * sum(inputs.wru_per_row.values()),
        rru=inputs.rows * sum(inputs.rru_per_row.values()),
        s3_put_class=upload_requests(file_bytes) + shape.load_s3_put_class + model.chunks * shape.chunk_s3_put_class,
        s3_get_class=shape.load_s3_get_class + model.chunks * shape.chunk_s3_get_class,
        api_requests=1 + polls,
    )


def success_path(definition: Mapping[str, Any]) -> list[str]:
    """The states an execution of `definition` enters when every task succeeds first time (Next from StartAt;
    a Choice is not followed: the bulk machine's paths have none)."""
    states: Mapping[str, Any] = definition["States"]
    path: list[str] = []
    name: str | None = definition["StartAt"]
    while name is not None:
        if name in path or len(path) > len(states):
            raise ValueError(f"the definition loops at {name}")
        path.append(name)
        state = states[name]
        if state["Type"] == "Choice":
            raise ValueError(f"{name} is a Choice: its path depends on the data")
        name = state.get("Next")
    return path


def distributed_map(definition: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The definition's Distributed Map state: its name and its child definition (ItemProcessor)."""
    for name, state in definition["States"].items():
        processor = state.get("ItemProcessor") or {}
        if state["Type"] == "Map" and processor.get("ProcessorConfig", {}).get("Mode") == "DISTRIBUTED":
            return name, processor
    raise ValueError("the definition has no Distributed Map")


def transitions_from_definition(definition: Mapping[str, Any]) -> tuple[int, int]:
    """(per load, per chunk) Standard transitions on the success path: one per state the parent enters; per
    child, one for the child execution the map starts (Step Functions bills it) plus one per state it enters."""
    _, child = distributed_map(definition)
    return len(success_path(definition)), 1 + len(success_path(child))


# --- the rows -------------------------------------------------------------------------------------


def shifted(line: str, seconds: int) -> str:
    """`line` with its pick-up and drop-off `seconds` later: another trip, the same duration."""
    columns = line_columns(line)
    for position in (PICKUP, DROPOFF):
        moment = datetime.fromisoformat(columns[position]) + timedelta(seconds=seconds)
        columns[position] = moment.strftime(TIMESTAMP_FORMAT)
    return ",".join(columns)


def bench_lines(rows: int, *, offset: int = 0) -> list[str]:
    """`rows` lines: the real sample's, then copies of it `offset + k` seconds later (copy k), in that order."""
    sample = sample_lines()
    lines: list[str] = []
    for copy in range(math.ceil(rows / len(sample))):
        seconds = offset + copy
        lines.extend(sample if seconds == 0 else [shifted(line, seconds) for line in sample])
    return lines[:rows]


def csv_file(lines: Sequence[str]) -> bytes:
    """A TLC-style file of these lines: the sample's header, LF line ends."""
    return ("\n".join([sample_header(), *lines]) + "\n").encode()


def expected_outcome(lines: Sequence[str]) -> tuple[int, int]:
    """(distinct rows, rows the saga stores): a row is stored once when it passes validation and transformation."""
    distinct = {content_id(line): line for line in lines}
    stored = 0
    for line in distinct.values():
        validated = validate_line(line)
        if isinstance(validated, Accepted) and isinstance(transform_tuple(validated.tuple), Accepted):
            stored += 1
    return len(distinct), stored


# --- the runs on the embedded cloud ----------------------------------------------------------------


@dataclass
class Run:
    """One route's run over its rows: what it took, what it made, what it billed."""

    route: str
    rows: int  # distinct rows sent
    wall_s: float
    cpu_s: float  # the whole process's: the embedded cloud's included
    stored: int  # trips table items at the end
    expected_stored: int
    calls: dict[str, int]  # every AWS call by operation (the SDK's, moto's executor's own included)
    wru_by_table: dict[str, float]  # by the table's role: trips, validation status, ...
    rru_by_table: dict[str, float]
    invocations: dict[str, int]  # Lambda invocations by handler
    transitions: int  # measured from the histories (the parent's only for the bulk route)
    executions: int
    api_requests: int
    checks: list[str] = field(default_factory=list)  # what did not hold (empty: every check held)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s

    def per_row(self, value: float) -> float:
        return value / self.rows


def table_roles(world: Any) -> dict[str, str]:
    """Physical table name -> what it holds."""
    environment = world.environment(taxi_etl_contract.HANDLER_FLAG)
    roles = {
        taxi_etl_contract.ENV_FINAL_TABLE: "trips",
        taxi_etl_contract.ENV_VALIDATION_STATUS_TABLE: "validation status",
        taxi_etl_contract.ENV_TRANSFORMATION_STATUS_TABLE: "transformation status",
        taxi_etl_contract.ENV_STORE_STATUS_TABLE: "store status",
    }
    return {environment[variable]: role for variable, role in roles.items()}


def by_role(units: Mapping[str, float], roles: Mapping[str, str]) -> dict[str, float]:
    return {role: float(units.get(table, 0.0)) for table, role in roles.items()}


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    """Wall and process CPU seconds of the block, filled in when it ends."""
    spent: dict[str, float] = {}
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield spent
    finally:
        spent["wall"], spent["cpu"] = time.perf_counter() - wall, time.process_time() - cpu


def run_bulk(template: dict[str, Any], lines: Sequence[str]) -> Run:
    """One file, one load through POST /loads (the bulk state machine runs it to its end), its report read back."""
    from devtools.aws.latency import Latency
    from devtools.taxi_world import TaxiWorld, embedded_saga_cloud, state_transitions

    data = csv_file(lines)
    rows, expected_stored = expected_outcome(lines)
    key = f"{taxi_etl_contract.INGEST_PREFIX}bench/{len(lines)}-rows.csv"
    with embedded_saga_cloud():
        world = TaxiWorld.create(template, bulk=True)
        roles = table_roles(world)
        meter = CapacityMeter()
        meter.attach(world.dynamodb)
        calls = Latency(0.0)
        marks: dict[str, dict[str, int]] = {}
        _mark_calls_around_plan_and_report(world, calls, marks)
        with calls.installed(), timed() as spent:
            status, answer = world.load(key, data)
            load_id = str(answer["loadId"])
            load_status, load = world.get_load(load_id)  # what the loader reads once the load is done
        report = world.report(load_id) or {}
        (execution,) = world.bulk_executions()
        arn = execution["executionArn"]
        history = [
            event
            for page in world.stepfunctions.get_paginator("get_execution_history").paginate(executionArn=arn)
            for event in page["events"]
        ]
        definition = json.loads(world.stepfunctions.describe_state_machine(stateMachineArn=world.bulk_state_machine_arn)["definition"])
        wru, rru = by_role(meter.wru_by_table, roles), by_role(meter.rru_by_table, roles)  # before the table is read back
        stored = len(world.final_items())
        invocations = dict(Counter(world.invocations.calls))
    checks = []
    if status not in (200, 202) or load_status != 200:
        checks.append(f"POST /loads answered {status}, GET /loads/{{id}} {load_status}")
    if execution["status"] != "SUCCEEDED":
        checks.append(f"the load's execution ended {execution['status']}")
    if load.get("report") != report:
        checks.append("GET /loads/{id} does not answer the report the Report task wrote")
    if stored != expected_stored:
        checks.append(f"trips table holds {stored} items, {expected_stored} rows pass the saga")
    flagged = sum(report.get("flagged", {}).values())
    totals = {
        "rowsRead": rows,
        "stored": expected_stored,
        "alreadyStored": 0,
        "refusedLines": 0,
        "chunksDone": report.get("chunks"),
    }
    for name, expected in totals.items():
        if report.get(name) != expected:
            checks.append(f"report {name} is {report.get(name)}, expected {expected}")
    if flagged != rows - expected_stored:
        checks.append(f"report flags {flagged} rows, expected {rows - expected_stored}")
    parent, child = transitions_from_definition(definition)
    return Run(
        route="bulk",
        rows=rows,
        wall_s=spent["wall"],
        cpu_s=spent["cpu"],
        stored=stored,
        expected_stored=expected_stored,
        calls=dict(calls.calls),
        wru_by_table=wru,
        rru_by_table=rru,
        invocations=invocations,
        transitions=state_transitions(history),
        executions=1,
        api_requests=2,  # POST /loads, then one GET /loads/{id}: moto ran the load inside the POST
        checks=checks,
        extra={
            "emulator_cpu_s": calls.emulator_cpu_s,
            "chunks": int(report.get("chunks") or 0),
            "report": report,
            "definition": definition,
            "transitions_from_definition": (parent, child),
            "marks": marks,
            "bytes": len(data),
        },
    )


def _mark_calls_around_plan_and_report(world: Any, calls: Any, marks: dict[str, dict[str, int]]) -> None:
    """Record the AWS calls made so far when Plan ends and when Report starts: the calls in between are the map's."""
    from devtools.aws.template_resources import find_function

    plan, report = (
        find_function(world.template, handler) for handler in (taxi_etl_contract.HANDLER_BULK_PLAN, taxi_etl_contract.HANDLER_BULK_REPORT)
    )
    routes = dict(world.routes)

    def after_plan(event: dict[str, Any]) -> dict[str, Any]:
        marks["plan start"] = dict(calls.calls)
        try:
            return routes[plan](event)
        finally:
            marks["plan end"] = dict(calls.calls)

    def around_report(event: dict[str, Any]) -> dict[str, Any]:
        marks["report start"] = dict(calls.calls)
        try:
            return routes[report](event)
        finally:
            marks["report end"] = dict(calls.calls)

    world.routes = {**routes, plan: after_plan, report: around_report}


def run_batches(template: dict[str, Any], lines: Sequence[str]) -> Run:
    """The rows through POST /trips/batch in 100-line batches, then each read back with GET /trips/{id}."""
    from devtools.aws.latency import Latency
    from devtools.taxi_world import TaxiWorld, embedded_saga_cloud, state_transitions

    rows, expected_stored = expected_outcome(lines)
    batches = [lines[i : i + BATCH_LINES] for i in range(0, len(lines), BATCH_LINES)]
    ids = list(dict.fromkeys(content_id(line) for line in lines))
    with embedded_saga_cloud():
        world = TaxiWorld.create(template)
        roles = table_roles(world)
        meter = CapacityMeter()
        meter.attach(world.dynamodb)
        calls = Latency(0.0)
        answers: Counter[int] = Counter()
        states: Counter[str] = Counter()
        with calls.installed(), timed() as spent:
            with world.serving_api():
                for batch in batches:
                    status, _ = world.post(taxi_etl_contract.ROUTE_TRIP_BATCH, "\n".join(batch))
                    answers[status] += 1
            rru_before_reads = meter.rru
            with reading_rows(world) as read:
                for store_request_id in ids:
                    status, body = read(store_request_id)
                    states[str(body.get("state")) if status == 200 else str(status)] += 1
        wru, rru = by_role(meter.wru_by_table, roles), by_role(meter.rru_by_table, roles)
        read_back_rru = meter.rru - rru_before_reads
        executions = world.executions()
        transitions = sum(state_transitions(world.history(execution["name"])) for execution in executions)
        stored = len(world.final_items())
        invocations = dict(Counter(world.invocations.calls))
    invocations[taxi_etl_contract.HANDLER_API] = len(batches)
    invocations[taxi_etl_contract.HANDLER_ROW_STATE] = len(ids)
    checks = []
    if set(answers) != {202}:
        checks.append(f"POST /trips/batch answered {dict(answers)}")
    if stored != expected_stored or states["stored"] != expected_stored:
        checks.append(f"trips table holds {stored} items, GET says {states['stored']} stored; {expected_stored} rows pass the saga")
    if states["flagged"] != rows - expected_stored:
        checks.append(f"GET says {states['flagged']} flagged, expected {rows - expected_stored}")
    return Run(
        route="batch",
        rows=rows,
        wall_s=spent["wall"],
        cpu_s=spent["cpu"],
        stored=stored,
        expected_stored=expected_stored,
        calls=dict(calls.calls),
        wru_by_table=wru,
        rru_by_table=rru,
        invocations=invocations,
        transitions=transitions,
        executions=len(executions),
        api_requests=len(batches) + len(ids),
        checks=checks,
        extra={
            "batches": len(batches),
            "gets": len(ids),
            "states": dict(states),
            "read_back_rru": read_back_rru,
            "emulator_cpu_s": calls.emulator_cpu_s,
        },
    )


@contextmanager
def reading_rows(world: Any) -> Iterator[Callable[[str], tuple[int, dict[str, Any]]]]:
    """GET /trips/{id} through its deployed entry point, warm (one cold start, as a Lambda serving a read-back),
    on the world's metered DynamoDB client."""
    from devtools.aws.lambda_context import FakeLambdaContext
    from devtools.taxi_world import ROW_STATE_ROUTE_KEY, http_api_event
    from runtime.shared.aws import Clients
    from runtime.taxi_etl import row_state_handler, row_state_wiring

    built = row_state_handler.deps
    row_state_handler.deps = functools.cache(lambda: row_state_wiring.build(row_state_handler.settings(), Clients(dynamodb=world.dynamodb)))
    row_state_handler.settings.cache_clear()

    def read(store_request_id: str) -> tuple[int, dict[str, Any]]:
        event = http_api_event(
            f"/trips/{store_request_id}",
            None,
            method="GET",
            route=ROW_STATE_ROUTE_KEY,
            path_parameters={taxi_etl_contract.KEY_STORE_REQUEST_ID: store_request_id},
        )
        response = row_state_handler.handler(event, FakeLambdaContext())  # type: ignore[arg-type]
        metrics.clear_metrics()
        return int(response["statusCode"]), json.loads(response["body"])

    try:
        with mock.patch.dict(os.environ, world.environment(taxi_etl_contract.HANDLER_ROW_STATE)):
            yield read
    finally:
        row_state_handler.deps = built
        row_state_handler.settings.cache_clear()


@dataclass(frozen=True)
class ChunkMeasure:
    """One chunk task alone: its serial round trips (measured on a small chunk under latency, scaled to a whole
    chunk by its rounds of rows written at once) and the CPU of a whole chunk."""

    rows: int  # a whole chunk's
    small: LatencyRun  # the small chunk under latency
    small_rows: int
    concurrency: int  # rows the chunk writes at once (each phase's rounds: rows / concurrency)
    client_cpu_s: float  # a whole chunk's CPU less the embedded cloud's: the handler's and the SDK's
    emulator_cpu_s: float  # a whole chunk's CPU in the embedded cloud (moto answering)
    calls: dict[str, int]  # a whole chunk's calls by operation

    @property
    def s3_round_trips(self) -> int:
        return sum(n for op, n in self.small.calls_by_operation.items() if op in S3_PUT_CLASS | S3_GET_CLASS)

    @property
    def dynamodb_round_trips(self) -> float:
        """The small chunk's DynamoDB depth, times the whole chunk's rounds over the small one's."""
        rounds = math.ceil(self.rows / self.concurrency) / math.ceil(self.small_rows / self.concurrency)
        return max(0.0, self.small.serial_depth - self.s3_round_trips) * rounds


def measure_chunk(template: dict[str, Any], chunk_rows: int, *, small_rows: int = 128) -> ChunkMeasure:
    """The chunk task's entry point alone, on fresh real rows each time (a later copy of the sample, so each run does
    the whole work): `small_rows` rows with every AWS call delayed (devtools.aws.latency), for the serial round
    trips; then `chunk_rows` rows once with no delay, for the CPU. No capacity meter: its look-ups would count as
    the handler's CPU."""
    from devtools.aws.lambda_context import FakeLambdaContext, as_lambda_context
    from devtools.aws.latency import Latency, measure
    from devtools.taxi_world import TaxiWorld, embedded_saga_cloud
    from runtime.shared.aws import Clients
    from runtime.taxi_etl import bulk_chunk_handler, bulk_chunk_wiring
    from runtime.taxi_etl.bulk_plan import cut_file

    with embedded_saga_cloud():
        world = TaxiWorld.create(template, bulk=True)
        settings = bulk_chunk_wiring.BulkChunkSettings.from_env(world.environment(taxi_etl_contract.HANDLER_BULK_CHUNK))
        deps = bulk_chunk_wiring.build(settings, Clients(dynamodb=world.dynamodb, s3=world.s3))
        context = as_lambda_context(FakeLambdaContext())
        prepared: dict[str, Any] = {"runs": 0}

        def prepare(rows: int) -> None:
            # Copies 1,000 s and more later than the sample: rows no load and no earlier run stored.
            number = prepared["runs"] = prepared["runs"] + 1
            lines = bench_lines(rows, offset=1000 + 60 * number)
            data = csv_file(lines)
            key = f"{taxi_etl_contract.INGEST_PREFIX}bench/chunk-{number}.csv"
            version = world.put_file(key, data)
            (chunk, *rest), layout, _ = cut_file([data], len(lines) + 1)
            if rest or layout is None:
                raise RuntimeError("the chunk's file should be one chunk with a layout")
            # The chunk task's input as the map's ItemSelector builds it: the load, its layout, the manifest item.
            prepared["event"] = dict(
                bucket=world.ingest_bucket,
                key=key,
                versionId=version,
                loadId=f"load-bench-chunk-{number}",
                layout=layout.to_json(),
                chunk=chunk.to_json(),
            )

        def run() -> None:
            bulk_chunk_handler.handle(prepared["event"], context, deps)

        small = measure(run, lambda: prepare(small_rows), 20.0, io_bound_delays_ms=(200.0, 400.0))
        prepare(chunk_rows)
        whole = Latency(0.0)
        with whole.installed(), timed() as spent:
            run()
    return ChunkMeasure(
        rows=chunk_rows,
        small=small,
        small_rows=small_rows,
        concurrency=deps.concurrency,
        client_cpu_s=max(0.0, spent["cpu"] - whole.emulator_cpu_s),
        emulator_cpu_s=whole.emulator_cpu_s,
        calls=dict(whole.calls),
    )


# --- what the runs bill -----------------------------------------------------------------------------

S3_PUT_CLASS = frozenset(
    {
        "PutObject",
        "CopyObject",
        "PostObject",
        "ListObjectsV2",
        "ListObjects",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
    }
)
S3_GET_CLASS = frozenset({"GetObject", "HeadObject"})


def s3_requests(calls: Mapping[str, int]) -> tuple[int, int]:
    """(PUT-class, GET-class) S3 requests among these calls."""
    return sum(n for op, n in calls.items() if op in S3_PUT_CLASS), sum(n for op, n in calls.items() if op in S3_GET_CLASS)


def calls_between(later: Mapping[str, int], earlier: Mapping[str, int]) -> dict[str, int]:
    return {op: n - earlier.get(op, 0) for op, n in later.items() if n - earlier.get(op, 0)}


def bulk_shape(run: Run) -> BulkShape:
    """Per load and per chunk, from the bulk run: the calls between Plan's end and Report's start are the chunks'
    (and the map's one read of the manifest); Report's reads of the summaries are per chunk too."""
    marks, chunks = run.extra["marks"], run.extra["chunks"]
    chunk_calls = calls_between(marks["report start"], marks["plan end"])
    report_calls = calls_between(marks["report end"], marks["report start"])
    load_calls = calls_between(run.calls, calls_between(marks["report end"], marks["plan end"]))
    chunk_put, chunk_get = s3_requests(chunk_calls)
    report_put, report_get = s3_requests(report_calls)
    summary_reads = report_calls.get("GetObject", 0)
    load_put, load_get = s3_requests(load_calls)
    _, child = run.extra["transitions_from_definition"]
    return BulkShape(
        parent_transitions=run.transitions,  # measured: the parent's history is on moto
        child_transitions=child,
        load_invocations=run.invocations.get(taxi_etl_contract.HANDLER_BULK_PLAN, 0)
        + run.invocations.get(taxi_etl_contract.HANDLER_BULK_REPORT, 0)
        + 1,  # POST /loads
        load_s3_put_class=load_put - 1 + report_put,  # the bench's own upload aside: month_counts models the loader's
        load_s3_get_class=load_get + report_get - summary_reads,
        chunk_s3_put_class=chunk_put / chunks,
        chunk_s3_get_class=(chunk_get + summary_reads) / chunks,
    )


def batch_counts(run: Run) -> RouteCounts:
    """The batch route as measured; Lambda durations assumed as benchmarks/taxi_cost.py assumes them."""
    phase_invocations = sum(n for handler, n in run.invocations.items() if handler not in API_HANDLERS)
    api_invocations = sum(n for handler, n in run.invocations.items() if handler in API_HANDLERS)
    seconds = (
        phase_invocations * PHASE_MS_PER_INVOCATION + run.stored * 3 * PHASE_MS_PER_ROW + api_invocations * API_MS_PER_REQUEST
    ) / 1000
    put, get = s3_requests(run.calls)
    return RouteCounts(
        label=f"/trips/batch ({BATCH_LINES} rows) + GET /trips/{{id}} per row",
        rows=run.rows,
        lambda_requests=phase_invocations + api_invocations,
        lambda_gb_s=seconds * LAMBDA_GB,
        transitions=run.transitions,
        wru=sum(run.wru_by_table.values()),
        rru=sum(run.rru_by_table.values()),
        s3_put_class=put,
        s3_get_class=get,
        api_requests=run.api_requests,
    )


def without_read_back(counts: RouteCounts, run: Run) -> RouteCounts:
    """The batch route's counts less the read-back GETs (their Lambda, API requests and reads): a producer that never asks."""
    gets = run.extra["gets"]
    return replace(
        counts,
        label=f"/trips/batch ({BATCH_LINES} rows), no read-back",
        lambda_requests=counts.lambda_requests - gets,
        lambda_gb_s=counts.lambda_gb_s - gets * API_MS_PER_REQUEST / 1000 * LAMBDA_GB,
        rru=counts.rru - run.extra["read_back_rru"],
        api_requests=counts.api_requests - gets,
    )


# --- the section --------------------------------------------------------------------------------------

MONTH_ROWS = 3_000_000
TARGET_RATIO = 10.0  # bulk rows/s over the batch route's, on the embedded cloud
TARGET_MONTH_S = 30 * 60


def function_properties(template: dict[str, Any], handler: str) -> dict[str, Any]:
    from devtools.aws.template_resources import find_function

    properties: dict[str, Any] = template["Resources"][find_function(template, handler)]["Properties"]
    return properties


def month_inputs(template: dict[str, Any], bulk: Run, chunk: ChunkMeasure, rows: int = MONTH_ROWS) -> MonthInputs:
    """The model's inputs: the synthesized functions and map, and what the runs measured."""
    chunk_function = function_properties(template, taxi_etl_contract.HANDLER_BULK_CHUNK)
    plan_variables = function_properties(template, taxi_etl_contract.HANDLER_BULK_PLAN)["Environment"]["Variables"]
    _, processor = distributed_map(bulk.extra["definition"])
    map_state = next(state for state in bulk.extra["definition"]["States"].values() if state.get("ItemProcessor") is processor)
    return MonthInputs(
        rows=rows,
        bytes_per_row=bulk.extra["bytes"] / bulk.rows,
        chunk=ChunkProfile(
            rows=int(plan_variables[taxi_etl_contract.ENV_CHUNK_ROWS]),
            dynamodb_round_trips=chunk.dynamodb_round_trips,
            s3_round_trips=chunk.s3_round_trips,
            cpu_s=chunk.client_cpu_s,
        ),
        max_concurrency=int(map_state["MaxConcurrency"]),
        memory_mb=int(chunk_function["MemorySize"]),
        timeout_s=float(chunk_function["Timeout"]),
        wru_per_row={role: bulk.per_row(units) for role, units in bulk.wru_by_table.items()},
        rru_per_row={role: bulk.per_row(units) for role, units in bulk.rru_by_table.items() if units},
    )


def print_costs(rows: Sequence[RouteCounts]) -> dict[str, float]:
    names = ("lambda", "step functions", "dynamodb", "s3", "api")
    print(f"\n{'$ per million rows':<62} " + " ".join(f"{name:>14}" for name in names) + f" {'total':>8}")
    totals = {}
    for counts in rows:
        costs = cost_per_million_rows(counts)
        totals[counts.label] = sum(costs.values())
        print(f"{counts.label:<62} " + " ".join(f"{costs[name]:>14.3f}" for name in names) + f" {totals[counts.label]:>8.3f}")
    return totals


def main(template: dict[str, Any], *, bulk_rows: int = 100_000, http_rows: int = 5_000) -> bool:
    """Both routes on the same rows, one chunk under latency, the month model; True when every check held."""
    lines = bench_lines(bulk_rows)
    http_lines = lines[:http_rows]
    print(
        f"\n== bulk route: a file through POST /loads against /trips/batch, same rows, same run "
        f"({len(lines):,} rows: the 2,000 real rows and copies moved by whole seconds) =="
    )
    bulk = run_bulk(template, lines)
    batch = run_batches(template, http_lines)
    chunk_rows = int(
        function_properties(template, taxi_etl_contract.HANDLER_BULK_PLAN)["Environment"]["Variables"][taxi_etl_contract.ENV_CHUNK_ROWS]
    )
    chunk = measure_chunk(template, chunk_rows)
    sample_note = (
        "" if len(http_lines) == len(lines) else f" (the first {len(http_lines):,} of the same rows: moto runs a few executions a second)"
    )
    print(f"\n{'route':<44} {'rows':>8} {'wall s':>8} {'CPU s':>8} {'rows/s':>8} {'executions':>10} {'chunks':>6} {'stored':>7}  checks")
    for run, what in (
        (bulk, "bulk: 1 file, POST /loads, GET /loads/{id}"),
        (batch, f"batch: POST /trips/batch + GET /trips/{{id}}{'*' if sample_note else ''}"),
    ):
        print(
            f"{what:<44} {run.rows:>8,} {run.wall_s:>8.1f} {run.cpu_s:>8.1f} {run.rows_per_s:>8.1f} {run.executions:>10} "
            f"{run.extra.get('chunks', '-'):>6} {run.stored:>7,}  {'; '.join(run.checks) or 'all held'}"
        )
    if sample_note:
        print(f"* {sample_note.strip()}: rows/s is the figure compared")
    ratio = bulk.rows_per_s / batch.rows_per_s
    print(
        f"target: bulk >= {TARGET_RATIO:.0f}x the batch route's rows/s on the embedded cloud -> {ratio:.1f}x "
        f"({'within' if ratio >= TARGET_RATIO else 'OUTSIDE'} target); CPU per row {1000 * bulk.cpu_s / bulk.rows:.2f} ms bulk, "
        f"{1000 * batch.cpu_s / batch.rows:.2f} ms batch, of which the embedded cloud answering the calls "
        f"{1000 * bulk.extra['emulator_cpu_s'] / bulk.rows:.2f} and {1000 * batch.extra['emulator_cpu_s'] / batch.rows:.2f} ms "
        f"(both runs carry the capacity meter)"
    )

    print(f"\n{'request units per row, by table':<36} " + " ".join(f"{role:>22}" for role in bulk.wru_by_table) + f" {'all':>6}")
    for run in (bulk, batch):
        for kind, units in (("WRU", run.wru_by_table), ("RRU", run.rru_by_table)):
            print(
                f"{run.route + ' ' + kind:<36} "
                + " ".join(f"{run.per_row(units[role]):>22.3f}" for role in bulk.wru_by_table)
                + f" {run.per_row(sum(units.values())):>6.3f}"
            )

    small = chunk.small
    calls = ", ".join(f"{op} {n:,}" for op, n in sorted(chunk.calls.items()))
    print(
        f"\none chunk of {chunk.rows:,} rows alone: {sum(chunk.calls.values()):,} calls ({calls}); CPU {chunk.client_cpu_s:.2f} s in the "
        f"handler and the SDK, {chunk.emulator_cpu_s:.2f} s in the embedded cloud answering"
    )
    print(
        f"its serial round trips: {chunk.s3_round_trips} S3 + {chunk.dynamodb_round_trips:.0f} DynamoDB, "
        f"from a {chunk.small_rows}-row chunk "
        f"under latency ({small.calls} calls, serial depth {small.serial_depth:.1f} by {small.method}, peak in flight "
        f"{small.peak_in_flight}) scaled by the rounds of {chunk.concurrency} rows written at once "
        f"({math.ceil(chunk.rows / chunk.concurrency)} rounds against {math.ceil(chunk.small_rows / chunk.concurrency)})"
    )
    if ratio < TARGET_RATIO:
        # What bounds bulk on the embedded cloud: one process's CPU, most of it per AWS call, and a chunk's calls are
        # its puts (one conditional PutItem per new row: the exactly-once store; BatchWriteItem takes no condition).
        puts = chunk.calls.get("PutItem", 0)
        print(
            f"bottleneck on the embedded cloud: CPU in one process, {1000 * bulk.cpu_s / bulk.rows:.2f} ms per row; a chunk's "
            f"calls are {puts:,} conditional PutItem of {sum(chunk.calls.values()):,} (one per new row), "
            f"{1000 * chunk.client_cpu_s / chunk.rows:.2f} ms per row in the handler and the SDK and "
            f"{1000 * chunk.emulator_cpu_s / chunk.rows:.2f} ms in the embedded cloud answering; the batch route spends "
            f"{1000 * batch.cpu_s / batch.rows:.2f} ms per row, so {TARGET_RATIO:.0f}x needs a whole load under "
            f"about {1000 * batch.cpu_s / batch.rows / TARGET_RATIO:.2f} ms per row"
        )
    aws_calls = {run.route: sum(n for op, n in run.calls.items()) for run in (bulk, batch)}
    print(
        "AWS calls per row (every client's, the executor's own included): "
        + ", ".join(f"{route} {n / run.rows:.2f}" for (route, n), run in zip(aws_calls.items(), (bulk, batch), strict=True))
    )

    inputs = month_inputs(template, bulk, chunk)
    model = month_model(inputs)
    bench_model = month_model(replace(inputs, rows=bulk.rows))
    shape = bulk_shape(bulk)
    bulk_bench = replace(month_counts(bench_model, shape, inputs.memory_mb), label=f"bulk route, this run's {bulk.rows:,} rows")
    bulk_month = month_counts(model, shape, inputs.memory_mb)
    batch_measured = batch_counts(batch)
    producer = without_read_back(batch_measured, batch)
    totals = print_costs([bulk_bench, bulk_month, batch_measured, producer])
    print(
        f"counts per row: bulk month {bulk_month.transitions / bulk_month.rows:.4f} transitions (parent {shape.parent_transitions} "
        f"measured, {bulk.extra['transitions_from_definition'][0]} on the definition's success path; "
        f"{shape.child_transitions} per chunk from the definition: moto's children are no executions), "
        f"{bulk_month.lambda_requests / bulk_month.rows:.5f} Lambda requests, "
        f"{bulk_month.s3_put_class / bulk_month.rows:.5f} S3 PUT/LIST and {bulk_month.s3_get_class / bulk_month.rows:.5f} GET/HEAD, "
        f"{bulk_month.api_requests / bulk_month.rows:.6f} API requests; batch {batch_measured.transitions / batch.rows:.3f} transitions, "
        f"{batch_measured.lambda_requests / batch.rows:.3f} Lambda requests, "
        f"{batch_measured.api_requests / batch.rows:.2f} API requests ({batch.extra['batches']} POSTs, {batch.extra['gets']:,} GETs)"
    )
    print(
        f"Lambda durations: a chunk modelled ({model.chunk_s:.1f} s unthrottled, {model.chunk_billed_s:.1f} s billed in the month); "
        f"the batch route's assumed as in the saga section: phase {PHASE_MS_PER_INVOCATION:.0f} ms + {PHASE_MS_PER_ROW:.0f} ms/row, "
        f"API {API_MS_PER_REQUEST:.0f} ms per request, {LAMBDA_GB * 1024:.0f} MB arm64. Logs and traces left out of both."
    )

    print(f"\n== the bulk route on AWS: a {MONTH_ROWS:,}-row month at default quotas (model: benchmarks/bulk_load.month_model) ==")
    quotas = inputs.quotas
    print(
        f"inputs: chunk {inputs.chunk.rows:,} rows, {inputs.chunk.dynamodb_round_trips:.0f} DynamoDB round trips "
        f"x {inputs.dynamodb_call_ms:.0f} ms "
        f"+ {inputs.chunk.s3_round_trips:.0f} S3 x {inputs.s3_call_ms:.0f} ms (assumed latencies) + {inputs.chunk.cpu_s:.2f} s CPU on a "
        f"{cpu_share(inputs.memory_mb):.3f} share of a core ({inputs.memory_mb} MB); MaxConcurrency {inputs.max_concurrency}, "
        f"Distributed Map children {quotas.map_children:,}, Lambda concurrency {quotas.lambda_concurrency:,}; "
        f"new on-demand table {quotas.table_write_units_per_s:,.0f} WRU/s and {quotas.table_read_units_per_s:,.0f} RRU/s per table; "
        f"WRU per row "
        + ", ".join(f"{role} {units:.3f}" for role, units in inputs.wru_per_row.items())
        + "; RRU per row "
        + (", ".join(f"{role} {units:.3f}" for role, units in inputs.rru_per_row.items()) or "none")
        + f"; {inputs.bytes_per_row:.0f} B per row, Plan reads {inputs.plan_mb_per_s:.0f} MB/s; chunk timeout {inputs.timeout_s:.0f} s"
    )
    for name, seconds in model.limits_s.items():
        print(f"  {name:<64} {seconds:>8.0f} s{'  <- bottleneck' if name == model.bottleneck else ''}")
    print(
        f"{model.chunks:,} chunks, {model.concurrency} at a time ({model.concurrency_bound}); a chunk {model.chunk_s:.1f} s unthrottled, "
        f"{model.chunk_billed_s:.1f} s while the bottleneck holds it back "
        f"({'within' if model.fits_timeout else 'PAST'} its {inputs.timeout_s:.0f} s timeout); "
        f"{model.saturating_concurrency} chunks at a time would reach the slowest table's rate"
    )
    print(
        f"month: Plan {model.plan_s:.0f} s + map {model.map_s:.0f} s + Report {model.report_s:.1f} s = {model.total_s / 60:.1f} min, "
        f"{model.rows_per_s:,.0f} rows/s; bottleneck: {model.bottleneck}"
    )
    batch_total = totals[batch_measured.label]
    month_total = totals[bulk_month.label]
    time_ok, cost_ok = model.total_s <= TARGET_MONTH_S, month_total <= batch_total
    print(
        f"target: a month in <= {TARGET_MONTH_S // 60} min -> {model.total_s / 60:.1f} min ({'within' if time_ok else 'OUTSIDE'} target); "
        f"<= the batch route's $ per million rows -> ${month_total:.2f} vs ${batch_total:.2f} with the read-back "
        f"(${totals[producer.label]:.2f} without) ({'within' if cost_ok else 'OUTSIDE'} target)"
    )
    for memory_mb in sorted({inputs.memory_mb, 1024, FULL_CORE_MB}):
        # MaxConcurrency where the chunks just reach the tables' rate: more only wait on the tables, billed.
        fitted = month_model(replace(inputs, memory_mb=memory_mb))
        fitted = month_model(replace(inputs, memory_mb=memory_mb, max_concurrency=fitted.saturating_concurrency))
        fitted_cost = sum(cost_per_million_rows(month_counts(fitted, shape, memory_mb)).values())
        print(
            f"what if: chunk function at {memory_mb:,} MB, MaxConcurrency {fitted.inputs.max_concurrency}: a chunk {fitted.chunk_s:.1f} s, "
            f"the month {fitted.total_s / 60:.1f} min (bottleneck: {fitted.bottleneck}), ${fitted_cost:.2f} per million rows"
        )
    print(f"prices: {PRICES_CHECKED}: " + ", ".join(f"{name} {value:.3g}" for name, value in PRICES.items()))
    return not bulk.checks and not batch.checks
