"""`make bench`, taxi saga section: what a million rows cost, from per-row counts measured on moto.

The same 1,000 real rows (tests/data/taxi), with 5 % of the requests re-sent by the client, go
through the synthesized state machine four ways:
  seed     one Standard execution per request; every retry is a new execution (the seed's ids
           are hash + time + PRNG), so a retried row is processed, and stored, again
  single   this project's /trips: one Standard execution per distinct row; a retry starts nothing
  batch    this project's /trips/batch: 100 rows per Standard execution
  express  /trips on an EXPRESS state machine (billed per request and duration, not per transition)
Measured per row: state transitions (from each execution's history, retries included), Lambda
invocations (phases, flag steps, and the API function per request) and DynamoDB request units
(devtools.capacity). Lambda and Express durations are not measurable on moto; the assumed ones
are printed with the prices. This prints figures; it is not a pass/fail test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from devtools.capacity import CapacityMeter
from devtools.taxi_rows import sample_lines
from devtools.taxi_world import TaxiWorld, embedded_saga_cloud, state_transitions
from runtime.taxi_etl.requests import content_id
from runtime.taxi_etl.trips import Accepted, validate_line

ROWS = 1000
RETRY_SHARE = 0.05
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
}
# Assumed, not measured (moto's timings say nothing about Lambda's).
PHASE_MS_PER_INVOCATION = 40.0
PHASE_MS_PER_ROW = 4.0  # one or two conditional writes per row
API_MS_PER_REQUEST = 30.0
LAMBDA_GB = 0.25  # 256 MB, the config's phase and API memory
EXPRESS_SECONDS_PER_EXECUTION = 0.5
EXPRESS_GB = 0.0625  # 64 MB, the smallest step


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
    express: bool = False

    def per_row(self, value: float) -> float:
        return value / self.rows

    def cost_per_million_rows(self) -> dict[str, float]:
        scale = 1e6 / self.rows
        lambda_seconds = (self.phase_invocations * PHASE_MS_PER_INVOCATION + self.stored * 3 * PHASE_MS_PER_ROW) / 1000
        lambda_seconds += self.requests * API_MS_PER_REQUEST / 1000
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
        }
        return {name: value * scale for name, value in costs.items()}


def requests_for(lines: list[str], rng: random.Random, group: int) -> list[list[str]]:
    """The rows in requests of `group` lines, with RETRY_SHARE of the requests sent again."""
    requests = [lines[i : i + group] for i in range(0, len(lines), group)]
    retried = rng.sample(range(len(requests)), max(1, round(RETRY_SHARE * len(requests))))
    return requests + [requests[i] for i in retried]


def measure(template: dict[str, Any], design: str, requests: list[list[str]], rows: int) -> Measured:
    with embedded_saga_cloud():
        world = TaxiWorld.create(template, workflow_type="EXPRESS" if design == "express" else None)
        meter = CapacityMeter()
        meter.attach(world.dynamodb)
        with world.serving_api():
            for number, request in enumerate(requests):
                if design == "seed":
                    # A fresh id per request, as the seed's hash + time + PRNG gives.
                    world.start(
                        f"seed-{number}", [{"StoreRequestId": f"seed-{number}-{i}", "tuple": line} for i, line in enumerate(request)]
                    )
                elif len(request) == 1:
                    world.post("/trips", request[0])
                else:
                    world.post("/trips/batch", "\n".join(request))
        executions = world.executions()
        transitions = sum(state_transitions(world.history(execution["name"])) for execution in executions)
        return Measured(
            design=design,
            rows=rows,
            requests=len(requests),
            executions=len(executions),
            transitions=transitions,
            phase_invocations=len(world.invocations.calls),
            wru=meter.wru,
            rru=meter.rru,
            stored=len(world.final_items()),
            express=design == "express",
        )


def main(template: dict[str, Any], *, seed: int = 11) -> bool:
    lines = sample_lines()[:ROWS]
    distinct = len({content_id(line) for line in lines})
    rng = random.Random(seed)
    singles = requests_for(lines, rng, 1)
    batches = requests_for(lines, rng, BATCH_LINES)
    runs = {
        "seed": ("seed's design: one Standard execution per request", singles),
        "single": ("this project, /trips (Standard, one row)", singles),
        "batch": (f"this project, /trips/batch ({BATCH_LINES} rows, Standard)", batches),
        "express": ("this project, /trips on EXPRESS", singles),
    }
    measured = {design: measure(template, design, requests, distinct) for design, (_, requests) in runs.items()}
    print(f"\n== taxi saga: cost per million rows ({ROWS} real rows, {RETRY_SHARE:.0%} of requests re-sent) ==")
    header = f"{'design':<52} {'trans/row':>9} {'λ inv/row':>9} {'WRU/row':>8} {'RRU/row':>8} {'stored':>7}"
    print(header + f" {'workflow':>9} {'lambda':>8} {'dynamodb':>9} {'api':>6} {'total $':>9} {'vs seed':>8}")
    seed_total = sum(measured["seed"].cost_per_million_rows().values())
    for design, (label, _) in runs.items():
        m = measured[design]
        costs = m.cost_per_million_rows()
        total = sum(costs.values())
        invocations = m.per_row(m.phase_invocations + m.requests)
        print(
            f"{label:<52} {m.per_row(m.transitions):>9.2f} {invocations:>9.3f} {m.per_row(m.wru):>8.2f} {m.per_row(m.rru):>8.2f} "
            f"{m.stored:>7} {costs['workflow']:>9.2f} {costs['lambda']:>8.2f} {costs['dynamodb']:>9.2f} {costs['api']:>6.2f} "
            f"{total:>9.2f} {total / seed_total:>7.3f}x"
        )
    # The rows the data-dictionary rules accept, counted without the saga: each must be stored exactly once.
    accepted = sum(1 for line in set(lines) if isinstance(validate_line(line), Accepted))
    print(f"stored: {accepted} rows pass validation; the seed's design stored {measured['seed'].stored - accepted} of them twice")
    ok = all(measured[design].stored == accepted for design in ("single", "batch", "express"))
    batch_ratio = sum(measured["batch"].cost_per_million_rows().values()) / seed_total
    verdict = "within" if batch_ratio <= 0.2 else "OUTSIDE"
    print(f"target: batch route <= 0.20x of the seed's design per million rows -> {batch_ratio:.3f}x, {verdict} target")
    print(f"prices: {PRICES_CHECKED}: {PRICES}")
    print(
        f"assumed durations: phase {PHASE_MS_PER_INVOCATION:.0f} ms + {PHASE_MS_PER_ROW:.0f} ms/row, API {API_MS_PER_REQUEST:.0f} ms, "
        f"{LAMBDA_GB * 1024:.0f} MB arm64; Express {EXPRESS_SECONDS_PER_EXECUTION} s at {EXPRESS_GB * 1024:.0f} MB"
    )
    return ok and batch_ratio <= 0.2
