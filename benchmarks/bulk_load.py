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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.taxi_cost import API_MS_PER_REQUEST, PRICES

FULL_CORE_MB = 1769  # Lambda's memory at which a function gets one whole vCPU
API_SECONDS = API_MS_PER_REQUEST / 1000  # assumed duration of an API function's request (benchmarks/taxi_cost.py)


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
    saturating_concurrency: int  # the MaxConcurrency at which the chunks alone reach the bottleneck's rate

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
    map_rows_per_s = inputs.rows / map_s if map_s else math.inf
    saturating = math.ceil(map_rows_per_s * chunk_s / inputs.chunk.rows) if map_s else concurrency
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
