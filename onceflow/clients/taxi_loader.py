"""Load a file of NYC yellow-taxi trips, of any size, into the taxi ETL saga (Pipeline 3) through its bulk route:
upload it to the stack's ingest bucket, start (or join) its load with `POST /loads`, show the load's progress from
`GET /loads/{LoadId}`, and print its report. A library and a CLI (the console script `onceflow-taxi-load` of the
`clients` extra, or `python -m onceflow.clients.taxi_loader`)::

    onceflow-taxi-load month.parquet --env dev
    onceflow-taxi-load month.csv.gz --env local
    onceflow-taxi-load month.csv --url "$API_URL" --bucket "$INGEST_BUCKET"    # the key from ONCEFLOW_API_KEY

    from onceflow.clients.taxi_loader import HttpLoadsApi, LoadOptions, load_file
    outcome = load_file(Path("month.csv"), HttpLoadsApi(api_url, api_key), s3, bucket, LoadOptions(wait_seconds=600))
    outcome.exit_status, outcome.report["stored"], outcome.report["flagged"]   # flagged: {reason: rows}

A `.csv`, `.csv.gz` or `.parquet` file goes up as CSV lines (onceflow/clients/trip_files.py: Parquet cells in the
trip's canonical spelling), streamed through boto3's managed transfer (one PUT, or a multipart upload of
PART_BYTES parts), to `incoming/<sha256 of the file's bytes>/<file stem>.csv`. The key names the file's content,
so the same file loaded again, or by another loader, is the same object: a HEAD finds it and nothing is uploaded
again, and `POST /loads` names the same object version, which is one load (the API joins it). (Two loaders that
both start before either has uploaded put two versions, two loads; the second finds every row stored.) A run
killed at any point is run again: an upload cut short left no object (it starts over), a load under way is
joined, and a finished one answers with its report. Every row is stored once in any case: a row's id is its
content's (`c-<hash>`, the id `/trips` and `/trips/batch` give it), so the same trip in another file, the same
month as Parquet and as CSV, or over HTTP, is one trip.

The API key comes from --api-key, else ONCEFLOW_API_KEY, else (with --env) the secret named by the taxi stack's
`ApiKeySecretArn` output. The URL and the bucket are --url and --bucket, or the stack's `ApiUrl` and
`IngestBucketName` outputs in cdk-outputs-NAME.json (--env NAME; --outputs-file PATH for another file). S3 is
reached with boto3's default credentials (--profile), in the secret's region; with `--env local`, `make serve`'s
embedded cloud with its endpoint and key pair (onceflow/clients/local.py).

Exit status, from the load's report: 0 when every data line was stored (now or by an earlier load: `stored` and
`alreadyStored`); 1 when every line's fate is known but some were flagged by a phase or refused (by their line
numbers), or the whole file was refused (not a trip file: loading it again changes nothing); 3 when the load is
incomplete: the API did not answer or refused the key, the load failed, or it was still running after --wait (run
it again: it joins the load, or starts a new run of it that skips the chunks already done; nothing is stored
twice). 2: a usage error; 130: interrupted (Ctrl-C; run it again).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from onceflow.clients import extra
from onceflow.clients.local import LOCAL_ENV, LocalCloud, LocalCloudError, missing_file, running_local_cloud
from onceflow.clients.trip_files import SUFFIXES, TripFileError, upload_trip_file
from onceflow.runtime.taxi_etl import contract

PROG = "onceflow-taxi-load"  # the console script; also `python -m onceflow.clients.taxi_loader`
ALL_STORED_EXIT_STATUS = 0  # every data line stored (now or before)
NOT_STORED_EXIT_STATUS = 1  # every line's fate known: some flagged or refused, or the file refused
USAGE_EXIT_STATUS = 2
INCOMPLETE_EXIT_STATUS = 3  # the load did not finish: run it again
INTERRUPTED_EXIT_STATUS = 130  # Ctrl-C, as a shell reports it
# boto3's managed transfer: one PUT up to this size, parts of this size above it (S3 takes parts of 5 MiB or more;
# 8 MiB is boto3's own default). A 3-million-row month is about 300 MiB of CSV: about 40 parts.
PART_BYTES = 8 * 1024 * 1024
HASH_READ_BYTES = 1 << 20
DEFAULT_WAIT_SECONDS = 3600.0  # a month's load takes minutes on AWS; a run that stops waiting is simply run again
POLL_SECONDS = 2.0  # between two GET /loads/{LoadId}: a load is minutes of chunks, each seconds long
REQUEST_TIMEOUT_SECONDS = 35.0  # API Gateway answers 503 at 30 s: wait for that answer rather than time out first
REQUEST_ATTEMPTS = 6  # per request, with full-jitter backoff; POST /loads joins, so sending it again is safe
SHOWN_REFUSED = 50  # refused lines printed one by one; the report in S3 lists the first 1,000
STACK_SUFFIX = "-TaxiEtl"  # the taxi stack in a CDK outputs file (Onceflow-<env>-TaxiEtl)
OUTPUTS_FILE = "cdk-outputs-{env}.json"  # what `make deploy ENV=<env>` writes
API_KEY_VARIABLE = "ONCEFLOW_API_KEY"
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# The execution statuses after which a load without a report will not go on by itself (a run again starts the next).
ENDED_WITHOUT_REPORT = frozenset({"FAILED", "ABORTED", "TIMED_OUT"})
REPORT_SUCCEEDED = "SUCCEEDED"
_UNSAFE_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
EXIT_STATUSES = (
    "exit status: 0 every data line was stored (now or by an earlier load); 1 every line's fate is known, but some "
    "were flagged by a phase or refused, or the file was refused (fix them, load them from a new file); 3 incomplete: "
    "the API did not answer, the load failed, or it was still running after --wait (run it again: it joins the load "
    "or resumes it; nothing is stored twice); 2 usage; 130 interrupted"
)


class UsageError(Exception):
    """The command line, the file, the outputs file, the credentials or the key cannot be used (exit status 2)."""


class ApiUnavailable(Exception):
    """The API gave no usable answer after every retry (no connection, timeouts, 429 or 5xx)."""


# --- the file and its key -----------------------------------------------------------------------


def file_digest(path: Path) -> str:
    """The sha256 of the file's bytes as they are on disk (of the .csv.gz or .parquet file, not of its CSV lines)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(HASH_READ_BYTES):
            digest.update(block)
    return digest.hexdigest()


def ingest_key(path: Path, digest: str) -> str:
    """`incoming/<digest>/<stem>.csv`: the file's content names the object, its name (without the .csv, .csv.gz or
    .parquet suffix; characters other than letters, digits, `.`, `_` and `-` as `_`) only tells a reader which file
    it was. UsageError for another suffix."""
    name = path.name
    suffix = next((suffix for suffix in SUFFIXES if name.lower().endswith(suffix)), None)
    if suffix is None:
        raise UsageError(f"{path}: a trip file is one of {', '.join(SUFFIXES)}")
    stem = _UNSAFE_KEY_CHARACTERS.sub("_", name[: -len(suffix)]) or "trips"
    return f"{contract.INGEST_PREFIX}{digest}/{stem}.csv"


# --- the API ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    document: dict[str, Any]

    @property
    def error(self) -> str:
        return str(self.document.get("error") or self.document.get("message") or self.document)


class LoadsApi(Protocol):
    """What the loader needs of the taxi API; `HttpLoadsApi` is the real one, tests inject others."""

    url: str

    def start_load(self, key: str, version_id: str | None) -> Answer: ...

    def get_load(self, load_id: str) -> Answer: ...


class HttpLoadsApi:
    """The deployed API over HTTPS with urllib. A request that got no usable answer (no connection, a timeout, 429
    or 5xx) is sent again with full-jitter backoff: a GET changes nothing, and POST /loads of the same object version
    joins the load an earlier attempt started."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        attempts: int = REQUEST_ATTEMPTS,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep

    def start_load(self, key: str, version_id: str | None) -> Answer:
        body = {"key": key} | ({"versionId": version_id} if version_id else {})
        return self._request("POST", contract.ROUTE_LOADS, json.dumps(body).encode(), {"content-type": "application/json"})

    def get_load(self, load_id: str) -> Answer:
        path = contract.ROUTE_LOAD.replace(f"{{{contract.KEY_LOAD_ID}}}", quote(load_id, safe=""))
        return self._request("GET", path, None, {})

    def _request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        why = "no attempt"
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(random.uniform(0, min(self._max_backoff, self._backoff * 2**attempt)))
            request = urllib.request.Request(
                self.url + path,
                data=body,
                method=method,
                headers={"Authorization": self._key, "accept": "application/json", "user-agent": "onceflow-taxi-loader", **headers},
            )
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    answer = Answer(response.status, _json(response.read()))
            except urllib.error.HTTPError as err:
                answer = Answer(err.code, _json(err.read()))
            except (OSError, http.client.HTTPException, ValueError) as err:  # URLError, timeouts, resets, a truncated answer
                why = f"{type(err).__name__}: {err}"
                continue
            if answer.status not in RETRIED_STATUSES:
                return answer
            why = f"HTTP {answer.status}: {answer.error}"
        raise ApiUnavailable(f"{method} {path}: no answer after {self._attempts} attempts ({why})")


def _json(data: bytes) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError:
        return {"error": data.decode("utf-8", "replace")[:500]}
    return document if isinstance(document, dict) else {"error": str(document)[:500]}


# --- progress and output ------------------------------------------------------------------------


class _Bar(Protocol):
    total: float | None

    def update(self, n: float | None = 1) -> bool | None: ...

    def refresh(self) -> None: ...

    def close(self) -> None: ...


class _NoBar:
    total: float | None = None

    def update(self, n: float | None = 1) -> bool | None:
        return None

    def refresh(self) -> None:
        return None

    def close(self) -> None:
        return None


class Console:
    """The report on `out`, the progress bars (tqdm) on `err`: drawn when `progress` is True, or when it is None and
    `err` is a terminal. Lines printed while a bar is drawn go above it."""

    def __init__(self, out: TextIO, err: TextIO, progress: bool | None) -> None:
        self.out = out
        self.err = err
        self._draw = err.isatty() if progress is None else progress

    def bar(self, total: int | None, label: str, unit: str = "it", *, scale: bool = False) -> _Bar:
        if not self._draw:
            return _NoBar()
        try:
            from tqdm import tqdm
        except ImportError:  # installed without the `clients` extra: no bars, said once
            self._draw = False
            print(f"{PROG}: no progress bars: tqdm is not installed (pip install 'onceflow[clients]')", file=self.err)
            return _NoBar()
        return tqdm(total=total, desc=label, file=self.err, unit=unit, unit_scale=scale, dynamic_ncols=True)

    def print(self, text: str = "") -> None:
        if self._draw:
            try:
                from tqdm import tqdm
            except ImportError:
                self._draw = False
            else:
                tqdm.write(text, file=self.out)  # above the bars, which it redraws
                return
        print(text, file=self.out)


# --- loading ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadOptions:
    wait_seconds: float = DEFAULT_WAIT_SECONDS  # how long to follow the load after starting it
    poll_seconds: float = POLL_SECONDS
    part_bytes: int = PART_BYTES


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """What became of a file: its object, its load, and the load's report (None: the load did not finish)."""

    key: str
    uploaded: bool  # False: the object was there already (an earlier or a concurrent run uploaded it)
    load_id: str | None = None
    report: Mapping[str, Any] | None = None
    incomplete: str = ""  # why there is no finished report: what to do is run it again

    @property
    def file_refused(self) -> bool:
        """The load refused the file as a whole (contract.ERROR_LOAD_INPUT: no trip layout in its first lines, not CSV
        text, the object version gone): loading it again changes nothing."""
        error = (self.report or {}).get("error") or {}
        return bool(error) and error.get("error") == contract.ERROR_LOAD_INPUT

    @property
    def exit_status(self) -> int:
        report = self.report
        if self.file_refused:
            return NOT_STORED_EXIT_STATUS
        if report is None or report.get("status") != REPORT_SUCCEEDED:
            return INCOMPLETE_EXIT_STATUS
        if int(report.get("refusedLines") or 0) or sum(int(count) for count in (report.get("flagged") or {}).values()):
            return NOT_STORED_EXIT_STATUS
        return ALL_STORED_EXIT_STATUS


def load_file(
    path: Path,
    api: LoadsApi,
    s3: Any,
    bucket: str,
    options: LoadOptions = LoadOptions(),
    *,
    console: Console | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> LoadOutcome:
    """Upload `path` to s3://bucket/incoming/<sha256>/<stem>.csv unless it is there, start or join its load, follow
    it for `options.wait_seconds`, and print the report. Raises UsageError when the file is no trip file, and
    ApiUnavailable when the API does not answer."""
    console = console or Console(sys.stdout, sys.stderr, progress=False)
    key = ingest_key(path, file_digest(path))
    version_id, uploaded = _put_once(s3, path, bucket, key, options.part_bytes, console)
    console.print(f"{'uploaded' if uploaded else 'already uploaded'}: {path} as s3://{bucket}/{key}")
    started = api.start_load(key, version_id)
    if started.status not in (200, 202):
        outcome = LoadOutcome(key, uploaded, incomplete=f"POST {contract.ROUTE_LOADS} answered {started.status}: {started.error}")
        print_outcome(outcome, console)
        return outcome
    load_id = started.document.get("loadId")
    if not load_id:
        outcome = LoadOutcome(key, uploaded, incomplete=f"POST {contract.ROUTE_LOADS} answered {started.status} without a load id")
        print_outcome(outcome, console)
        return outcome
    console.print(f"load {load_id}: {'loaded before' if started.status == 200 else 'started, or joined'}")
    answer = _follow(api, load_id, options, console, sleep, clock)
    outcome = LoadOutcome(key, uploaded, load_id, answer.document.get("report"), _why_incomplete(answer, options))
    print_outcome(outcome, console)
    return outcome


def _put_once(s3: Any, path: Path, bucket: str, key: str, part_bytes: int, console: Console) -> tuple[str | None, bool]:
    """The object's version at `key` (None in an unversioned bucket) and whether this run uploaded it."""
    from botocore.exceptions import ClientError

    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
            raise
    else:
        return head.get("VersionId"), False
    bar = console.bar(None, "upload", "B", scale=True)
    try:
        uploaded = upload_trip_file(s3, path, bucket, key, part_size=part_bytes, on_bytes=bar.update)
    except TripFileError as err:
        raise UsageError(str(err)) from err
    finally:
        bar.close()
    return uploaded.get("VersionId"), True


def _follow(
    api: LoadsApi, load_id: str, options: LoadOptions, console: Console, sleep: Callable[[float], None], clock: Callable[[], float]
) -> Answer:
    """GET /loads/{LoadId} until it has the report, the execution ended without one, or --wait has passed: the last
    answer. The bar counts the load's chunks done, of the plan's chunks once the plan has cut the file."""
    deadline = clock() + options.wait_seconds
    bar = console.bar(None, "chunks", "chunk")
    shown = 0
    try:
        while True:
            answer = api.get_load(load_id)
            if answer.status != 200 or "report" in answer.document or answer.document.get("status") in ENDED_WITHOUT_REPORT:
                return answer
            chunks, done = load_progress(answer.document)
            if chunks is not None and bar.total != chunks:
                bar.total = chunks
                bar.refresh()
            bar.update(done - shown)
            shown = done
            if clock() >= deadline:
                return answer
            sleep(options.poll_seconds)
    finally:
        bar.close()


def load_progress(document: Mapping[str, Any]) -> tuple[int | None, int]:
    """(the load's chunks, None before the plan has cut the file; the chunks done) from a GET /loads answer of a
    running load: the summaries written, or the map run's succeeded items when that is more."""
    progress = document.get("progress") or {}
    chunks = progress.get("chunks")
    done = int(progress.get("chunksDone") or 0)
    succeeded = int((progress.get("itemCounts") or {}).get("succeeded") or 0)
    return (None if chunks is None else int(chunks)), max(done, succeeded)


def _why_incomplete(answer: Answer, options: LoadOptions) -> str:
    report = answer.document.get("report")
    if answer.status != 200:
        return f"GET {contract.ROUTE_LOADS}/... answered {answer.status}: {answer.error}"
    if report is not None:
        return "" if report.get("status") == REPORT_SUCCEEDED else "the load failed"
    status = answer.document.get("status")
    if status in ENDED_WITHOUT_REPORT:
        return f"the load's execution ended {status} without a report"
    return f"the load is still {status or 'running'} after --wait {options.wait_seconds:g} s"


def print_outcome(outcome: LoadOutcome, console: Console) -> None:
    """The report: counts, flagged rows by reason and detail, the first refused lines, and the verdict."""
    report = outcome.report
    if report is not None:
        flagged = report.get("flagged") or {}
        console.print(f"rows read        {int(report.get('rowsRead') or 0):>12,}")
        console.print(f"stored           {int(report.get('stored') or 0):>12,}")
        console.print(f"already stored   {int(report.get('alreadyStored') or 0):>12,}")
        if findings := ", ".join(f"{code} {int(count):,}" for code, count in sorted((report.get("findings") or {}).items())):
            console.print(f"  with findings: {findings}")
        console.print(f"flagged          {sum(int(count) for count in flagged.values()):>12,}")
        for title, counts in (("by reason", flagged), ("by detail", report.get("flaggedByDetail") or {})):
            for name, count in sorted(counts.items(), key=lambda item: (-int(item[1]), item[0])):
                console.print(f"  {title}: {name}: {int(count):,}")
        refused_lines = int(report.get("refusedLines") or 0)
        console.print(f"refused lines    {refused_lines:>12,}")
        refused = report.get("refused") or []
        for entry in refused[:SHOWN_REFUSED]:  # the reason names its line as the API's refusals do; else it is named here
            reason = str(entry["reason"])
            console.print(f"  {reason}" if reason.startswith(f"line {entry['line']} ") else f"  line {entry['line']}: {reason}")
        if refused_lines > min(len(refused), SHOWN_REFUSED):
            where = f"s3://{report.get('bucket')}/{contract.LOADS_PREFIX}{outcome.load_id}/report.json lists the first {len(refused):,}"
            console.print(f"  ... and {refused_lines - min(len(refused), SHOWN_REFUSED):,} more ({where})")
        if error := report.get("error"):
            console.print(f"error: {error.get('error')}: {error.get('cause')}")
        if report.get("chunksMissing"):
            console.print(f"chunks not done: {report['chunksMissing']}")
    console.print(_verdict(outcome))


def _verdict(outcome: LoadOutcome) -> str:
    status = outcome.exit_status
    if outcome.file_refused:
        return f"FILE REFUSED (exit {status}): the load refused the file as a whole (the error above); loading it again changes nothing"
    if status == INCOMPLETE_EXIT_STATUS:
        return f"INCOMPLETE (exit {status}): {outcome.incomplete}; run the loader again (nothing is stored twice)"
    if status == NOT_STORED_EXIT_STATUS:
        return f"NOT ALL STORED (exit {status}): flagged or refused lines above; fix them and load them from a new file"
    return f"ALL STORED (exit {status}): every data line was stored"


# --- the command line ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaxiStack:
    """What the loader reads from the taxi stack's outputs."""

    api_url: str
    secret_arn: str
    bucket: str
    local: LocalCloud | None = None  # `make serve`'s embedded cloud: its endpoint, and the key pair it takes

    @property
    def region(self) -> str | None:
        """The stack's region, the secret's (its ARN's fourth field)."""
        parts = self.secret_arn.split(":")
        return parts[3] if len(parts) > 3 and parts[3] else None


def api_from_outputs(path: Path, env: str) -> TaxiStack:
    """The taxi stack's ApiUrl, ApiKeySecretArn and IngestBucketName from a CDK outputs file
    (`{stack name: {OutputKey: value}}`)."""
    deploy = f"run `make deploy ENV={env}` in the repository root, or pass --url and --bucket"
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as err:
        if env == LOCAL_ENV:
            raise UsageError(missing_file(path)) from err
        raise UsageError(f"no outputs file {path.absolute()}: {deploy}, or --outputs-file") from err
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read outputs file {path} ({err}); {deploy}") from err
    if not isinstance(document, dict) or not all(isinstance(outputs, dict) for outputs in document.values()):
        raise UsageError(f"outputs file {path} is not a CDK outputs file (a JSON object of stack name -> outputs); {deploy}")
    stacks = sorted(str(name) for name in document if str(name).endswith(STACK_SUFFIX))
    if len(stacks) != 1:
        found = ", ".join(stacks) or "none"
        raise UsageError(f"outputs file {path} has {len(stacks)} stacks ending in {STACK_SUFFIX} ({found}); {deploy}")
    outputs = document[stacks[0]]
    names = (contract.OUTPUT_API_URL, contract.OUTPUT_API_KEY_SECRET_ARN, contract.OUTPUT_INGEST_BUCKET)
    missing = [name for name in names if name not in outputs]
    if missing:
        raise UsageError(f"stack {stacks[0]} in outputs file {path} has no outputs {missing}; {deploy}")
    try:
        local = running_local_cloud(document, path)
    except LocalCloudError as err:
        raise UsageError(str(err)) from err
    url, secret_arn, bucket = (str(outputs[name]) for name in names)
    return TaxiStack(url, secret_arn, bucket, local)


def _session(region: str | None, profile: str | None, local: LocalCloud | None) -> Any:
    import boto3

    if local is not None:
        return boto3.Session(**local.session_options(region=region, profile=profile))
    return boto3.Session(profile_name=profile, region_name=region)


def _client(service: str, region: str | None, profile: str | None, local: LocalCloud | None) -> Any:
    """A boto3 client: on `make serve`'s embedded cloud (`local`), its endpoint, and its region and dummy key pair
    where --profile and the AWS_* variables name none; otherwise the default credentials or `profile`."""
    from botocore.exceptions import BotoCoreError

    try:
        session = _session(region, profile, local)
        return session.client(service, endpoint_url=local.endpoint() if local is not None else None)
    except BotoCoreError as err:  # an unknown profile, no region
        raise UsageError(f"cannot reach {service}: {err}") from err


def read_api_key(secret_arn: str, profile: str | None = None, local: LocalCloud | None = None) -> str:
    """The API key from Secrets Manager (the secret's region)."""
    from botocore.exceptions import BotoCoreError, ClientError

    parts = secret_arn.split(":")
    client = _client("secretsmanager", parts[3] if len(parts) > 3 and parts[3] else None, profile, local)
    try:
        return str(client.get_secret_value(SecretId=secret_arn)["SecretString"])
    except (BotoCoreError, ClientError, KeyError) as err:
        raise UsageError(f"cannot read the API key from {secret_arn}: {err}; or pass --api-key or set {API_KEY_VARIABLE}") from err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Load a file of NYC yellow-taxi trips (.csv, .csv.gz or .parquet, of any size) into the taxi ETL saga "
        "through its bulk route: upload it to the ingest bucket (once: the key is the file's sha256), start or join its "
        "load, show its progress and print its report. Rows get content ids: a rerun or a copy of the file stores "
        "nothing twice.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("file", type=Path, metavar="FILE", help=f"the trip file: {', '.join(SUFFIXES)} (streamed)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="the API's base URL (the taxi stack's ApiUrl output); with --bucket")
    target.add_argument(
        "--env",
        metavar="NAME",
        help=f"read ApiUrl, ApiKeySecretArn and IngestBucketName of the taxi stack from {OUTPUTS_FILE.format(env='NAME')}",
    )
    parser.add_argument("--bucket", help="with --url: the ingest bucket (the taxi stack's IngestBucketName output)")
    parser.add_argument(
        "--outputs-file", type=Path, metavar="PATH", help=f"with --env: this file instead of ./{OUTPUTS_FILE.format(env='NAME')}"
    )
    parser.add_argument(
        "--api-key", help=f"the API key (default: {API_KEY_VARIABLE}, or with --env the stack's secret); visible to other local users"
    )
    parser.add_argument("--profile", help="the AWS profile that uploads the file (and with --env reads the key's secret)")
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long to follow the load (default {DEFAULT_WAIT_SECONDS:g}); a load still running then goes on, and "
        "running the loader again joins it",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw the progress bars (default: when stderr is a terminal); --no-progress never",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, api: LoadsApi | None = None, s3: Any = None) -> int:
    """The CLI. Tests inject `api` and `s3` (with --url and --bucket); otherwise the command line names them."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (missing := extra.missing_line(PROG)) is not None:
        print(missing, file=sys.stderr)
        return extra.MISSING_EXIT_STATUS
    if args.wait < 0:
        parser.error("--wait must be 0 or more seconds")
    if args.outputs_file is not None and not args.env:
        parser.error("--outputs-file goes with --env")
    if (args.url is None) != (args.bucket is None):
        parser.error("--url and --bucket go together (--env reads both from the stack's outputs)")
    if not args.file.is_file():
        parser.error(f"{args.file} is not a file")
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    console = Console(sys.stdout, sys.stderr, args.progress)
    try:
        bucket, api, s3 = _target(args) if api is None or s3 is None else (args.bucket, api, s3)
        outcome = load_file(args.file, api, s3, bucket, LoadOptions(wait_seconds=args.wait), console=console)
    except UsageError as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}\n")
    except NoCredentialsError as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}: configure AWS credentials, or pass --profile\n")
    except (ApiUnavailable, BotoCoreError, ClientError, S3UploadFailedError) as err:  # the API or S3 did not take it
        console.print(f"INCOMPLETE (exit {INCOMPLETE_EXIT_STATUS}): {err}; run the loader again (nothing is stored twice)")
        return INCOMPLETE_EXIT_STATUS
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; run it again: it uploads what is missing and joins the load", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    return outcome.exit_status


def _target(args: argparse.Namespace) -> tuple[str, HttpLoadsApi, Any]:
    """The bucket, the API and the S3 client the command line names."""
    key = args.api_key or os.environ.get(API_KEY_VARIABLE)
    if args.env:
        stack = api_from_outputs(args.outputs_file or Path(OUTPUTS_FILE.format(env=args.env)), args.env)
        url, bucket, region, local = stack.api_url, stack.bucket, stack.region, stack.local
        key = key or read_api_key(stack.secret_arn, args.profile, stack.local)
    else:
        url, bucket, region, local = args.url, args.bucket, None, None
    if not key:
        raise UsageError(f"no API key: pass --api-key, set {API_KEY_VARIABLE}, or use --env to read it from the stack's secret")
    if not url.startswith(("https://", "http://")):
        raise UsageError(f"the API URL must start with https:// (got {url!r})")
    return bucket, HttpLoadsApi(url, key), _client("s3", region, args.profile, local)


if __name__ == "__main__":
    sys.exit(main())
