"""`make bench`, taxi saga section: what a million rows cost, from per-row counts measured on moto.

Real rows (tests/data/taxi_etl), with 5 % of the rows re-sent by the client as whole requests, go
through five designs: the first 1,000 one row per request (50 re-sent), all 2,000 in batches of
100 (one batch re-sent):
  baseline  this project's state machine, one Standard execution per row, every retry a new one:
            through the API with a fresh Idempotency-Key per request, as the seed's hash + time +
            PRNG ids behave, so a retried row is processed, and stored, again
  seed      the seed's own workflow shape (benchmarks/seed_saga.py): its state machine, one row
            per execution started by API Gateway directly, no logging, no tracing
  single    this project's /trips: one Standard execution per distinct row; a retry starts nothing
  batch     this project's /trips/batch: 100 rows per Standard execution
  express   /trips on an EXPRESS state machine (billed per request and duration, not per transition)
Measured per row: state transitions (from each execution's history, retries included), Lambda
invocations (phases, flag steps, and the API function per request), DynamoDB request units
(devtools.aws.capacity), and what CloudWatch Logs and X-Ray would receive: the state machine's log
events at each environment's level (benchmarks/observability_cost.py), the functions' own output
(Powertools log lines and EMF metric records, as printed), one access-log line per request, and
one trace per request. Lambda and Express durations are not measurable on moto; the assumed ones
are printed with the prices. This prints figures; it is not a pass/fail test.
"""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from benchmarks.observability_cost import (
    LogPrices,
    TracePrices,
    access_log_line,
    default_sampling_share,
    execution_log_messages,
    ingested_bytes,
    resent_requests,
)
from benchmarks.seed_saga import PLATFORM_LOG_LINES, run_seed_shape
from devtools.aws.capacity import CapacityMeter
from devtools.aws.template_resources import resources_of_type
from devtools.taxi_rows import bad_at_validation, sample_lines
from devtools.taxi_world import TaxiWorld, embedded_saga_cloud, state_transitions
from onceflow.infra.config import EnvConfig, load_config
from runtime.shared.observability import logger, metrics
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trip_lines import Accepted, validate_line

SINGLE_ROWS = 1000  # moto runs a few executions a second: 1,050 per one-row design
RETRY_SHARE = 0.05  # of the rows, re-sent by the client as whole requests
BATCH_LINES = 100
ENVS = ("dev", "prod")
PRICES_CHECKED = "AWS list prices, us-east-1, as published in November 2024 (not re-checked here: no network)"
PRICES = {
    "standard_transition": 0.025 / 1000,  # Step Functions Standard, per state transition
    "express_request": 1.00 / 1e6,  # Step Functions Express, per execution
    "express_gb_second": 0.00001667,  # Express duration, per GB-second (billed in 64 MB steps)
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second_arm": 0.0000133334,
    "lambda_gb_second_x86": 0.0000166667,  # the seed's functions (x86_64)
    "wru": 0.625 / 1e6,  # DynamoDB on-demand, after the November 2024 price cut
    "rru": 0.125 / 1e6,
    "http_api_request": 1.00 / 1e6,  # first 300 million per month
    "s3_put_request": 0.005 / 1000,  # S3 Standard: PUT, COPY, POST, LIST (the bulk route, benchmarks/bulk_load.py)
    "s3_get_request": 0.0004 / 1000,  # S3 Standard: GET, SELECT and all other requests (HEAD)
}
# CloudWatch Logs: ingestion per GB (Step Functions' logs are vended logs: the same $0.50 up to 10 TB a
# month, less beyond) and storage per GB-month, kept as long as the log group's retention.
LOG_PRICES = LogPrices(ingestion_per_gib=0.50, storage_per_gib_month=0.03)
# X-Ray: per trace recorded, and per trace retrieved (counted once per trace: a look at the trace map).
TRACE_PRICES = TracePrices(recorded=5.00 / 1e6, retrieved=0.50 / 1e6)
RETENTION_DAYS = {"ONE_DAY": 1, "THREE_DAYS": 3, "ONE_WEEK": 7, "TWO_WEEKS": 14, "ONE_MONTH": 30, "THREE_MONTHS": 90, "SIX_MONTHS": 180}
SEED_RETENTION_DAYS = 90  # the seed's log groups never expire; priced as kept as long as prod keeps ours
# Assumed durations; the table is also printed with the phases' durations measured under latency
# (benchmarks/saga_latency.py: serial depth x 5 ms per call + CPU), which replace these when given.
PHASE_MS_PER_INVOCATION = 40.0
PHASE_MS_PER_ROW = 4.0  # one or two conditional writes per row
API_MS_PER_REQUEST = 30.0
LAMBDA_GB = 0.25  # 256 MB, the config's phase and API memory
SEED_LAMBDA_GB = 0.125  # the seed's functions: Lambda's default 128 MB
EXPRESS_SECONDS_PER_EXECUTION = 0.5
EXPRESS_GB = 0.0625  # 64 MB, the smallest step
# What API Gateway fills into the stage's access-log format for an accepted request.
ACCESS_LOG_VALUES = {
    "$context.requestId": "JxJ5vgLmoAMEVxw=",
    "$context.status": "202",
    "$context.responseLatency": "48",
}
SERVICE = taxi_etl_contract.SERVICE_TRANSFORM  # the longest of the functions' service names
TRACE_ID = "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1"
LOG_ORDER = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


@dataclass(frozen=True)
class PhaseDurations:
    """Measured Lambda durations (ms) of one phase invocation, per task, at 1 row and at 100 rows
    (benchmarks.saga_latency.phase_durations_ms); a batch of k rows is interpolated between them."""

    by_task: dict[str, dict[int, float]]

    def phases_ms(self, rows: float) -> float:
        """Validate + Transform + Store for one execution of `rows` rows."""
        total = 0.0
        for task in ("validate", "transform", "store"):
            one, hundred = self.by_task[task][1], self.by_task[task][100]
            total += one + (hundred - one) * (rows - 1) / 99
        return total


@dataclass
class Measured:
    design: str
    label: str
    rows: int  # distinct rows sent
    resent_rows: int  # rows in the requests sent again
    requests: int  # HTTP requests (retries included)
    executions: int
    transitions: int
    phase_invocations: int
    api_invocations: int  # the API function: one per request; none for the seed (API Gateway starts the execution)
    wru: float
    rru: float
    stored: int  # final-table items at the end
    sdk_calls: int  # AWS SDK calls the functions made (each an X-Ray subsegment when traced)
    log_bytes: dict[str, dict[str, int]]  # env -> source -> bytes CloudWatch Logs ingests
    traces: int  # traced requests: the execution and its functions join the API function's trace
    express: bool = False
    lambda_gb: float = LAMBDA_GB
    lambda_gb_second: float = PRICES["lambda_gb_second_arm"]
    retention_days: dict[str, int] = field(default_factory=dict)

    def per_row(self, value: float) -> float:
        return value / self.rows

    @property
    def resent_share(self) -> float:
        return self.resent_rows / self.rows

    @property
    def segments(self) -> int:
        """X-Ray documents: the state machine's segment, two per function invocation (service and function), one per SDK call."""
        if not self.traces:
            return 0
        return self.executions + 2 * (self.phase_invocations + self.api_invocations) + self.sdk_calls

    def cost_per_million_rows(self, env: str, sampled: float = 1.0, durations: PhaseDurations | None = None) -> dict[str, float]:
        scale = 1e6 / self.rows
        if durations is None:
            lambda_seconds = (self.phase_invocations * PHASE_MS_PER_INVOCATION + self.stored * 3 * PHASE_MS_PER_ROW) / 1000
        else:
            # Each execution runs the three phases once over its rows (flag steps are rare on clean rows).
            lambda_seconds = self.executions * durations.phases_ms(self.rows / self.executions) / 1000
        lambda_seconds += self.api_invocations * API_MS_PER_REQUEST / 1000
        costs = {
            "workflow": (
                self.executions * (PRICES["express_request"] + EXPRESS_SECONDS_PER_EXECUTION * EXPRESS_GB * PRICES["express_gb_second"])
                if self.express
                else self.transitions * PRICES["standard_transition"]
            ),
            "lambda": (self.phase_invocations + self.api_invocations) * PRICES["lambda_request"]
            + lambda_seconds * self.lambda_gb * self.lambda_gb_second,
            "dynamodb": self.wru * PRICES["wru"] + self.rru * PRICES["rru"],
            "api": self.requests * PRICES["http_api_request"],
            "logs": LOG_PRICES.cost(sum(self.log_bytes[env].values()), self.retention_days[env]),
            "traces": TRACE_PRICES.cost(self.traces, sampled),
        }
        return {name: value * scale for name, value in costs.items()}

    def total(self, env: str, sampled: float = 1.0, durations: PhaseDurations | None = None) -> float:
        return sum(self.cost_per_million_rows(env, sampled, durations).values())


def requests_for(lines: list[str], rng: random.Random, group: int, share: float = RETRY_SHARE) -> list[list[str]]:
    """The rows in requests of `group` lines, then whole requests sent again holding exactly `share` of the rows."""
    requests = [lines[i : i + group] for i in range(0, len(lines), group)]
    if any(len(request) != group for request in requests):
        raise ValueError(f"{len(lines)} rows do not make whole requests of {group}")
    retried = rng.sample(range(len(requests)), resent_requests(len(requests), group, share))
    return requests + [requests[i] for i in retried]


def resent_share(requests: list[list[str]], rows: int) -> float:
    """The share of the rows sent more than once (whole requests re-sent)."""
    return (sum(len(request) for request in requests) - rows) / rows


def execution_log_bytes(history: list[dict[str, Any]], execution_arn: str, *, level: str, include_data: bool) -> int:
    """What CloudWatch Logs ingests of one execution's history at `level`, with or without its data."""
    return ingested_bytes(execution_log_messages(history, execution_arn, level, include_data))


# --- what the functions print -------------------------------------------------------------------


class _Lines(io.TextIOBase):
    """A stdout that keeps whole lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._partial += text
        *complete, self._partial = self._partial.split("\n")
        self.lines.extend(complete)
        return len(text)


def function_log_bytes(lines: list[str], level: str) -> int:
    """What the functions' log groups ingest at Powertools level `level`: EMF records always, log lines at or above it."""
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            kept.append(line)
            continue
        record_level = record.get("level") if isinstance(record, dict) else None
        if record_level is None or LOG_ORDER.get(str(record_level), 0) >= LOG_ORDER[level]:
            kept.append(line)
    return ingested_bytes(kept)


@contextmanager
def functions_printing(world: TaxiWorld) -> Iterator[_Lines]:
    """Everything the functions log and every metric record they flush, caught as lines (at DEBUG)."""
    captured = _Lines()
    handler = logger.registered_handler
    previous_level = logger.log_level
    previous_stream = handler.setStream(captured)  # type: ignore[attr-defined]
    logger.setLevel("DEBUG")
    world.invocations.after = lambda _handler: metrics.flush_metrics() if metrics.metric_set else None
    service = metrics.provider.service
    metrics.provider.service = SERVICE  # each deployed function's POWERTOOLS_SERVICE_NAME: a "service" dimension on every record
    try:
        with mock.patch.dict(os.environ, {"POWERTOOLS_METRICS_DISABLED": "false", "_X_AMZN_TRACE_ID": TRACE_ID}), redirect_stdout(captured):
            yield captured
    finally:
        world.invocations.after = None
        metrics.provider.service = service
        handler.setStream(previous_stream)  # type: ignore[attr-defined]
        logger.setLevel(previous_level)


def access_log_bytes(template: dict[str, Any], route: str) -> int:
    (stage,) = resources_of_type(template, "AWS::ApiGatewayV2::Stage").values()
    line = access_log_line(stage["Properties"]["AccessLogSettings"]["Format"], {**ACCESS_LOG_VALUES, "$context.routeKey": route})
    return ingested_bytes([line])


def retention_days(config: EnvConfig) -> int:
    return RETENTION_DAYS[str(config.log_retention.value)]


# --- the runs ---------------------------------------------------------------------------------


def measure(template: dict[str, Any], design: str, label: str, requests: list[list[str]], rows: int) -> Measured:
    configs = {env: load_config(env) for env in ENVS}
    with embedded_saga_cloud():
        world = TaxiWorld.create(template, workflow_type="EXPRESS" if design == "express" else None)
        meter = CapacityMeter()
        meter.attach(world.dynamodb)
        duplicates = 0
        access_bytes = 0
        with world.serving_api(), functions_printing(world) as printed:
            for number, request in enumerate(requests):
                route = "POST /trips" if len(request) == 1 else "POST /trips/batch"
                if design == "baseline":
                    # A fresh id per request, as the seed's hash + time + PRNG gives.
                    status, _ = world.post(taxi_etl_contract.ROUTE_TRIP, request[0], idempotency_key=f"request-{number}")
                elif len(request) == 1:
                    status, _ = world.post(taxi_etl_contract.ROUTE_TRIP, request[0])
                else:
                    status, _ = world.post(taxi_etl_contract.ROUTE_TRIP_BATCH, "\n".join(request))
                duplicates += status == 200
                access_bytes += access_log_bytes(template, route)
        executions = world.executions()
        histories = {execution["executionArn"]: world.history(execution["name"]) for execution in executions}
        wru, rru, dynamodb_calls = meter.wru, meter.rru, sum(meter.calls.values())  # before reading the tables back
        log_bytes: dict[str, dict[str, int]] = {}
        for env, config in configs.items():
            level, with_data = str(config.taxi_etl.execution_log_level.value), config.taxi_etl.execution_log_data
            log_bytes[env] = {
                "state machine": sum(
                    execution_log_bytes(history, arn, level=level, include_data=with_data) for arn, history in histories.items()
                ),
                "functions": function_log_bytes(printed.lines, config.log_level),
                "API access": access_bytes,
            }
        return Measured(
            design=design,
            label=label,
            rows=rows,
            resent_rows=sum(len(request) for request in requests) - rows,
            requests=len(requests),
            executions=len(executions),
            transitions=sum(state_transitions(history) for history in histories.values()),
            phase_invocations=len(world.invocations.calls),
            api_invocations=len(requests),
            wru=wru,
            rru=rru,
            stored=len(world.final_items()),
            # The API's StartExecution per request, and its DescribeExecution for a duplicate.
            sdk_calls=dynamodb_calls + len(requests) + duplicates,
            log_bytes=log_bytes,
            traces=len(requests),
            express=design == "express",
            retention_days={env: retention_days(config) for env, config in configs.items()},
        )


def measure_seed(label: str, requests: list[list[str]], rows: int) -> Measured:
    run = run_seed_shape(requests)
    platform = ingested_bytes(PLATFORM_LOG_LINES) * run.invocations
    return Measured(
        design="seed",
        label=label,
        rows=rows,
        resent_rows=sum(len(request) for request in requests) - rows,
        requests=run.requests,
        executions=run.executions,
        transitions=run.transitions,
        phase_invocations=run.invocations,
        api_invocations=0,
        wru=run.wru,
        rru=run.rru,
        stored=run.stored,
        sdk_calls=run.dynamodb_calls,
        # The seed has no environments: the same (no state-machine logs, no access logs) in both columns.
        log_bytes={env: {"state machine": 0, "functions": platform, "API access": 0} for env in ENVS},
        traces=0,
        lambda_gb=SEED_LAMBDA_GB,
        lambda_gb_second=PRICES["lambda_gb_second_x86"],
        retention_days=dict.fromkeys(ENVS, SEED_RETENTION_DAYS),
    )


def flagged_row_error_bytes(template: dict[str, Any]) -> int:
    """What prod's level logs for one row flagged by Validate and sent alone (its execution ends in Fail)."""
    config = load_config("prod").taxi_etl
    with embedded_saga_cloud():
        world = TaxiWorld.create(template)
        with world.serving_api():
            world.post(taxi_etl_contract.ROUTE_TRIP, bad_at_validation(sample_lines()[0]))
        (execution,) = world.executions()
        history = world.history(execution["name"])
        return ingested_bytes(
            execution_log_messages(history, execution["executionArn"], str(config.execution_log_level.value), config.execution_log_data)
        )


def main(template: dict[str, Any], *, seed: int = 11, phase_durations: dict[str, dict[int, float]] | None = None) -> bool:
    """The cost table with assumed durations, and again with the phases' measured ones (measured here
    unless `phase_durations` from benchmarks.saga_latency are given)."""
    lines = sample_lines()
    sets = {"single": lines[:SINGLE_ROWS], "batch": lines}
    distinct = {name: len({content_id(line) for line in rows}) for name, rows in sets.items()}
    rng = random.Random(seed)
    singles = requests_for(sets["single"], rng, 1)
    batches = requests_for(sets["batch"], rng, BATCH_LINES)
    runs = {
        "baseline": ("this state machine, one Standard execution per row, every retry a new one", singles),
        "seed": ("the seed's own workflow (its state machine, no API function)", singles),
        "single": ("this project, /trips (Standard, one row)", singles),
        "batch": (f"this project, /trips/batch ({BATCH_LINES} rows, Standard)", batches),
        "express": ("this project, /trips on EXPRESS", singles),
    }
    row_set = {design: "batch" if design == "batch" else "single" for design in runs}
    measured = {
        design: measure_seed(label, requests, distinct["single"])
        if design == "seed"
        else measure(template, design, label, requests, distinct[row_set[design]])
        for design, (label, requests) in runs.items()
    }
    configs = {env: load_config(env) for env in ENVS}
    print(
        f"\n== taxi saga: cost per million rows (real rows: {distinct['single']} one per request, {distinct['batch']} in batches; "
        f"re-sent by the client: {RETRY_SHARE:.0%} of the rows) =="
    )
    print(
        f"{'design':<76} {'requests':>8} {'re-sent':>8} {'trans/row':>9} {'λ inv/row':>9} {'WRU/row':>8} {'RRU/row':>8} {'stored':>7} "
        f"{'traces/row':>10} {'segs/row':>8} {'log B/row dev':>13} {'log B/row prod':>14}"
    )
    for m in measured.values():
        log_dev, log_prod = (m.per_row(sum(m.log_bytes[env].values())) for env in ENVS)
        print(
            f"{m.label:<76} {m.requests:>8} {m.resent_share:>8.1%} {m.per_row(m.transitions):>9.2f} "
            f"{m.per_row(m.phase_invocations + m.api_invocations):>9.3f} {m.per_row(m.wru):>8.2f} {m.per_row(m.rru):>8.2f} "
            f"{m.stored:>7} {m.per_row(m.traces):>10.3f} {m.per_row(m.segments):>8.2f} {log_dev:>13.0f} {log_prod:>14.0f}"
        )
    baseline = measured["baseline"]
    print(
        f"\n{'$ per million rows':<76} {'workflow':>8} {'lambda':>7} {'dynamodb':>8} {'api':>5} {'logs dev':>8} {'logs prod':>9} "
        f"{'traces':>6} {'total dev':>9} {'total prod':>10} {'vs base dev':>11} {'vs base prod':>12}"
    )
    for m in measured.values():
        dev, prod = (m.cost_per_million_rows(env) for env in ENVS)
        print(
            f"{m.label:<76} {prod['workflow']:>8.2f} {prod['lambda']:>7.2f} {prod['dynamodb']:>8.2f} {prod['api']:>5.2f} "
            f"{dev['logs']:>8.2f} {prod['logs']:>9.2f} {prod['traces']:>6.2f} {m.total('dev'):>9.2f} {m.total('prod'):>10.2f} "
            f"{m.total('dev') / baseline.total('dev'):>10.3f}x {m.total('prod') / baseline.total('prod'):>11.3f}x"
        )
    batch = measured["batch"]
    for env in ENVS:
        costs = batch.cost_per_million_rows(env)
        sources = ", ".join(f"{source} {batch.per_row(size):.0f} B" for source, size in batch.log_bytes[env].items())
        print(
            f"batch route, {env}: DynamoDB ${costs['dynamodb']:.2f} + transitions ${costs['workflow']:.2f} + Lambda ${costs['lambda']:.2f} "
            f"+ API ${costs['api']:.2f} + logs ${costs['logs']:.2f} ({sources} per row) + traces ${costs['traces']:.2f} "
            f"= ${batch.total(env):.2f}"
        )
    # The rows the data-dictionary rules accept, counted without the saga: each must be stored exactly once.
    accepted = {name: sum(1 for line in set(rows) if isinstance(validate_line(line), Accepted)) for name, rows in sets.items()}
    print(
        f"stored: {accepted['single']} of {distinct['single']} and {accepted['batch']} of {distinct['batch']} rows pass validation; "
        f"stored twice: the baseline {baseline.stored - accepted['single']}, "
        f"the seed's workflow {measured['seed'].stored - accepted['single']}"
    )
    print("re-sent: " + ", ".join(f"{m.design} {m.resent_rows} of {m.rows} rows ({m.resent_share:.1%})" for m in measured.values()))
    ok = all(measured[design].stored == accepted[row_set[design]] for design in ("single", "batch", "express"))
    ok = ok and all(abs(m.resent_share - RETRY_SHARE) < 1e-9 for m in measured.values())
    within = True
    for reference in ("baseline", "seed"):
        ratios = {env: batch.total(env) / measured[reference].total(env) for env in ENVS}
        within = within and ratios["prod"] <= 0.2
        print(
            f"target: batch route <= 0.20x of {measured[reference].label} per million rows -> "
            f"prod {ratios['prod']:.3f}x ({'within' if ratios['prod'] <= 0.2 else 'OUTSIDE'} target), dev {ratios['dev']:.3f}x"
        )
    flagged = flagged_row_error_bytes(template)
    print(
        f"prod's state-machine logs on these clean rows: {sum(m.log_bytes['prod']['state machine'] for m in measured.values())} B; "
        f"a one-row request flagged by Validate logs {flagged} B at ERROR "
        f"(${LOG_PRICES.cost(flagged * 1e6, retention_days(configs['prod'])):.2f} per million such rows)"
    )
    busy = default_sampling_share(requests_per_second=100)
    print(
        "traces at 100 % sampling above (a load under 1 request/s); at 100 requests/s the default rule records "
        f"{busy:.1%}: single ${measured['single'].cost_per_million_rows('prod', busy)['traces']:.2f}, "
        f"batch ${batch.cost_per_million_rows('prod', busy)['traces']:.2f} per million rows"
    )
    levels = ", ".join(
        f"{env}: state machine {config.taxi_etl.execution_log_level.value}"
        f"{' with' if config.taxi_etl.execution_log_data else ' without'} execution data, functions {config.log_level}, "
        f"retention {retention_days(config)} days"
        for env, config in configs.items()
    )
    print(f"log levels: {levels}")
    print(f"prices: {PRICES_CHECKED}: {PRICES}; logs {LOG_PRICES}; traces {TRACE_PRICES}")
    if phase_durations is None:
        from benchmarks.saga_latency import phase_durations_ms

        phase_durations = phase_durations_ms(template)
    durations = PhaseDurations(phase_durations)
    print("\nLambda cost with the phases' durations measured under latency (depth x 5 ms per call + CPU), against the assumed ones:")
    print(f"{'$ per million rows, prod':<76} {'λ assumed':>10} {'λ measured':>11} {'total assumed':>14} {'total measured':>15}")
    for m in measured.values():
        if m.design == "seed":
            continue  # the seed's own functions were not measured; its row keeps the assumed durations
        print(
            f"{m.label:<76} {m.cost_per_million_rows('prod')['lambda']:>10.2f} "
            f"{m.cost_per_million_rows('prod', durations=durations)['lambda']:>11.2f} {m.total('prod'):>14.2f} "
            f"{m.total('prod', durations=durations):>15.2f}"
        )
    print(
        "measured phase durations (ms per invocation, 1 row / 100 rows): "
        + ", ".join(f"{task} {by_rows[1]:.0f} / {by_rows[100]:.0f}" for task, by_rows in phase_durations.items())
    )
    print(
        f"assumed durations: phase {PHASE_MS_PER_INVOCATION:.0f} ms + {PHASE_MS_PER_ROW:.0f} ms/row, API {API_MS_PER_REQUEST:.0f} ms, "
        f"{LAMBDA_GB * 1024:.0f} MB arm64 (the seed's: {SEED_LAMBDA_GB * 1024:.0f} MB x86_64); "
        f"Express {EXPRESS_SECONDS_PER_EXECUTION} s at {EXPRESS_GB * 1024:.0f} MB"
    )
    return ok and within
