"""A client of the event-log HTTP API (Pipeline 2): SigV4-signed requests, appends that are never
written twice, large payloads, and the latest snapshot. A library and a CLI::

    from onceflow.clients.event_log import EventLogClient

    with EventLogClient("https://abc123.execute-api.eu-west-1.amazonaws.com/", profile="sheets") as log:
        result = log.append("budget-2027", "B12", "42")               # AppendResult(position=..., duplicate=False, ...)
        log.clear("budget-2027", "C3")
        log.append_large("budget-2027", "D1", big_bytes)              # presigned upload, then the LargePayload entry
        latest = log.read_snapshot("budget-2027")                     # the latest snapshot and every entry after it

    python -m onceflow.clients.event_log --env dev append budget-2027 B12 42
    python -m onceflow.clients.event_log --url "$API_URL" snapshot budget-2027 --cells

Credentials, profile and region are a boto3 Session's (`profile=`, `region=`, or `session=`; the
environment and the AWS config files otherwise); requests are signed with botocore's
`SigV4Auth` for the service `execute-api`, over the exact bytes sent.

Request ids and positions: why a retry can never append twice
-------------------------------------------------------------
The API keys an entry by its position; the request id says which request holds it. The pair
(request_id, position) is the identity of an append: the same pair again is answered from the
stored entry (200, `duplicate: true`) and writes nothing; another request at a taken position, or
a position ahead of the log, gets 409 with `next_position`; the same request id with another event
at that position gets 422. The API keeps no index of request ids across positions: one request id
sent at two positions would be two entries. So the client:

1. Uses one request id per logical append (the caller's, or a uuid4 it makes) for every retry *and*
   every rebase. Keeping it across a rebase is required by large payloads (the uploaded object's key
   is derived from the log id and the request id, so the complete must name the same id at whatever
   position it lands), and it gives one id per edit, which the log's entry carries.
2. Retries a send that got no answer (timeout, connection error, 429, 5xx) with the same request id,
   the same position and the same body bytes (signed again: the signature's date moves), so the API
   either appends it once or answers that it is a duplicate (counted as success).
3. Moves to another position (a rebase, to the 409's `next_position`) only on proof that the current
   position P does not hold this request: a 409 when no earlier send of this pair is unanswered (the
   request was never written anywhere), or, after an unanswered send, a 409 to a send made once the
   client already knew that the log's next position is past P. The API then answers from the entry
   at P, which never changes, so the 409 means P holds another request for good. Without that proof
   the client sends the same pair again (one confirming request). At any moment a single position
   can receive the request, so it lands at most once.
4. Stops with a typed error: `AppendConflictError` after `max_rebases` proven conflicts (nothing was
   appended); `UnavailableError` after `max_retries` unanswered sends. The outcome of the latter is
   unknown: it carries `request_id` and `position`, and calling again with both finds out (a
   duplicate answer means it was appended). A caller that passes both is taken to be resuming, so its
   first 409 is confirmed before any rebase. To resume, pass both: the same request id at a new
   position would be a second entry.

Without a position, the client appends at the next position it knows for the log (from its last
answers, 1 for a log it has not seen); a 409 says where the log really is, which costs a rebase.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import ssl
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import quote, urlencode, urlsplit

from onceflow.clients import extra
from onceflow.clients.local import LOCAL_ENV, LocalCloudError, missing_file, running_local_cloud
from onceflow.runtime.event_log import contract

# botocore (the `clients` extra) is imported where it is used, so that without the extra the CLI
# still answers --help and says in one line how to install it (onceflow/clients/extra.py).
if TYPE_CHECKING:
    import boto3
    from botocore.credentials import Credentials, ReadOnlyCredentials

__all__ = [
    "AppendConflictError",
    "AppendResult",
    "AuthError",
    "ConfigurationError",
    "ConflictError",
    "EventLogClient",
    "EventLogError",
    "HttpClientTransport",
    "HttpRequest",
    "HttpResponse",
    "LatestSnapshot",
    "LogNotFoundError",
    "PayloadConflictError",
    "PayloadUpload",
    "ProtocolError",
    "RefusedError",
    "SigV4Signer",
    "Signer",
    "SnapshotInfo",
    "SnapshotPage",
    "Transport",
    "UnavailableError",
    "api_url_from_outputs_file",
    "main",
]

SERVICE = "execute-api"
DEFAULT_TIMEOUT_SECONDS = 15.0
DEFAULT_MAX_REBASES = 8
DEFAULT_MAX_RETRIES = 4
# What `make deploy ENV=<env>` writes (`cdk deploy --outputs-file`), and the stack of the event log in it.
OUTPUTS_FILE = "cdk-outputs-{env}.json"
EVENT_LOG_STACK_SUFFIX = "-EventLog"
EXECUTE_API_HOST = re.compile(r"[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")
# What a transport raises when a request got no answer: the request may or may not have been served.
UNANSWERED: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)


# --- errors -----------------------------------------------------------------------------------


class EventLogError(Exception):
    """Every error of this client. `status` is the HTTP status that caused it, if any."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class ConfigurationError(EventLogError):
    """The client cannot be used as set up: no region, a URL that is not the event-log API, an unreadable outputs file."""


class AuthError(EventLogError):
    """No credentials, or the API (or a presigned URL) refused them: HTTP 401 or 403."""


class RefusedError(EventLogError):
    """The API refused the request as sent (400, 413, 422), with its message; sending it again cannot help."""


class ConflictError(EventLogError):
    """A 409 the client could not resolve."""


class AppendConflictError(ConflictError):
    """Every rebase met another conflict (`max_rebases` of them): nothing was appended."""

    def __init__(self, message: str, *, next_position: int, request_id: str, position: int, rebases: int) -> None:
        super().__init__(message, status=409)
        self.next_position = next_position
        self.request_id = request_id
        self.position = position
        self.rebases = rebases


class PayloadConflictError(ConflictError):
    """The payload of this request id is already uploaded (it never changes), or was not uploaded when completed."""


class LogNotFoundError(EventLogError):
    """The log has no entries (HTTP 404 on its snapshot)."""


class UnavailableError(EventLogError):
    """No answer after every retry (timeouts, connection errors, 429, 5xx).

    For an append the outcome is unknown: call again with `request_id` and `position` to find out
    (a duplicate answer means it was appended). Both are None for a read."""

    def __init__(self, message: str, *, status: int | None = None, request_id: str | None = None, position: int | None = None) -> None:
        super().__init__(message, status=status)
        self.request_id = request_id
        self.position = position


class ProtocolError(EventLogError):
    """An answer the client does not understand (an unexpected status or body), or a snapshot that fails its digest."""


# --- HTTP -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class Transport(Protocol):
    """Sends one request and returns the answer, whatever its status. Raises OSError (TimeoutError,
    ConnectionError, ...) or http.client.HTTPException when there is no answer."""

    def __call__(self, request: HttpRequest, *, timeout: float) -> HttpResponse: ...


class HttpClientTransport:
    """The default transport: http.client, one kept-alive connection per host and thread.

    It sends the request's headers and no others (http.client adds Content-Length and
    Accept-Encoding; the Host header is the request's), follows no redirect and uses no proxy."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context or ssl.create_default_context()
        self._local = threading.local()
        self._pools: list[dict[tuple[str, str], http.client.HTTPConnection]] = []
        self._pools_lock = threading.Lock()

    def _pool(self) -> dict[tuple[str, str], http.client.HTTPConnection]:
        pool: dict[tuple[str, str], http.client.HTTPConnection] | None = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
            with self._pools_lock:
                self._pools.append(pool)
        return pool

    def __call__(self, request: HttpRequest, *, timeout: float) -> HttpResponse:
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"not an http(s) URL: {request.url}")
        key = (parts.scheme, parts.netloc)
        pool = self._pool()
        connection = pool.pop(key, None)
        if connection is None:
            if parts.scheme == "https":
                connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=self._ssl_context)
            else:
                connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        else:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = request.body if request.body or request.method in ("POST", "PUT") else None
        try:
            connection.request(request.method, target, body=body, headers=dict(request.headers))
            response = connection.getresponse()
            data = response.read()
        except ssl.SSLCertVerificationError as err:  # no retry can help
            connection.close()
            raise ConfigurationError(f"TLS: {parts.hostname}: {err.verify_message or err}") from err
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            pool[key] = connection
        return HttpResponse(response.status, data, {name.lower(): value for name, value in response.getheaders()})

    def close(self) -> None:
        """Closes the kept-alive connections of every thread (call it when no request is under way)."""
        with self._pools_lock:
            pools = list(self._pools)
        for pool in pools:
            for connection in list(pool.values()):
                connection.close()
            pool.clear()


def host_of(url: str) -> str:
    """The Host header of a URL (the port only when it is not the scheme's default), as SigV4 signs it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


# --- signing ----------------------------------------------------------------------------------


class Signer(Protocol):
    def sign(self, request: HttpRequest) -> HttpRequest: ...


class SigV4Signer:
    """Signs API requests with botocore's SigV4Auth for `execute-api` in `region`.

    `credentials` is a botocore Credentials (refreshable ones are frozen at each signature) or a
    callable returning one; a boto3 Session's are `SigV4Signer.from_session(session, region)`."""

    def __init__(self, credentials: Credentials | ReadOnlyCredentials | Callable[[], Credentials | None], region: str) -> None:
        self._credentials = credentials
        self.region = region

    @classmethod
    def from_session(cls, session: boto3.session.Session, region: str) -> SigV4Signer:
        return cls(session.get_credentials, region)

    def _frozen(self) -> ReadOnlyCredentials:
        from botocore.credentials import Credentials, ReadOnlyCredentials

        source = self._credentials
        credentials = source if isinstance(source, (Credentials, ReadOnlyCredentials)) else source()
        if credentials is None:
            raise AuthError("no AWS credentials: pass --profile, or set AWS_PROFILE or the AWS_ACCESS_KEY_ID variables")
        frozen = credentials.get_frozen_credentials() if isinstance(credentials, Credentials) else credentials
        if not frozen.access_key or not frozen.secret_key:
            raise AuthError("the AWS credentials have no access key or no secret key")
        return frozen

    def sign(self, request: HttpRequest) -> HttpRequest:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import BotoCoreError, NoCredentialsError, PartialCredentialsError

        headers = {name: value for name, value in request.headers.items() if name.lower() not in ("authorization", "x-amz-date")}
        if not any(name.lower() == "host" for name in headers):
            headers["host"] = host_of(request.url)
        aws_request = AWSRequest(method=request.method, url=request.url, headers=headers, data=request.body)
        try:
            SigV4Auth(self._frozen(), SERVICE, self.region).add_auth(aws_request)
        except (NoCredentialsError, PartialCredentialsError) as err:
            raise AuthError(str(err)) from err
        except BotoCoreError as err:  # a credential provider that failed (an expired SSO session, say)
            raise AuthError(f"cannot get AWS credentials: {err}") from err
        return HttpRequest(request.method, request.url, dict(aws_request.headers.items()), request.body)


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendResult:
    log_id: str
    position: int
    request_id: str
    duplicate: bool  # True: the API had this request already (a retry whose first answer was lost): nothing written now
    rebases: int = 0  # how many times the append moved to the log's next position after a 409
    retries: int = 0  # how many sends got no answer (timeouts, 429, 5xx) and were sent again
    payload_key: str | None = None  # append_large: the object that holds the value


@dataclass(frozen=True, slots=True)
class PayloadUpload:
    """What POST /logs/{id}/payloads answers: where to PUT the bytes, and the headers to send (signed into the URL)."""

    object_key: str
    upload_url: str
    method: str
    headers: Mapping[str, str]
    expires_in: int


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A built snapshot: the sheet at event `cut`, as NDJSON chunks behind presigned download URLs.

    A page of a read lists the URLs of the chunks from `first_chunk` on, as many as fit its answer, and
    `next_chunk` (None after the last chunk); `read_snapshot` gathers them all (`first_chunk` 0, every URL)."""

    number: int
    cut: int
    cells: int
    digest: str
    root_url: str
    chunk_urls: tuple[str, ...]
    chunks: int = 0  # the snapshot's chunk count; an API without chunk paging sends all of them at once
    first_chunk: int = 0
    next_chunk: int | None = None


@dataclass(frozen=True, slots=True)
class SnapshotPage:
    """One answer of GET /logs/{id}/snapshot: the latest snapshot and a page of the entries after it."""

    log_id: str
    next_position: int
    snapshot: SnapshotInfo | None
    entries: tuple[dict[str, Any], ...]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class LatestSnapshot:
    """The latest snapshot and every entry after it (all pages): the snapshot plus a replay of
    `entries` is the sheet. Entries are the API's: `seq`, `kind`, and `position`, `cell`,
    `request_id`, `value` or `payload_key`/`payload_bytes` for cell events."""

    log_id: str
    next_position: int
    snapshot: SnapshotInfo | None
    entries: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- the client -------------------------------------------------------------------------------


def _region_of_url(url: str) -> str | None:
    match = EXECUTE_API_HOST.fullmatch(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def _message(response: HttpResponse) -> str:
    """The API's message ({"error"}), API Gateway's ({"message"}), S3's (<Message>), or the body's start."""
    text = response.body.decode("utf-8", errors="replace").strip()
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict):
        for key in ("error", "message", "Message"):
            if isinstance(document.get(key), str):
                return str(document[key])
    if text.startswith("<"):
        try:
            root = ElementTree.fromstring(text)
            code, message = root.findtext("Code"), root.findtext("Message")
            if code or message:
                return ": ".join(part for part in (code, message) if part)
        except ElementTree.ParseError:
            pass
    return " ".join(text.split())[:300] or f"HTTP {response.status}"


def _json_object(response: HttpResponse, what: str) -> dict[str, Any]:
    try:
        document = json.loads(response.body)
    except (ValueError, RecursionError) as err:
        raise ProtocolError(f"{what}: the answer (HTTP {response.status}) is not JSON", status=response.status) from err
    if not isinstance(document, dict):
        raise ProtocolError(f"{what}: the answer (HTTP {response.status}) is not a JSON object", status=response.status)
    return document


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


class EventLogClient:
    """The event-log API at `base_url` (the EventLog stack's `ApiUrl`). Thread-safe: one client may
    serve many threads.

    Credentials and region: `signer` if given; else a boto3 Session (`session`, or one made from
    `profile` and `region`). The region is `region`, else the session's, else the one in an
    execute-api URL. `transport` sends the requests (HttpClientTransport by default); `sleep` and
    `rng` pace the retries (full-jitter backoff from `backoff` seconds, at most `max_backoff`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        region: str | None = None,
        profile: str | None = None,
        session: boto3.session.Session | None = None,
        signer: Signer | None = None,
        transport: Transport | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_rebases: int = DEFAULT_MAX_REBASES,
        max_retries: int = DEFAULT_MAX_RETRIES,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
        new_request_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"the API URL must be http(s)://host[/stage]: {base_url!r}")
        if max_rebases < 0 or max_retries < 0 or timeout <= 0:
            raise ConfigurationError("max_rebases and max_retries must be >= 0 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self._region = region
        self._profile = profile
        self._session = session
        self._signer = signer
        self._signer_lock = threading.Lock()
        self._own_transport = transport is None
        self._transport: Transport = transport if transport is not None else HttpClientTransport()
        self.timeout = timeout
        self.max_rebases = max_rebases
        self.max_retries = max_retries
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._sleep = sleep or time.sleep
        self._rng = rng or random.Random()
        self._new_request_id = new_request_id
        self._next_positions: dict[str, int] = {}
        self._positions_lock = threading.Lock()

    # --- plumbing -------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._own_transport and isinstance(self._transport, HttpClientTransport):
            self._transport.close()

    def signer(self) -> Signer:
        """The signer, made from the session on first use (a usage error if there is no region or no credentials)."""
        with self._signer_lock:
            if self._signer is None:
                import boto3
                from botocore.exceptions import ProfileNotFound

                try:
                    session = self._session or boto3.session.Session(profile_name=self._profile, region_name=self._region)
                except ProfileNotFound as err:
                    raise ConfigurationError(str(err)) from err
                # botocore reads AWS_DEFAULT_REGION and the profile only; the CDK CLI and Lambda set AWS_REGION.
                region = self._region or session.region_name or os.environ.get("AWS_REGION") or _region_of_url(self.base_url)
                if not region:
                    raise ConfigurationError(
                        "no AWS region: pass --region, or set AWS_DEFAULT_REGION, AWS_REGION or a region in the profile"
                    )
                if session.get_credentials() is None:
                    raise AuthError("no AWS credentials: pass --profile, or set AWS_PROFILE or the AWS_ACCESS_KEY_ID variables")
                self._signer = SigV4Signer.from_session(session, region)
            return self._signer

    def known_next_position(self, log_id: str) -> int | None:
        """The log's next position as this client last heard it (None: it has not talked to the log)."""
        with self._positions_lock:
            return self._next_positions.get(log_id)

    def _learn_next_position(self, log_id: str, next_position: int) -> None:
        with self._positions_lock:
            self._next_positions[log_id] = max(self._next_positions.get(log_id, 1), next_position)

    def _url(self, log_id: str, suffix: str, query: Mapping[str, str] | None = None) -> str:
        url = f"{self.base_url}/logs/{quote(log_id, safe='')}{suffix}"
        return f"{url}?{urlencode(query, quote_via=quote, safe='')}" if query else url

    def _call_api(self, method: str, url: str, body: bytes | None) -> HttpResponse:
        """One signed request. Raises what the transport raises when there is no answer."""
        headers = {"content-type": "application/json"} if body is not None else {}
        request = self.signer().sign(HttpRequest(method, url, headers, body or b""))
        return self._transport(request, timeout=self.timeout)

    def _pause(self, retries: int) -> None:
        self._sleep(self._rng.uniform(0, min(self._max_backoff, self._backoff * 2 ** (retries - 1))))

    def _refuse(self, response: HttpResponse, what: str) -> EventLogError:
        """The error of an answer that is neither a success nor something to retry."""
        status, message = response.status, _message(response)
        if status in (401, 403):
            return AuthError(f"{what}: the API refused the credentials (HTTP {status}): {message}", status=status)
        if status in (400, 413, 422):
            return RefusedError(f"{what}: {message}", status=status)
        if status == 404:
            return ConfigurationError(f"{what}: HTTP 404 ({message}); is {self.base_url} the event log's ApiUrl?", status=status)
        return ProtocolError(f"{what}: unexpected HTTP {status}: {message}", status=status)

    def _read(self, url: str, what: str, *, signed: bool = True) -> HttpResponse:
        """A read (GET, safe to repeat): retried while there is no answer; any answer is returned."""
        retries = 0
        while True:
            try:
                if signed:
                    response = self._call_api("GET", url, None)
                else:
                    response = self._transport(HttpRequest("GET", url, {}), timeout=self.timeout)
            except UNANSWERED as err:
                failure: str | int = f"{type(err).__name__}: {err}"
            else:
                if not _retryable(response.status):
                    return response
                failure = response.status
            retries += 1
            if retries > self.max_retries:
                status = failure if isinstance(failure, int) else None
                raise UnavailableError(f"{what}: no answer after {retries} tries (last: {failure})", status=status)
            self._pause(retries)

    # --- appends --------------------------------------------------------------------------------

    def append(
        self,
        log_id: str,
        cell: str,
        value: str,
        *,
        position: int | None = None,
        request_id: str | None = None,
        max_rebases: int | None = None,
        resume: bool | None = None,
    ) -> AppendResult:
        """Sets `cell` to `value` (a SetCell event) at the log's next position, or at `position`.

        `request_id`: the append's id (default: a new uuid4), kept across retries and rebases.
        `max_rebases`: proven 409s to rebase on (default the client's; 0: fail on the first).
        `resume`: an earlier call with this request id and position may have been served, so a 409
        is confirmed before a rebase (default: True when both are given). See the module doc."""
        event = {"kind": "SetCell", "cell": cell, "value": value}
        return self._append(log_id, "/entries", _entry_body(event), position, request_id, max_rebases, resume)

    def clear(
        self,
        log_id: str,
        cell: str,
        *,
        position: int | None = None,
        request_id: str | None = None,
        max_rebases: int | None = None,
        resume: bool | None = None,
    ) -> AppendResult:
        """Clears `cell` (a ClearCell event) at the log's next position; the options are `append`'s."""
        event = {"kind": "ClearCell", "cell": cell}
        return self._append(log_id, "/entries", _entry_body(event), position, request_id, max_rebases, resume)

    def append_large(
        self,
        log_id: str,
        cell: str,
        data: bytes,
        *,
        position: int | None = None,
        request_id: str | None = None,
        max_rebases: int | None = None,
        resume: bool | None = None,
    ) -> AppendResult:
        """Sets `cell` to a value too large for an entry: asks for an upload URL, PUTs `data` there
        with exactly the headers the API names, then appends the LargePayload entry (complete) with
        the same request id (the object's key is derived from it). The options are `append`'s.

        If it stops after the upload (an error at complete), resume with `complete_payload` and the
        same request id: a new upload URL for it is refused, since a payload never changes."""
        rid = request_id or self._new_request_id()
        upload = self.create_payload(log_id, rid)
        self.upload_payload(upload, data)
        if resume is None:
            resume = request_id is not None and position is not None
        result = self.complete_payload(log_id, cell, request_id=rid, position=position, max_rebases=max_rebases, resume=resume)
        return result if result.payload_key else replace(result, payload_key=upload.object_key)

    def create_payload(self, log_id: str, request_id: str) -> PayloadUpload:
        """POST /logs/{id}/payloads: where to upload the value of `request_id` (reads and presigns; safe to repeat)."""
        what = f"create payload {log_id}/{request_id}"
        body = json.dumps({"request_id": request_id}).encode()
        retries = 0
        while True:
            try:
                response = self._call_api("POST", self._url(log_id, "/payloads"), body)
            except UNANSWERED as err:
                failure: str | int = f"{type(err).__name__}: {err}"
            else:
                if response.status == 200:
                    return self._payload_upload(response, what)
                if response.status == 409:
                    raise PayloadConflictError(f"{what}: {_message(response)}", status=409)
                if not _retryable(response.status):
                    raise self._refuse(response, what)
                failure = response.status
            retries += 1
            if retries > self.max_retries:
                raise UnavailableError(f"{what}: no answer after {retries} tries (last: {failure})", request_id=request_id)
            self._pause(retries)

    @staticmethod
    def _payload_upload(response: HttpResponse, what: str) -> PayloadUpload:
        document = _json_object(response, what)
        headers, url, key = document.get("headers"), document.get("upload_url"), document.get("object_key")
        if not (isinstance(url, str) and isinstance(key, str) and isinstance(headers, dict)):
            raise ProtocolError(f"{what}: the answer has no upload_url, object_key or headers", status=response.status)
        return PayloadUpload(
            object_key=key,
            upload_url=url,
            method=str(document.get("method") or "PUT"),
            headers={str(name): str(value) for name, value in headers.items()},
            expires_in=_int(document.get("expires_in")) or 0,
        )

    def upload_payload(self, upload: PayloadUpload, data: bytes) -> None:
        """PUTs `data` to the presigned URL with exactly `upload.headers` (not signed again: the URL is).

        The URL only creates the object (If-None-Match: *). A retry after a PUT that got no answer
        and that S3 now refuses with 412 finds the first PUT's object: it is done."""
        what = f"upload payload {upload.object_key}"
        request = HttpRequest(upload.method, upload.upload_url, dict(upload.headers), bytes(data))
        retries = 0
        unanswered = False
        while True:
            try:
                response = self._transport(request, timeout=self.timeout)
            except UNANSWERED as err:
                failure: str | int = f"{type(err).__name__}: {err}"
            else:
                status = response.status
                if 200 <= status < 300 or (status == 412 and unanswered):
                    return
                if status == 412:
                    raise PayloadConflictError(f"{what}: the object exists already (412): {_message(response)}", status=412)
                if status in (401, 403):
                    raise AuthError(f"{what}: S3 refused the presigned URL (HTTP {status}; expired?): {_message(response)}", status=status)
                if status != 409 and not _retryable(status):  # 409: S3's ConditionalRequestConflict, a concurrent create
                    raise self._refuse(response, what)
                failure = status
            unanswered = True  # a 5xx, 409 or no answer: the object may have been written
            retries += 1
            if retries > self.max_retries:
                raise UnavailableError(f"{what}: no answer after {retries} tries (last: {failure})")
            self._pause(retries)

    def complete_payload(
        self,
        log_id: str,
        cell: str,
        *,
        request_id: str,
        position: int | None = None,
        max_rebases: int | None = None,
        resume: bool | None = None,
    ) -> AppendResult:
        """Appends the LargePayload entry that makes the uploaded value of `request_id` the value of
        `cell`: the last step of `append_large`, and how to resume it. The options are `append`'s."""

        def body_at(rid: str, at: int) -> dict[str, Any]:
            return {"request_id": rid, "position": at, "cell": cell}

        return self._append(log_id, "/payloads/complete", body_at, position, request_id, max_rebases, resume)

    def _append(
        self,
        log_id: str,
        suffix: str,
        body_at: Callable[[str, int], dict[str, Any]],
        position: int | None,
        request_id: str | None,
        max_rebases: int | None,
        resume: bool | None,
    ) -> AppendResult:
        """The append loop (module doc, "Request ids and positions")."""
        rid = request_id or self._new_request_id()
        at = position if position is not None else (self.known_next_position(log_id) or 1)
        bound = self.max_rebases if max_rebases is None else max_rebases
        url = self._url(log_id, suffix)
        # Could an earlier send of (rid, at) be stored or still in flight? Yes after an unanswered send,
        # and for a caller that names both (it may be resuming).
        unsure = (request_id is not None and position is not None) if resume is None else resume
        passed = False  # the client has seen the log's next position beyond `at`
        rebases = retries = 0
        while True:
            what = f"append {log_id}@{at} request {rid}"
            try:
                body = json.dumps(body_at(rid, at), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError as err:
                raise RefusedError(f"{what}: the event is not valid Unicode text ({err.reason})") from err
            sent_after_passed = passed
            try:
                response = self._call_api("POST", url, body)
            except UNANSWERED as err:
                failure: str | int = f"{type(err).__name__}: {err}"
            else:
                status = response.status
                if status in (200, 201):
                    return self._appended(response, what, log_id, at, rid, rebases, retries)
                if status == 409:
                    document = _json_object(response, what)
                    next_position = _int(document.get("next_position"))
                    if next_position is None:  # not a position conflict (complete: the payload was not uploaded)
                        raise PayloadConflictError(f"{what}: {_message(response)}", status=409)
                    self._learn_next_position(log_id, next_position)
                    if not unsure or sent_after_passed:  # proof: `at` does not hold this request, and never will
                        if rebases >= bound:
                            raise AppendConflictError(
                                f"{what}: conflict after {rebases} rebases ({_message(response)}); nothing was appended",
                                next_position=next_position,
                                request_id=rid,
                                position=at,
                                rebases=rebases,
                            )
                        rebases += 1
                        at, unsure, passed = next_position, False, False
                        continue
                    if next_position > at:  # confirm: the API now answers from the entry at `at`
                        passed = True
                        continue
                    failure = f"409 with next_position {next_position}, while an earlier send may still land at {at}"
                elif _retryable(status):
                    failure = status
                else:
                    raise self._refuse(response, what)
            unsure = True
            retries += 1
            if retries > self.max_retries:
                raise UnavailableError(
                    f"{what}: no answer after {retries} tries (last: {failure}); it may have been appended:"
                    f" send it again with request id {rid} and position {at} to find out",
                    status=failure if isinstance(failure, int) else None,
                    request_id=rid,
                    position=at,
                )
            self._pause(retries)

    def _appended(self, response: HttpResponse, what: str, log_id: str, at: int, rid: str, rebases: int, retries: int) -> AppendResult:
        document = _json_object(response, what)
        position = _int(document.get("position"))
        if position != at or document.get("request_id", rid) != rid:
            raise ProtocolError(
                f"{what}: the API answered for position {position} request {document.get('request_id')}", status=response.status
            )
        self._learn_next_position(log_id, at + 1)
        payload = document.get("payload_key")
        return AppendResult(
            log_id=log_id,
            position=at,
            request_id=rid,
            duplicate=bool(document.get("duplicate", response.status == 200)),
            rebases=rebases,
            retries=retries,
            payload_key=payload if isinstance(payload, str) else None,
        )

    # --- reading --------------------------------------------------------------------------------

    def snapshot_page(self, log_id: str, after: str | None = None, chunk: int | None = None) -> SnapshotPage:
        """One page of GET /logs/{id}/snapshot: the latest snapshot, with the URLs of its chunks from
        `chunk` on (a previous page's snapshot.next_chunk), and a page of the entries after `after` (a
        previous page's next_after), as many of each as fit the API's answer."""
        what = f"read snapshot of {log_id}"
        query = {"after": after} if after is not None else {}
        if chunk:
            query["chunk"] = str(chunk)
        response = self._read(self._url(log_id, "/snapshot", query or None), what)
        if response.status == 404:
            document = _json_object(response, what) if response.body.startswith(b"{") else {}
            if "error" in document:
                raise LogNotFoundError(f"{what}: {document['error']}", status=404)
        if response.status != 200:
            raise self._refuse(response, what)
        document = _json_object(response, what)
        next_position = _int(document.get("next_position"))
        entries = document.get("entries")
        next_after = document.get("next_after")
        if next_position is None or not isinstance(entries, list) or not (next_after is None or isinstance(next_after, str)):
            raise ProtocolError(f"{what}: the answer has no next_position, entries or next_after", status=200)
        self._learn_next_position(log_id, next_position)
        raw = document.get("snapshot")
        return SnapshotPage(
            log_id=log_id,
            next_position=next_position,
            snapshot=self._snapshot_info(raw, what) if raw is not None else None,
            entries=tuple(entry for entry in entries if isinstance(entry, dict)),
            next_after=next_after,
        )

    @staticmethod
    def _snapshot_info(raw: Any, what: str) -> SnapshotInfo:
        try:
            urls = tuple(str(url) for url in raw["chunk_urls"])
            next_chunk = raw.get("next_chunk")
            return SnapshotInfo(
                number=int(raw["number"]),
                cut=int(raw["cut"]),
                cells=int(raw["cells"]),
                digest=str(raw["digest"]),
                root_url=str(raw["root_url"]),
                chunk_urls=urls,
                chunks=int(raw.get("chunks", len(urls))),
                first_chunk=int(raw.get("first_chunk", 0)),
                next_chunk=None if next_chunk is None else int(next_chunk),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ProtocolError(f"{what}: the snapshot is missing {err}", status=200) from err

    def snapshot_pages(self, log_id: str, after: str | None = None) -> Iterator[SnapshotPage]:
        """Every page, following next_after and the snapshot's next_chunk until the API gives neither.

        When a newer snapshot shows up on a page, its chunk URLs are asked for from its first chunk; once
        a snapshot's URLs are all read, the next pages ask past its last chunk, so they carry entries only.
        Each entry is on one page only: the next page always asks after the entries this one gave."""
        chunk: int | None = None
        number: int | None = None
        while True:
            page = self.snapshot_page(log_id, after, chunk)
            yield page
            if page.next_after is not None:
                if after is not None and _seq(page.next_after) <= _seq(after):
                    raise ProtocolError(f"read snapshot of {log_id}: next_after {page.next_after} does not move past {after}")
                after = page.next_after
            elif page.entries:  # no more entries for now: later pages ask for the ones appended after these
                after = str(page.entries[-1].get("seq"))
            snapshot = page.snapshot
            if snapshot is not None and snapshot.number != number:
                number = snapshot.number
                if snapshot.first_chunk != 0:  # built since the last page: read its chunk URLs from the start
                    chunk = 0
                    continue
            next_chunk = snapshot.next_chunk if snapshot is not None else None
            if page.next_after is None and next_chunk is None:
                return
            if snapshot is not None:
                if next_chunk is not None and next_chunk <= snapshot.first_chunk:
                    raise ProtocolError(f"read snapshot of {log_id}: next_chunk {next_chunk} does not move past {snapshot.first_chunk}")
                chunk = next_chunk if next_chunk is not None else snapshot.chunks

    def read_snapshot(self, log_id: str) -> LatestSnapshot:
        """The latest snapshot, with the URLs of all its chunks, and every entry after it, over all pages.

        A snapshot built while the pages are read shows up on a later page; the result is then that
        snapshot with the entries after its cut (the earlier pages' entries it covers are dropped)."""
        pages = list(self.snapshot_pages(log_id))
        latest = pages[-1]
        start = Decimal(latest.snapshot.cut) + Decimal("0.5") if latest.snapshot else Decimal(0)
        entries: dict[Decimal, dict[str, Any]] = {}
        for page in pages:
            for entry in page.entries:
                seq = _seq(str(entry.get("seq")))
                if seq > start:
                    entries[seq] = entry
        return LatestSnapshot(
            log_id=log_id,
            next_position=max(page.next_position for page in pages),
            snapshot=_all_chunk_urls(latest.snapshot, pages) if latest.snapshot else None,
            entries=tuple(entries[seq] for seq in sorted(entries)),
        )

    def snapshot_cells(self, snapshot: SnapshotInfo) -> list[dict[str, Any]]:
        """The snapshot's cells in row-major order (`cell`, and `value`, or `payload` and `size` for a
        large value), downloaded from its chunk URLs and checked against its chained SHA-256 digest."""
        digest = ""
        cells: list[dict[str, Any]] = []
        for index, url in enumerate(snapshot.chunk_urls):
            what = f"download chunk {index} of snapshot {snapshot.number}"
            response = self._read(url, what, signed=False)
            if response.status != 200:
                raise (AuthError if response.status in (401, 403) else ProtocolError)(
                    f"{what}: HTTP {response.status}: {_message(response)}", status=response.status
                )
            digest = hashlib.sha256(f"{digest}:{hashlib.sha256(response.body).hexdigest()}".encode()).hexdigest()
            try:
                cells.extend(json.loads(line) for line in response.body.splitlines() if line.strip())
            except ValueError as err:
                raise ProtocolError(f"{what}: not NDJSON") from err
        if digest != snapshot.digest or len(cells) != snapshot.cells:
            raise ProtocolError(
                f"snapshot {snapshot.number}: {len(cells)} cells with digest {digest or '(none)'};"
                f" the root says {snapshot.cells} cells with digest {snapshot.digest or '(none)'}"
            )
        return cells


def _all_chunk_urls(snapshot: SnapshotInfo, pages: Sequence[SnapshotPage]) -> SnapshotInfo:
    """`snapshot` with the URLs of every one of its chunks, gathered from the pages that list them."""
    urls: dict[int, str] = {}
    for page in pages:
        if page.snapshot is not None and page.snapshot.number == snapshot.number:
            urls.update(enumerate(page.snapshot.chunk_urls, start=page.snapshot.first_chunk))
    if sorted(urls) != list(range(snapshot.chunks)):
        raise ProtocolError(f"snapshot {snapshot.number}: the pages listed {len(urls)} of its {snapshot.chunks} chunk URLs")
    return replace(snapshot, chunk_urls=tuple(urls[index] for index in range(snapshot.chunks)), first_chunk=0, next_chunk=None)


def _entry_body(event: dict[str, str]) -> Callable[[str, int], dict[str, Any]]:
    def body_at(request_id: str, position: int) -> dict[str, Any]:
        return {"request_id": request_id, "position": position, "event": event}

    return body_at


def _seq(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation as err:
        raise ProtocolError(f"{text!r} is not a log seq") from err


# --- outputs file -----------------------------------------------------------------------------


def api_url_from_outputs_file(path: Path | str) -> str:
    """The event log's ApiUrl from a CDK outputs file (`cdk deploy --outputs-file`: stack name ->
    {output: value}), from the one stack whose name ends in -EventLog."""
    path = Path(path)
    try:
        document = json.loads(path.read_bytes())
    except FileNotFoundError as err:
        raise ConfigurationError(f"no outputs file {path.absolute()}: run `make deploy ENV=<env>` (it writes it), or pass --url") from err
    except OSError as err:
        raise ConfigurationError(f"cannot read outputs file {path}: {err.strerror or err}") from err
    except ValueError as err:
        raise ConfigurationError(f"outputs file {path} is not valid JSON ({err})") from err
    if not isinstance(document, dict) or not all(isinstance(outputs, dict) for outputs in document.values()):
        raise ConfigurationError(f"outputs file {path} is not a CDK outputs file (a JSON object of stack name -> outputs)")
    stacks = sorted(str(name) for name in document if str(name).endswith(EVENT_LOG_STACK_SUFFIX))
    if len(stacks) != 1:
        found = ", ".join(sorted(map(str, document))) or "none"
        raise ConfigurationError(
            f"outputs file {path} has {len(stacks)} stacks ending in {EVENT_LOG_STACK_SUFFIX} (it has: {found}); pass --url"
        )
    url = document[stacks[0]].get(contract.OUTPUT_API_URL)
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"stack {stacks[0]} in outputs file {path} has no {contract.OUTPUT_API_URL} output; pass --url")
    return url


# --- CLI --------------------------------------------------------------------------------------

PROG = "onceflow-event-log"
USAGE_EXIT_STATUS = 2


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after the command's name."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--url", help="the event-log API base URL (the EventLog stack's ApiUrl)", **default)
    parser.add_argument(
        "--env",
        metavar="NAME",
        help=f"read the ApiUrl from ./{OUTPUTS_FILE.format(env='NAME')} (what `make deploy ENV=NAME` writes)",
        **default,
    )
    parser.add_argument("--outputs-file", metavar="PATH", help="with --env: read this CDK outputs file instead", **default)
    parser.add_argument("--region", help="the AWS region (default: AWS_DEFAULT_REGION, the profile's, AWS_REGION, or the URL's)", **default)
    parser.add_argument(
        "--profile", help="a named profile from the AWS config files (default: AWS_PROFILE or the default chain)", **default
    )
    parser.add_argument("--timeout", type=float, help=f"seconds to wait for each answer (default {DEFAULT_TIMEOUT_SECONDS:g})", **default)
    parser.add_argument("--max-retries", type=int, help=f"sends without an answer to retry (default {DEFAULT_MAX_RETRIES})", **default)


def _add_append_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--position", type=int, help="the position to append at (default: the log's next one, found by the first 409)")
    parser.add_argument(
        "--request-id", help="the request's id (default: a new uuid4); with --position, resumes an append whose outcome is unknown"
    )
    parser.add_argument("--max-rebases", type=int, help=f"409s to rebase on before giving up (default {DEFAULT_MAX_REBASES}; 0: never)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Append to an onceflow event log and read its latest snapshot, with SigV4-signed requests. Prints JSON.",
        epilog="Exit status: 0 done; 1 refused, conflict, not found or no answer; 2 usage, configuration or credentials.",
    )
    _add_common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    append = commands.add_parser("append", help="set a cell (SetCell) at the log's next position")
    append.add_argument("log_id")
    append.add_argument("cell", help="A1 notation, such as B12")
    append.add_argument("value")
    _add_append_options(append)
    clear = commands.add_parser("clear", help="clear a cell (ClearCell) at the log's next position")
    clear.add_argument("log_id")
    clear.add_argument("cell")
    _add_append_options(clear)
    large = commands.add_parser("append-large", help="set a cell to the contents of FILE through a presigned upload")
    large.add_argument("log_id")
    large.add_argument("cell")
    large.add_argument("file", type=Path, help="the value's bytes ('-' for stdin)")
    _add_append_options(large)
    snapshot = commands.add_parser("snapshot", help="the latest snapshot and every entry after it")
    snapshot.add_argument("log_id")
    snapshot.add_argument("--cells", action="store_true", help="also download the snapshot's cells (checked against its digest)")
    for command in (append, clear, large, snapshot):
        _add_common(command, suppress=True)
    return parser


def _client_from_args(args: argparse.Namespace, transport: Transport | None, signer: Signer | None) -> EventLogClient:
    if args.url and args.env:
        raise ConfigurationError("give --url or --env, not both")
    if args.outputs_file and not args.env:
        raise ConfigurationError("--outputs-file goes with --env")
    session: boto3.session.Session | None = None
    if args.env:
        path = Path(args.outputs_file or OUTPUTS_FILE.format(env=args.env))
        if args.env == LOCAL_ENV and not path.exists():
            raise ConfigurationError(missing_file(path))
        url = api_url_from_outputs_file(path)
        session = _local_session(path, args)
    elif args.url:
        url = args.url
    else:
        raise ConfigurationError(f"give --url URL, or --env NAME to read it from {OUTPUTS_FILE.format(env='NAME')}")
    options: dict[str, Any] = {}
    if args.timeout is not None:
        options["timeout"] = args.timeout
    if args.max_retries is not None:
        options["max_retries"] = args.max_retries
    if session is not None:
        return EventLogClient(url, region=args.region, session=session, transport=transport, signer=signer, **options)
    return EventLogClient(url, region=args.region, profile=args.profile, transport=transport, signer=signer, **options)


def _local_session(path: Path, args: argparse.Namespace) -> boto3.session.Session | None:
    """For an outputs file of `make serve`: a session with its region and dummy key pair where the
    command line and the environment name none (onceflow/clients/local.py); None for a deployed one's."""
    try:
        cloud = running_local_cloud(json.loads(path.read_bytes()), path)
    except LocalCloudError as err:
        raise ConfigurationError(str(err)) from err
    if cloud is None:
        return None
    import boto3
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.session.Session(**cloud.session_options(region=args.region, profile=args.profile))
    except ProfileNotFound as err:
        raise ConfigurationError(str(err)) from err


def _run(args: argparse.Namespace, client: EventLogClient) -> dict[str, Any]:
    if args.command == "snapshot":
        latest = client.read_snapshot(args.log_id)
        document = latest.to_json()
        if args.cells:
            document["cells"] = client.snapshot_cells(latest.snapshot) if latest.snapshot else []
        return document
    # Resuming when the command line names both; the request id is made here when it does not, so
    # that an interrupted append can say which request to look for.
    resume = args.request_id is not None and args.position is not None
    args.request_id = args.request_id or str(uuid.uuid4())
    named: dict[str, Any] = {"position": args.position, "request_id": args.request_id, "max_rebases": args.max_rebases, "resume": resume}
    if args.command == "append":
        return asdict(client.append(args.log_id, args.cell, args.value, **named))
    if args.command == "clear":
        return asdict(client.clear(args.log_id, args.cell, **named))
    try:
        data = sys.stdin.buffer.read() if str(args.file) == "-" else args.file.read_bytes()
    except OSError as err:
        raise ConfigurationError(f"cannot read {args.file}: {err.strerror or err}") from err
    return asdict(client.append_large(args.log_id, args.cell, data, **named))


def main(argv: Sequence[str] | None = None, *, transport: Transport | None = None, signer: Signer | None = None) -> int:
    """The CLI: JSON on stdout; one line on stderr for an error (exit 2: usage, configuration or
    credentials; 1: the rest). `transport` and `signer` replace the client's (tests)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (missing := extra.missing_line(PROG)) is not None:
        print(missing, file=sys.stderr)
        return extra.MISSING_EXIT_STATUS
    try:
        with _client_from_args(args, transport, signer) as client:
            document = _run(args, client)
    except (ConfigurationError, AuthError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    except EventLogError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        request_id = getattr(args, "request_id", None)
        pending = f"; the append of request id {request_id} may have been made (its entry carries that request_id)" if request_id else ""
        print(f"{PROG}: interrupted{pending}", file=sys.stderr)
        return 130
    print(json.dumps(document, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
