"""`make demo`, taxi saga section: the 2,000 real sample rows through the API handler and the
synthesized state machine on moto, with client retries, corrupted rows, crashes inside the
phases and one request whose store keeps failing; then the tables checked against the input.

The check is independent of the row logic: every accepted id must end either stored (reason 0
everywhere, its trips item equal to its raw line read with the standard library, times converted
with zoneinfo, and its charges summing to its total) or flagged in exactly the phase its
corruption targets. Every uncorrupted real row is a trip, so every one must be stored.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

from botocore.exceptions import ClientError

from devtools.aws.faults import SimulatedCrash
from devtools.demo_progress import Progress, progress
from devtools.taxi_rows import bad_at_transformation, bad_at_validation, sample_lines
from devtools.taxi_world import STORE_HANDLER, TRANSFORM_HANDLER, VALIDATE_HANDLER, TaxiWorld, embedded_saga_cloud, state_transitions
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.models import Phase

SINGLE_ROWS = 300  # the first rows go one per request; the rest in batches
BATCH_LINES = 100
CORRUPT_AT_VALIDATION = 15
CORRUPT_AT_TRANSFORMATION = 10
REFUSED = 5  # 5-column lines: refused by the API, never started
CLIENT_RETRIES = 60  # single requests sent again
CRASHES = {VALIDATE_HANDLER: 7, TRANSFORM_HANDLER: 11, STORE_HANDLER: 13}  # crash the n-th invocation of each
NEW_YORK = ZoneInfo("America/New_York")


@dataclass
class Sent:
    expected: dict[str, str] = field(default_factory=dict)  # id -> what should happen: stored / validation / transformation / store
    lines: dict[str, str] = field(default_factory=dict)  # id -> raw line
    requests: Counter[str] = field(default_factory=Counter)


def run_taxi_demo(template: dict[str, Any], *, seed: int) -> int:
    # The report is read from the tables; the functions' EMF lines (one per request) would bury it.
    with embedded_saga_cloud() as waits, mock.patch.dict(os.environ, {"POWERTOOLS_METRICS_DISABLED": "true"}):
        world = TaxiWorld.create(template)
        world.retry_waits = waits
        with world.serving_api():
            lines = sample_lines()
            batches = -(-(len(lines) - 1 - SINGLE_ROWS) // BATCH_LINES)
            with progress("taxi saga: requests", SINGLE_ROWS + CLIENT_RETRIES + 1 + batches + REFUSED, "requests") as requests:
                sent, crashes = push(world, random.Random(seed), lines, requests)
            return report(world, sent, crashes)


def push(world: TaxiWorld, rng: random.Random, lines: list[str], requests: Progress) -> tuple[Sent, int]:
    positions = rng.sample(range(len(lines)), CORRUPT_AT_VALIDATION + CORRUPT_AT_TRANSFORMATION)
    fates = dict.fromkeys(range(len(lines)), "stored")
    for index in positions[:CORRUPT_AT_VALIDATION]:
        lines[index], fates[index] = bad_at_validation(lines[index]), "validation"
    for index in positions[CORRUPT_AT_VALIDATION:]:
        lines[index], fates[index] = bad_at_transformation(lines[index]), "transformation"
    sent = Sent()
    crashed: list[str] = []

    def crash_some(handler: str, attempt: int) -> None:
        if CRASHES.get(handler) == attempt:
            crashed.append(handler)
            raise SimulatedCrash(f"{handler} died on invocation {attempt}")

    world.invocations.before = crash_some

    def accepted(body: dict[str, Any], batch: list[int]) -> None:
        for store_request_id, index in zip(
            body.get("StoreRequestIds") or [body[taxi_etl_contract.KEY_STORE_REQUEST_ID]], batch, strict=True
        ):
            sent.lines[store_request_id] = lines[index]
            sent.expected.setdefault(store_request_id, fates[index])

    singles = list(range(SINGLE_ROWS))
    for index in singles + rng.sample(singles, CLIENT_RETRIES):
        status, body = world.post(taxi_etl_contract.ROUTE_TRIP, lines[index])
        sent.requests[f"single {status}"] += 1
        requests.update()
        accepted(body, [index])
    # One more single request whose store keeps failing (the trips table throttles it past every retry).
    doomed = len(lines) - 1
    status, body = post_with_failing_store(world, lines[doomed])
    sent.requests[f"single {status}"] += 1
    requests.update()
    accepted(body, [doomed])
    sent.expected[body[taxi_etl_contract.KEY_STORE_REQUEST_ID]] = "store"
    for start in range(SINGLE_ROWS, len(lines) - 1, BATCH_LINES):
        batch = list(range(start, min(start + BATCH_LINES, len(lines) - 1)))
        status, body = world.post(taxi_etl_contract.ROUTE_TRIP_BATCH, "\n".join(lines[index] for index in batch))
        sent.requests[f"batch {status}"] += 1
        requests.update()
        accepted(body, batch)
    for _ in range(REFUSED):
        status, _ = world.post(taxi_etl_contract.ROUTE_TRIP, ",".join(lines[rng.randrange(len(lines))].split(",")[:5]))
        sent.requests[f"refused {status}"] += 1
        requests.update()
    return sent, len(crashed)


def post_with_failing_store(world: TaxiWorld, line: str) -> tuple[int, dict[str, Any]]:
    trips_table = world.environment(STORE_HANDLER)[taxi_etl_contract.ENV_FINAL_TABLE]

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == trips_table:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "demo"}}, "PutItem")

    world.dynamodb.meta.events.register("before-parameter-build.dynamodb.PutItem", throttle)
    try:
        return world.post(taxi_etl_contract.ROUTE_TRIP, line)
    finally:
        world.dynamodb.meta.events.unregister("before-parameter-build.dynamodb.PutItem", throttle)


def report(world: TaxiWorld, sent: Sent, crashes: int) -> int:
    final = world.final_items()
    status = world.status_rows()
    executions = world.executions()
    transitions = sum(state_transitions(world.history(execution["name"])) for execution in executions)
    problems: list[str] = []
    outcomes: dict[str, str] = {}
    flagged_reasons: dict[str, Counter[str]] = {phase.value: Counter() for phase in Phase}
    for store_request_id in sent.expected:
        reasons = {phase: int(rows[store_request_id]["StatusReason"]) for phase, rows in status.items() if store_request_id in rows}
        flagged = {phase for phase, reason in reasons.items() if reason}
        if store_request_id in final:
            outcomes[store_request_id] = "stored"
            if flagged:
                problems.append(f"{store_request_id} is stored but flagged in {sorted(flagged)}")
            problems += [
                f"{store_request_id}: {problem}" for problem in item_problems(final[store_request_id], sent.lines[store_request_id])
            ]
        elif flagged:
            phase = max(flagged, key=list(Phase).index)  # the phase that failed is the last one flagged
            outcomes[store_request_id] = phase.value
            flagged_reasons[phase.value][str(status[phase][store_request_id]["StatusDetail"])] += 1
            if {int(reasons[table]) for table in phase.touched} != {int(phase.reason)}:
                problems.append(f"{store_request_id}: reason {phase.reason} not in every table of {phase.value}")
        else:
            problems.append(f"{store_request_id} is neither stored nor flagged (lost)")
    # What GET /trips/{id} answers must be what the tables say, for every id.
    answered: Counter[str] = Counter()
    for store_request_id, outcome in outcomes.items():
        code, answer = world.get_row(store_request_id)
        said = answer.get("state") if answer.get("state") != "flagged" else answer.get("phase")
        answered[str(said)] += 1
        if code != 200 or said != outcome:
            problems.append(f"GET /trips/{store_request_id} answered {code} {said}, the tables say {outcome}")
    mismatched = [store_request_id for store_request_id, expected in sent.expected.items() if outcomes.get(store_request_id) != expected]
    if mismatched:
        problems.append(f"{len(mismatched)} rows ended otherwise than their input says, e.g. {mismatched[:3]}")
    findings = Counter(finding for item in final.values() for finding in item.get("findings", []))
    if set(final) - set(sent.expected):
        problems.append("the trips table holds rows nobody sent")
    rows = len(sent.expected)
    print("\n== taxi ETL saga (real 2019-10 sample rows; API handler + synthesized state machine on moto) ==")
    print(f"  requests          {sum(sent.requests.values()):>6}  {dict(sorted(sent.requests.items()))}")
    print(f"  distinct rows     {rows:>6}  (client retries were answered as duplicates)")
    print(f"  executions        {len(executions):>6}  (one per distinct request; {transitions} state transitions)")
    print(f"  crashes           {crashes:>6}  inside phases, each retried by the workflow")
    print(f"  stored            {len(final):>6}  (with findings: {dict(sorted(findings.items()))})")
    for phase in Phase:
        details = flagged_reasons[phase.value]
        label = f"flagged {phase.value}"
        print(f"  {label:<24}{sum(details.values()):>2}  (reason {int(phase.reason)}: {dict(details.most_common())})")
    read_back = dict(sorted(answered.items()))
    print(f"  read back         {sum(answered.values()):>6}  (GET /trips/{{id}} of every id, as the tables say: {read_back})")
    for problem in problems[:10]:
        print(f"  !! {problem}")
    print("MISMATCH" if problems else "OK")
    return 1 if problems else 0


def item_problems(item: dict[str, Any], line: str) -> list[str]:
    """The stored item against its raw line, read without the project's row logic."""
    columns = line.split(",")
    problems = []
    for column, name in ((1, "pickup_at"), (2, "dropoff_at")):
        local = datetime.fromisoformat(columns[column]).replace(tzinfo=NEW_YORK)
        if item[name] != local.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%SZ"):
            problems.append(f"{name} {item[name]} is not {columns[column]} New York time in UTC")
    for column, name in ((10, "fare_amount"), (13, "tip_amount"), (16, "total_amount")):
        if Decimal(columns[column]) != item[name]:
            problems.append(f"{name} {item[name]} != {columns[column]}")
    if (int(columns[7]), int(columns[8])) != (item["pu_location_id"], item["do_location_id"]):
        problems.append("locations differ")
    if sum(item["charges"].values()) != Decimal(columns[16]):
        problems.append(f"charges sum to {sum(item['charges'].values())}, not the total {columns[16]}")
    return problems
