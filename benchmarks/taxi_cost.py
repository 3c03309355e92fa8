"""`make bench`, taxi saga section: what a million rows cost, from per-row counts measured on moto.

Real rows (tests/data/taxi), with 5 % of the rows re-sent by the client (a whole request each
time), go through five designs: the first 1,000 one row per request (50 re-sent), all 2,000 in
batches of 100 (one batch re-sent):
  seed shape  the seed's own workflow: one Standard execution per request, three Lambda tasks
              chained directly (Validate -> Transform -> Store -> Succeed), each with a Catch to
              its phase's flag step; every retry is a new execution (the seed's ids are hash +
              time + PRNG), so a retried row is processed, and stored, again
  per row     this project's state machine, one execution per request, every retry a new one:
              what the seed's ids would cost on this workflow (a Choice after each phase)
  single      this project's /trips: one Standard execution per distinct row; a retry starts nothing
  batch       this project's /trips/batch: 100 rows per Standard execution
  express     /trips on an EXPRESS state machine (billed per request and duration, not per transition)
Measured per row: state transitions (from each execution's history, retries included), Lambda
invocations (phases, flag steps, and the API function per request), DynamoDB request units
(devtools.capacity), the bytes CloudWatch Logs would ingest (the execution log at each level,
from the history events; the functions' own log records and metric lines, as emitted), and X-Ray
traces. Lambda and Express durations, and the Lambda platform's own log lines, are not
measurable on moto; the assumed ones are printed with the prices. This prints figures; it is
not a pass/fail test.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

from devtools.capacity import CapacityMeter
from devtools.taxi_rows import sample_lines
from devtools.taxi_world import (
    ACCOUNT,
    FLAG_HANDLER,
    STORE_HANDLER,
    TRANSFORM_HANDLER,
    VALIDATE_HANDLER,
    TaxiWorld,
    embedded_saga_cloud,
    function_arn,
    state_transitions,
)
from devtools.template_resources import find_function
from runtime.shared.observability import logger, metrics
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trips import Accepted, validate_line

RETRY_SHARE = 0.05  # of the rows, re-sent by the client as whole requests
SINGLE_ROWS = 1000  # moto runs about five executions a second: 1,050 per one-row design
BATCH_LINES = 100
PRICES_CHECKED = "AWS list prices, us-east-1, as published in November 2024 (not re-checked here: no network)"
PRICES = {
    "standard_transition": 0.025 / 1000,  # Step Functions Standard, per state transition
    "express_request": 1.00 / 1e6,  # Step Functions Express, per execution
    "express_gb_second": 0.00001667,  # Express duration, per GB-second (billed in 64 MB steps)
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second_arm": 0.0000133334,
    "wru": 0.625 / 1e6,  # DynamoDB on-demand, after the November 2024 price cut
    "rru": 0.125 / 1e6,
    "http_api_request": 1.00 / 1e6,  # first 300 million per month
    "log_ingested_gb": 0.50,  # CloudWatch Logs, standard and vended (Step Functions) logs, first 10 TB
    "log_stored_gb_month": 0.03,  # priced here on the raw bytes: an upper bound (storage is compressed)
    "xray_trace": 5.00 / 1e6,  # traces recorded, after the 100,000 free each month
}
# Assumed, not measured (moto's timings say nothing about Lambda's).
PHASE_MS_PER_INVOCATION = 40.0
PHASE_MS_PER_ROW = 4.0  # one or two conditional writes per row
API_MS_PER_REQUEST = 30.0
LAMBDA_GB = 0.25  # 256 MB, the config's phase and API memory
EXPRESS_SECONDS_PER_EXECUTION = 0.5
EXPRESS_GB = 0.0625  # 64 MB, the smallest step
# Lambda's own lines per invocation in JSON format (platform.start, platform.report with the
# X-Ray fields); the functions log in JSON. Assumed from the documented record shapes.
PLATFORM_LOG_BYTES_PER_INVOCATION = 650
# What Powertools' inject_lambda_context adds to each record (function name, ARN, memory,
# request id, cold start, X-Ray trace id); the bench calls the handlers' logic without it.
LAMBDA_CONTEXT_LOG_BYTES = 280
# The default X-Ray sampling rule records the first request each second and 5 % of the rest: at
# any steady load the share recorded tends to 5 %.
XRAY_DEFAULT_SAMPLED = 0.05
# Months each environment keeps its logs (config.log_retention: a week in dev, three months in prod).
RETENTION_MONTHS = {"dev": 0.25, "prod": 3.0}
# Step Functions log levels: what each logs. ERROR logs only these history event types.
ERROR_EVENT_SUFFIXES = ("Failed", "TimedOut", "Aborted")
EXECUTION_DATA_KEYS = ("input", "output", "inputDetails", "outputDetails", "parameters")
ENVIRONMENT_LOGGING = {
    # env: (state machine log level, with execution data, the functions' log level)
    "dev": ("ALL", True, logging.DEBUG),
    "prod": ("ERROR", False, logging.INFO),
}


def execution_log_bytes(history: Sequence[dict[str, Any]], execution_arn: str, *, level: str, include_data: bool) -> int:
    """The bytes Step Functions sends to CloudWatch Logs for one execution's history.

    One log event per history event at ALL; at ERROR, only failure events (and the Fail state).
    Each carries its id, type, timestamp, the previous event's id, the execution ARN and its
    details, whose input and output are left out without execution data."""
    total = 0
    for event in history:
        kind = str(event["type"])
        if level == "ERROR" and not (kind.endswith(ERROR_EVENT_SUFFIXES) or kind == "FailStateEntered"):
            continue
        details = next((value for name, value in event.items() if name.endswith("EventDetails")), {})
        if not include_data:
            details = {name: value for name, value in details.items() if name not in EXECUTION_DATA_KEYS}
        record = {
            "id": str(event["id"]),
            "type": kind,
            "details": details,
            "previous_event_id": str(event.get("previousEventId", 0)),
            "event_timestamp": str(int(event["timestamp"].timestamp() * 1000)),
            "execution_arn": execution_arn,
        }
        total += len(json.dumps(record, default=str, separators=(",", ":")).encode())
    return total


class LogBytes(logging.Handler):
    """Counts the bytes of the functions' log records, formatted as Powertools formats them, by level."""

    def __init__(self, formatter: logging.Formatter | None) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(formatter)
        self.by_level: dict[int, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        size = len(self.format(record).encode()) + 1 + LAMBDA_CONTEXT_LOG_BYTES
        self.by_level[record.levelno] = self.by_level.get(record.levelno, 0) + size

    def at_or_above(self, level: int) -> int:
        return sum(size for levelno, size in self.by_level.items() if levelno >= level)


@contextlib.contextmanager
def counting_function_logs() -> Iterator[tuple[LogBytes, io.StringIO, list[int]]]:
    """Count what the functions would write: log records at every level, and metric (EMF) lines,
    whether printed (the API's flush, the flag step's dimensioned metrics) or cleared unflushed by
    the world (the phases)."""
    counter = LogBytes(getattr(logger, "registered_formatter", None))
    std_logger = logger._logger  # Powertools keeps the standard logger here
    level, std_logger.level = std_logger.level, logging.DEBUG
    # Counted, not printed: the bench's output stays the figures.
    handlers, std_logger.handlers = std_logger.handlers, [counter]
    printed = io.StringIO()
    cleared: list[int] = []
    clear = metrics.clear_metrics

    def measured_clear() -> None:
        if metrics.metric_set:
            cleared.append(len(json.dumps(metrics.serialize_metric_set(), separators=(",", ":")).encode()) + 1)
        clear()

    metrics.clear_metrics = measured_clear  # type: ignore[method-assign]
    try:
        # Metrics on, so that what the functions print is what Lambda would ingest.
        with contextlib.redirect_stdout(printed), mock.patch.dict(os.environ, {"POWERTOOLS_METRICS_DISABLED": "false"}):
            yield counter, printed, cleared
    finally:
        metrics.clear_metrics = clear  # type: ignore[method-assign]
        std_logger.handlers = handlers
        std_logger.level = level


@dataclass
class Measured:
    design: str
    rows: int  # distinct rows sent
    requests: int  # HTTP requests (retries included)
    executions: int
    transitions: int
    phase_invocations: int
    wru: float
    rru: float
    stored: int  # trips items at the end
    execution_log_bytes: dict[str, int]  # env -> bytes at that env's state machine log level
    function_log_bytes: dict[str, int]  # env -> the functions' records at that env's level, metric lines and platform lines
    traces: int  # one per API request (its execution joins the caller's trace)
    express: bool = False

    def per_row(self, value: float) -> float:
        return value / self.rows

    def cost_per_million_rows(self, env: str) -> dict[str, float]:
        scale = 1e6 / self.rows
        lambda_seconds = (self.phase_invocations * PHASE_MS_PER_INVOCATION + self.stored * 3 * PHASE_MS_PER_ROW) / 1000
        lambda_seconds += self.requests * API_MS_PER_REQUEST / 1000
        log_gb = (self.execution_log_bytes[env] + self.function_log_bytes[env]) / 1e9
        costs = {
            "workflow": (
                self.executions * (PRICES["express_request"] + EXPRESS_SECONDS_PER_EXECUTION * EXPRESS_GB * PRICES["express_gb_second"])
                if self.express
                else self.transitions * PRICES["standard_transition"]
            ),
            "lambda": (self.phase_invocations + self.requests) * PRICES["lambda_request"]
            + lambda_seconds * LAMBDA_GB * PRICES["lambda_gb_second_arm"],
            "dynamodb": self.wru * PRICES["wru"] + self.rru * PRICES["rru"],
            "api": self.requests * PRICES["http_api_request"],
            "logs": log_gb * (PRICES["log_ingested_gb"] + RETENTION_MONTHS[env] * PRICES["log_stored_gb_month"]),
            "traces": self.traces * XRAY_DEFAULT_SAMPLED * PRICES["xray_trace"],
        }
        return {name: value * scale for name, value in costs.items()}


def requests_for(lines: list[str], rng: random.Random, group: int) -> list[list[str]]:
    """The rows in requests of `group` lines, then RETRY_SHARE of the rows sent again as whole requests."""
    requests = [lines[i : i + group] for i in range(0, len(lines), group)]
    count = RETRY_SHARE * len(requests)
    if abs(count - round(count)) > 1e-9:
        raise ValueError(f"{RETRY_SHARE:.0%} of {len(requests)} requests is not a whole number of requests")
    retried = rng.sample(range(len(requests)), round(count))
    return requests + [requests[i] for i in retried]


def resent_share(requests: list[list[str]], rows: int) -> float:
    """The share of rows sent more than once (whole requests re-sent)."""
    return (sum(len(request) for request in requests) - rows) / rows


def seed_shape_definition(template: dict[str, Any]) -> str:
    """The seed's workflow: three Lambda tasks chained, each caught to its own flag step and a Fail."""
    states: dict[str, Any] = {}
    phases = [("Validation", VALIDATE_HANDLER), ("Transformation", TRANSFORM_HANDLER), ("Store", STORE_HANDLER)]
    flag_arn = function_arn(find_function(template, FLAG_HANDLER))
    for index, (phase, handler) in enumerate(phases):
        following = phases[index + 1][0] if index + 1 < len(phases) else "Stored"
        states[phase] = {
            "Type": "Task",
            "Resource": function_arn(find_function(template, handler)),
            "Next": following,
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": f"Flag{phase}"}],
        }
        states[f"Flag{phase}"] = {
            "Type": "Task",
            "Resource": flag_arn,
            "Parameters": {"phase": phase.lower(), "state.$": "$"},
            "Next": f"{phase}Failed",
        }
        states[f"{phase}Failed"] = {"Type": "Fail", "Error": f"{phase}Failed"}
    states["Stored"] = {"Type": "Succeed"}
    return json.dumps({"StartAt": "Validation", "States": states})


def measure(template: dict[str, Any], design: str, requests: list[list[str]], rows: int) -> Measured:
    with embedded_saga_cloud():
        world = TaxiWorld.create(template, workflow_type="EXPRESS" if design == "express" else None)
        machine_arn = world.state_machine_arn
        if design == "seed shape":
            machine_arn = world.stepfunctions.create_state_machine(
                name="SeedShape",
                definition=seed_shape_definition(template),
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/SeedShapeRole",
                type="STANDARD",
            )["stateMachineArn"]
        meter = CapacityMeter()
        meter.attach(world.dynamodb)
        with world.serving_api(), counting_function_logs() as (log_records, printed, cleared):
            for number, request in enumerate(requests):
                if design in ("seed shape", "per row"):
                    # A fresh id per request, as the seed's hash + time + PRNG gives.
                    rows_input = [{"StoreRequestId": f"seed-{number}-{i}", "tuple": line} for i, line in enumerate(request)]
                    execution_input = json.dumps({"rows": rows_input})
                    with world.routing():
                        world.stepfunctions.start_execution(stateMachineArn=machine_arn, name=f"seed-{number}", input=execution_input)
                elif len(request) == 1:
                    world.post("/trips", request[0])
                else:
                    world.post("/trips/batch", "\n".join(request))
        pages = world.stepfunctions.get_paginator("list_executions").paginate(stateMachineArn=machine_arn)
        executions = [execution for page in pages for execution in page["executions"]]
        histories = {
            execution["executionArn"]: [
                event
                for page in world.stepfunctions.get_paginator("get_execution_history").paginate(executionArn=execution["executionArn"])
                for event in page["events"]
            ]
            for execution in executions
        }
        invocations = len(world.invocations.calls) + len(requests)
        metric_bytes = len(printed.getvalue().encode()) + sum(cleared)
        return Measured(
            design=design,
            rows=rows,
            requests=len(requests),
            executions=len(executions),
            transitions=sum(state_transitions(history) for history in histories.values()),
            phase_invocations=len(world.invocations.calls),
            wru=meter.wru,
            rru=meter.rru,
            stored=len(world.final_items()),
            execution_log_bytes={
                env: sum(execution_log_bytes(history, arn, level=level, include_data=data) for arn, history in histories.items())
                for env, (level, data, _) in ENVIRONMENT_LOGGING.items()
            },
            function_log_bytes={
                env: log_records.at_or_above(function_level) + metric_bytes + invocations * PLATFORM_LOG_BYTES_PER_INVOCATION
                for env, (_, _, function_level) in ENVIRONMENT_LOGGING.items()
            },
            traces=len(requests),
            express=design == "express",
        )


def main(template: dict[str, Any], *, seed: int = 11) -> bool:
    lines = sample_lines()
    sets = {"single": lines[:SINGLE_ROWS], "batch": lines}
    distinct = {name: len({content_id(line) for line in rows}) for name, rows in sets.items()}
    rng = random.Random(seed)
    singles = requests_for(sets["single"], rng, 1)
    batches = requests_for(sets["batch"], rng, BATCH_LINES)
    runs = {
        "seed shape": ("seed's workflow: 3 chained tasks, 1 execution per request", singles),
        "per row": ("this state machine, 1 execution per request", singles),
        "single": ("this project, /trips (Standard, one row)", singles),
        "batch": (f"this project, /trips/batch ({BATCH_LINES} rows, Standard)", batches),
        "express": ("this project, /trips on EXPRESS", singles),
    }
    row_set = {design: "batch" if design == "batch" else "single" for design in runs}
    measured = {design: measure(template, design, requests, distinct[row_set[design]]) for design, (_, requests) in runs.items()}
    shares = {name: resent_share(requests, distinct[name]) for name, requests in (("single", singles), ("batch", batches))}
    print(
        f"\n== taxi saga: cost per million rows (real rows: {distinct['single']} one per request, {distinct['batch']} in batches; "
        f"re-sent by the client: {shares['single']:.1%} and {shares['batch']:.1%} of the rows) =="
    )
    baseline = sum(measured["seed shape"].cost_per_million_rows("prod").values())
    header = f"{'design':<58} {'trans/row':>9} {'λ inv/row':>9} {'WRU/row':>8} {'RRU/row':>8} {'stored':>7}"
    print(header + f" {'workflow':>9} {'lambda':>7} {'dynamodb':>8} {'api':>5} {'logs':>6} {'traces':>6} {'total $':>8} {'vs seed':>8}")
    for design, (label, _) in runs.items():
        m = measured[design]
        for env in ENVIRONMENT_LOGGING:
            costs = m.cost_per_million_rows(env)
            total = sum(costs.values())
            invocations = m.per_row(m.phase_invocations + m.requests)
            print(
                f"{label + f' [{env}]':<58} {m.per_row(m.transitions):>9.2f} {invocations:>9.3f} {m.per_row(m.wru):>8.2f} "
                f"{m.per_row(m.rru):>8.2f} {m.stored:>7} {costs['workflow']:>9.2f} {costs['lambda']:>7.2f} {costs['dynamodb']:>8.2f} "
                f"{costs['api']:>5.2f} {costs['logs']:>6.2f} {costs['traces']:>6.2f} {total:>8.2f} {total / baseline:>7.3f}x"
            )
    print("\nlog bytes per row (execution log at the env's level + the functions' records, metric and platform lines), traces per row:")
    for design, (label, _) in runs.items():
        m = measured[design]
        parts = ", ".join(
            f"{env}: {m.per_row(m.execution_log_bytes[env]):,.0f} + {m.per_row(m.function_log_bytes[env]):,.0f} B"
            for env in ENVIRONMENT_LOGGING
        )
        all_traced = m.per_row(m.traces) * PRICES["xray_trace"] * 1e6
        print(f"  {label:<58} {parts}; traces {m.per_row(m.traces):.3f} (${all_traced:.2f} per million rows if every one were recorded)")
    # The rows the data-dictionary rules accept, counted without the saga: each must be stored exactly once.
    accepted = {name: sum(1 for line in set(rows) if isinstance(validate_line(line), Accepted)) for name, rows in sets.items()}
    twice = measured["seed shape"].stored - accepted["single"]
    print(
        f"stored: {accepted['single']} of {distinct['single']} and {accepted['batch']} of {distinct['batch']} rows pass validation; "
        f"the seed's ids stored {twice} of them twice (on this state machine: {measured['per row'].stored - accepted['single']})"
    )
    ok = all(measured[design].stored == accepted[row_set[design]] for design in ("single", "batch", "express"))
    ok = ok and all(abs(share - RETRY_SHARE) < 1e-9 for share in shares.values())
    batch_ratio = sum(measured["batch"].cost_per_million_rows("prod").values()) / baseline
    verdict = "within" if batch_ratio <= 0.2 else "OUTSIDE"
    print(f"target: batch route <= 0.20x of the seed's workflow per million rows (prod) -> {batch_ratio:.3f}x, {verdict} target")
    print(f"prices: {PRICES_CHECKED}: {PRICES}")
    print(
        f"assumed: phase {PHASE_MS_PER_INVOCATION:.0f} ms + {PHASE_MS_PER_ROW:.0f} ms/row, API {API_MS_PER_REQUEST:.0f} ms, "
        f"{LAMBDA_GB * 1024:.0f} MB arm64; Express {EXPRESS_SECONDS_PER_EXECUTION} s at {EXPRESS_GB * 1024:.0f} MB; "
        f"{PLATFORM_LOG_BYTES_PER_INVOCATION} B of platform log lines per invocation; X-Ray records {XRAY_DEFAULT_SAMPLED:.0%} "
        f"of requests (default sampling); logs kept {RETENTION_MONTHS} months, stored uncompressed"
    )
    return ok and batch_ratio <= 0.2
