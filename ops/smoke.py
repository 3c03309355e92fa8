"""Smoke test of a deployed environment: one round trip through each pipeline, each timed.

  runner stats  a device message (fresh user and run ids) into the Kinesis stream, then its run item in
                the run-stats table
  event log     an append to a fresh log (SigV4-signed for execute-api with the session's credentials),
                then the log read back with GET /logs/{logId}/snapshot
  taxi saga     one real trip line posted with the API key (read from the secret the stack names) and
                a fresh Idempotency-Key, then GET /trips/{StoreRequestId} until it reports it stored,
                and its item in the trips table

Each step prints PASS or FAIL with the seconds it took; a step gives up after --timeout seconds. The
exit status is 0 when every step passed, 1 otherwise, 2 for a usage error (no credentials or region,
an outputs file without the stacks). What it writes stays: one run item (user id 9xxxxxxxxxxx), one
log (smoke-...) and one trip (k-smoke-...) per run, easy to find and harmless to keep.

    python -m ops.smoke --env dev             # the stacks of cdk-outputs-dev.json (make deploy ENV=dev)
    python -m ops.smoke --env local           # against `make serve`: its outputs name the local endpoint
    python -m ops.smoke --event-log-stack Onceflow-dev-EventLog --taxi-etl-stack Onceflow-dev-TaxiEtl

With --env local (the outputs file `make serve` writes), the file's embedded cloud becomes the
endpoint of every AWS client, and its region and dummy key pair are used where --region, --profile
and the AWS_* variables name none: the same checks run against the embedded cloud, nothing exported.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

from botocore.exceptions import BotoCoreError, ClientError

from ops.cli import (
    AwsSession,
    StackKind,
    UsageError,
    add_aws_options,
    local_cloud_of,
    outputs_file,
    resources_from_outputs_file,
    resources_from_stack,
    usage_errors,
)
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract
from runtime.taxi_etl.row_state import State

DEFAULT_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.5
HTTP_TIMEOUT_SECONDS = 30.0
# A real trip: the first data line of tests/data/taxi_etl/yellow_2019-10_sample.csv (2019-2021 layout).
SAMPLE_TRIP = "2,2019-10-23T16:39:42.000,2019-10-23T17:14:10.000,1,7.93,1,N,138,170,1,29.5,1,0.5,7.98,6.12,0.3,47.9,2.5"
# Smoke runs use user ids from here up (12 digits starting with 9), far from real devices' ids.
SMOKE_USER_BASE = 900_000_000_000

RUNNER_STATS = StackKind(
    "RunnerStats",
    {runner_stats_contract.OUTPUT_STREAM_NAME: "stream_name", runner_stats_contract.OUTPUT_RUN_STATS_TABLE: "run_stats_table"},
)
EVENT_LOG = StackKind("EventLog", {event_log_contract.OUTPUT_API_URL: "api_url"})
TAXI_ETL = StackKind(
    "TaxiEtl",
    {
        taxi_etl_contract.OUTPUT_API_URL: "api_url",
        taxi_etl_contract.OUTPUT_API_KEY_SECRET_ARN: "api_key_secret_arn",
        taxi_etl_contract.OUTPUT_TRIPS_TABLE: "trips_table",
    },
)
KINDS = (RUNNER_STATS, EVENT_LOG, TAXI_ETL)
STEP_NAMES = {RUNNER_STATS.name: "runner stats", EVENT_LOG.name: "event log", TAXI_ETL.name: "taxi saga"}
STACK_OPTIONS = {RUNNER_STATS.name: "--runner-stats-stack", EVENT_LOG.name: "--event-log-stack", TAXI_ETL.name: "--taxi-etl-stack"}


class StepFailed(Exception):
    """A step's check did not hold; the message says what was seen."""


class SmokeSession(AwsSession):
    """The tools' session, which also signs the event-log API's requests."""

    def signer(self, service: str) -> Callable[[str, str, bytes, dict[str, str]], dict[str, str]]:
        """Headers that sign a request with SigV4 for `service`, with this session's credentials and region."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        self.client("sts")  # the checks of a region and credentials
        credentials = self._session.get_credentials()
        region = str(self._session.region_name)

        def sign(method: str, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
            request = AWSRequest(method=method, url=url, data=body, headers=headers)
            SigV4Auth(credentials, service, region).add_auth(request)
            return {name: str(value) for name, value in request.headers.items()}

        return sign


# --- HTTP ------------------------------------------------------------------------------------------------


def http_call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Status and body (JSON when it parses, else text) of one request; an HTTP error status is an answer too."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # the stack's own URL
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        status, raw = int(error.code), error.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def poll_until(deadline: float, check: Callable[[], str | None], waiting_for: str, clock: Callable[[], float]) -> str:
    """Call `check` until it returns a detail, or fail at the deadline saying what it waited for."""
    while True:
        found = check()
        if found is not None:
            return found
        if clock() >= deadline:
            raise StepFailed(f"timed out waiting for {waiting_for}")
        time.sleep(POLL_SECONDS)


# --- the steps ------------------------------------------------------------------------------------------


def unique_suffix() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def runner_stats_step(kinesis: Any, dynamodb: Any, resources: dict[str, str], deadline: float, clock: Callable[[], float]) -> str:
    user_id = SMOKE_USER_BASE + secrets.randbelow(10**11)
    run_id = int(time.time())
    message = {
        runner_stats_contract.KEY_USER_ID: user_id,
        runner_stats_contract.KEY_RUN_ID: run_id,
        "sequence_id": 1,
        "timestamp_utc": int(time.time() * 1000),
        "distance_meters": 12.5,
    }
    kinesis.put_record(StreamName=resources["stream_name"], Data=json.dumps(message).encode(), PartitionKey=str(user_id))
    key = {runner_stats_contract.KEY_USER_ID: {"N": str(user_id)}, runner_stats_contract.KEY_RUN_ID: {"N": str(run_id)}}
    table = resources["run_stats_table"]

    def stored() -> str | None:
        item = dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        if item is None:
            return None
        meters = item.get("total_meters", {}).get("N")
        if meters is None or Decimal(meters) != Decimal("12.5"):
            raise StepFailed(f"run item {user_id}/{run_id} holds total_meters {meters}, expected 12.5")
        return f"run {user_id}/{run_id} stored in {table} (12.5 m)"

    return poll_until(deadline, stored, f"run {user_id}/{run_id} in {table} (is the stream's event source mapping enabled?)", clock)


def event_log_step(
    sign: Callable[[str, str, bytes, dict[str, str]], dict[str, str]],
    resources: dict[str, str],
    deadline: float,
    clock: Callable[[], float],
) -> str:
    api = resources["api_url"].rstrip("/")
    suffix = unique_suffix()
    log_id = f"smoke-{suffix}"
    request_id = f"smoke-{suffix}"
    append = {"request_id": request_id, "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "smoke"}}
    body = json.dumps(append).encode()
    url = f"{api}/logs/{log_id}/entries"
    appended, answer = http_call("POST", url, body, sign("POST", url, body, {"content-type": "application/json"}))
    if appended not in (200, 201):
        raise StepFailed(f"POST /logs/{log_id}/entries answered {appended}: {short(answer)}")
    read_url = f"{api}/logs/{log_id}/snapshot"

    def read_back() -> str | None:
        status, page = http_call("GET", read_url, None, sign("GET", read_url, b"", {}))
        if status == 404:
            return None
        if status != 200 or not isinstance(page, dict):
            raise StepFailed(f"GET /logs/{log_id}/snapshot answered {status}: {short(page)}")
        entries = [entry for entry in page.get("entries", []) if entry.get("request_id") == request_id]
        if not entries:
            return None
        return f"appended to {log_id} (HTTP {appended}), read back at position {entries[0].get('position')}"

    return poll_until(deadline, read_back, f"the entry in GET /logs/{log_id}/snapshot", clock)


def taxi_step(secretsmanager: Any, dynamodb: Any, resources: dict[str, str], deadline: float, clock: Callable[[], float]) -> str:
    api = resources["api_url"].rstrip("/")
    key = str(secretsmanager.get_secret_value(SecretId=resources["api_key_secret_arn"])["SecretString"])
    idempotency_key = f"smoke-{unique_suffix()}"
    headers = {"Authorization": key, "content-type": "text/csv", "Idempotency-Key": idempotency_key}
    posted, answer = http_call("POST", f"{api}{taxi_etl_contract.ROUTE_TRIP}", SAMPLE_TRIP.encode(), headers)
    if posted not in (200, 202) or not isinstance(answer, dict):
        raise StepFailed(f"POST {taxi_etl_contract.ROUTE_TRIP} answered {posted}: {short(answer)}")
    row_id = str(answer.get(taxi_etl_contract.KEY_STORE_REQUEST_ID))
    row_path = taxi_etl_contract.ROUTE_ROW_STATE.replace(f"{{{taxi_etl_contract.KEY_STORE_REQUEST_ID}}}", quote(row_id, safe=""))

    def reported_stored() -> str | None:
        status, state = http_call("GET", f"{api}{row_path}", None, {"Authorization": key})
        if status == 404:
            return None  # accepted moments ago: its execution has not started yet
        if status != 200 or not isinstance(state, dict):
            raise StepFailed(f"GET {row_path} answered {status}: {short(state)}")
        if state.get("state") == State.FLAGGED.value:
            raise StepFailed(f"row {row_id} was flagged: {short(state)}")
        if state.get("state") != State.STORED.value:
            return None
        item = dynamodb.get_item(
            TableName=resources["trips_table"], Key={taxi_etl_contract.KEY_STORE_REQUEST_ID: {"S": row_id}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            raise StepFailed(f"row {row_id} is reported stored but {resources['trips_table']} has no item for it")
        return f"trip {row_id} posted (HTTP {posted}), reported stored, item in {resources['trips_table']}"

    return poll_until(deadline, reported_stored, f"GET {row_path} to report the row stored", clock)


# --- the command ------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    name: str
    passed: bool
    seconds: float
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name:<12} {self.seconds:6.1f} s  {self.detail}"


def run_step(name: str, step: Callable[[float], str], timeout: float, clock: Callable[[], float]) -> StepResult:
    started = clock()
    try:
        detail = step(started + timeout)
        passed = True
    except StepFailed as failure:
        detail, passed = str(failure), False
    except ClientError as error:
        detail, passed = f"AWS refused a call: {error}", False
    except (BotoCoreError, OSError) as error:
        detail, passed = f"{type(error).__name__}: {error}", False
    return StepResult(name, passed, clock() - started, detail)


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m ops.smoke",
        description="One round trip through each pipeline of a deployed environment: PASS or FAIL per step, exit 0 when all pass.",
    )
    parser.add_argument(
        "--env",
        metavar="NAME",
        help="an environment (dev, prod, or local for `make serve`): the stacks of cdk-outputs-NAME.json, which `make deploy` writes",
    )
    parser.add_argument("--outputs-file", metavar="PATH", type=Path, help="with --env: read this CDK outputs file instead")
    for kind in KINDS:
        parser.add_argument(
            STACK_OPTIONS[kind.name],
            dest=f"stack_{kind.name}",
            metavar="STACK",
            help=f"instead of --env: the {kind.name} stack (its outputs are read from CloudFormation)",
        )
    parser.add_argument("--endpoint-url", help="every AWS client's endpoint (default: the outputs file's local endpoint, if any)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS", help="the longest one step may take")
    add_aws_options(parser)
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be more than 0 seconds")
    return parser, args


def resolve(args: argparse.Namespace, session: AwsSession) -> dict[str, dict[str, str]]:
    """The resources of each stack to check (by kind name); an outputs file of `make serve` also points
    `session` at its embedded cloud."""
    stacks = {kind.name: getattr(args, f"stack_{kind.name}") for kind in KINDS}
    if args.env and any(stacks.values()):
        raise UsageError("give --env or the stack options, not both")
    if args.outputs_file is not None and not args.env:
        raise UsageError("--outputs-file goes with --env")
    if args.env:
        path = outputs_file(args.env, args.outputs_file)
        local = local_cloud_of(path, args.env)
        if local is not None:
            session.use_local(local)
        return {kind.name: resources_from_outputs_file(path, args.env, kind) for kind in KINDS}
    if not any(stacks.values()):
        raise UsageError(f"give --env NAME (cdk-outputs-NAME.json), or one or more of {', '.join(STACK_OPTIONS.values())}")
    cloudformation = session.client("cloudformation")
    return {kind.name: resources_from_stack(cloudformation, str(stacks[kind.name]), kind) for kind in KINDS if stacks[kind.name]}


def main(argv: list[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> int:
    parser, args = parse_args(argv)
    with usage_errors(parser):
        session = SmokeSession(region=args.region, profile=args.profile, endpoint_url=args.endpoint_url)
        resources = resolve(args, session)
        steps: dict[str, Callable[[float], str]] = {}
        if RUNNER_STATS.name in resources:
            kinesis, dynamodb = session.client("kinesis"), session.client("dynamodb")
            found = resources[RUNNER_STATS.name]
            steps[RUNNER_STATS.name] = lambda deadline: runner_stats_step(kinesis, dynamodb, found, deadline, clock)
        if EVENT_LOG.name in resources:
            sign = session.signer("execute-api")
            log = resources[EVENT_LOG.name]
            steps[EVENT_LOG.name] = lambda deadline: event_log_step(sign, log, deadline, clock)
        if TAXI_ETL.name in resources:
            secretsmanager, trips = session.client("secretsmanager"), session.client("dynamodb")
            saga = resources[TAXI_ETL.name]
            steps[TAXI_ETL.name] = lambda deadline: taxi_step(secretsmanager, trips, saga, deadline, clock)
    where = f" at {session.endpoint_url}" if session.endpoint_url else ""
    print(f"smoke test of {args.env or 'the given stacks'}{where}: {len(steps)} steps, at most {args.timeout:.0f} s each", flush=True)
    results: list[StepResult] = []
    for kind in KINDS:
        if kind.name in steps:
            result = run_step(STEP_NAMES[kind.name], steps[kind.name], args.timeout, clock)
            print(result.line(), flush=True)
            results.append(result)
    passed = sum(result.passed for result in results)
    print(f"{passed} of {len(results)} passed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
