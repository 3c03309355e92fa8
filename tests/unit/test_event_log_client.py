"""onceflow.clients.event_log against a fake transport (no network): signing, rebases, retries
with the same request, typed errors, the large-payload flow, snapshot paging, and the CLI.

The fake API follows the event-log API's answers (runtime/event_log/service.py): the entry key is
the position; the same request again is 200 duplicate; another request at a taken position, or a
position ahead of the log, is 409 with next_position; the same request id with another event is
422. It checks every API request's SigV4 signature by computing it again with botocore."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from onceflow.clients.event_log import (
    AppendConflictError,
    AuthError,
    ConfigurationError,
    EventLogClient,
    HttpRequest,
    HttpResponse,
    LogNotFoundError,
    PayloadConflictError,
    ProtocolError,
    RefusedError,
    SigV4Signer,
    SnapshotInfo,
    UnavailableError,
    api_url_from_outputs_file,
    main,
)

BASE = "https://abc123.execute-api.eu-west-1.amazonaws.com/"
HOST = "abc123.execute-api.eu-west-1.amazonaws.com"
BUCKET_HOST = "bucket.s3.eu-west-1.amazonaws.com"
REGION = "eu-west-1"
CREDENTIALS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "the-session-token")
PENDING_HEADERS = {"x-amz-tagging": "onceflow-pending=true", "If-None-Match": "*"}


def header(request: HttpRequest, name: str) -> str | None:
    found = [value for key, value in request.headers.items() if key.lower() == name.lower()]
    assert len(found) <= 1, f"{name} sent {len(found)} times"
    return found[0] if found else None


def authorization(request: HttpRequest) -> dict[str, str]:
    value = header(request, "authorization")
    assert value is not None and value.startswith("AWS4-HMAC-SHA256 "), value
    return dict(part.strip().split("=", 1) for part in value.removeprefix("AWS4-HMAC-SHA256 ").split(","))


def botocore_signature(request: HttpRequest, credentials: Credentials = CREDENTIALS, region: str = REGION) -> str:
    """What botocore's SigV4Auth computes for this method, URL, headers and body at the request's X-Amz-Date."""
    headers = {name: value for name, value in request.headers.items() if name.lower() != "authorization"}
    aws_request = AWSRequest(method=request.method, url=request.url, headers=headers, data=request.body)
    aws_request.context["timestamp"] = header(request, "x-amz-date")
    auth = SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region)
    return auth.signature(auth.string_to_sign(aws_request, auth.canonical_request(aws_request)), aws_request)


def json_response(status: int, document: dict[str, Any]) -> HttpResponse:
    return HttpResponse(status, json.dumps(document).encode(), {"content-type": "application/json"})


def chained_digest(chunks: list[bytes]) -> str:
    digest = ""
    for body in chunks:
        digest = hashlib.sha256(f"{digest}:{hashlib.sha256(body).hexdigest()}".encode()).hexdigest()
    return digest


@dataclass
class FakeApi:
    """The event-log API and the bucket's presigned URLs, in memory."""

    page_limit: int = 1000
    chunk_page_limit: int = 1000  # chunk URLs per page
    verify_signatures: bool = True
    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    uploads: dict[str, bytes] = field(default_factory=dict)
    downloads: dict[str, bytes] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[HttpRequest] = field(default_factory=list)  # what reached it
    sent: list[HttpRequest] = field(default_factory=list)  # what the client sent (Faults records it)

    def __call__(self, request: HttpRequest, *, timeout: float) -> HttpResponse:
        self.requests.append(request)
        parts = urlsplit(request.url)
        if parts.hostname == BUCKET_HOST:
            return self.bucket(request)
        assert parts.hostname == HOST
        if self.verify_signatures:
            assert authorization(request)["Signature"] == botocore_signature(request)
        body = json.loads(request.body) if request.body else {}
        if match := re.fullmatch(r"/logs/([^/]+)/entries", parts.path):
            return self.append(match[1], body["request_id"], body["position"], body["event"])
        if match := re.fullmatch(r"/logs/([^/]+)/payloads", parts.path):
            return self.create_upload(match[1], body["request_id"])
        if match := re.fullmatch(r"/logs/([^/]+)/payloads/complete", parts.path):
            key = self.payload_key(match[1], body["request_id"])
            if key not in self.uploads:
                return json_response(409, {"error": "upload the payload to the URL from POST /payloads first (or it expired)"})
            event = {"kind": "LargePayload", "cell": body["cell"], "payload_key": key, "payload_bytes": len(self.uploads[key])}
            return self.append(match[1], body["request_id"], body["position"], event)
        if match := re.fullmatch(r"/logs/([^/]+)/snapshot", parts.path):
            query = parse_qs(parts.query)
            after = query.get("after", [None])[0]
            return self.read(match[1], Decimal(after) if after else None, int(query.get("chunk", ["0"])[0]))
        return json_response(404, {"message": "Not Found"})

    # --- the API's semantics --------------------------------------------------------------------

    def entries(self, log_id: str) -> list[dict[str, Any]]:
        return self.logs.setdefault(log_id, [])

    def append(self, log_id: str, request_id: str, position: int, event: dict[str, Any]) -> HttpResponse:
        entries = self.entries(log_id)
        next_position = len(entries) + 1
        if position < next_position:
            existing = entries[position - 1]
            if existing["request_id"] != request_id:
                return json_response(
                    409,
                    {
                        "error": f"position {position} holds another request; the next position is {next_position}",
                        "next_position": next_position,
                    },
                )
            if existing["event"] != event:
                return json_response(422, {"error": f"request_id {request_id} was used for a different event at position {position}"})
            return json_response(200, {"log_id": log_id, "position": position, "request_id": request_id, "duplicate": True})
        if position > next_position:
            return json_response(409, {"error": f"position {position} is ahead of the log", "next_position": next_position})
        entries.append({"request_id": request_id, "event": event})
        return json_response(201, {"log_id": log_id, "position": position, "request_id": request_id, "duplicate": False})

    def other_writer_appends(self, log_id: str, count: int = 1) -> None:
        for _ in range(count):
            entries = self.entries(log_id)
            self.append(log_id, f"other-writer-{len(entries) + 1:04d}", len(entries) + 1, {"kind": "SetCell", "cell": "A1", "value": "x"})

    @staticmethod
    def payload_key(log_id: str, request_id: str) -> str:
        return f"payloads/{log_id}/{hashlib.sha256(request_id.encode()).hexdigest()[:32]}"

    def create_upload(self, log_id: str, request_id: str) -> HttpResponse:
        key = self.payload_key(log_id, request_id)
        if key in self.uploads:
            return json_response(409, {"error": f"the payload of request_id {request_id} is already uploaded and never changes"})
        url = f"https://{BUCKET_HOST}/{key}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=presigned"
        return json_response(200, {"object_key": key, "upload_url": url, "method": "PUT", "headers": PENDING_HEADERS, "expires_in": 900})

    def bucket(self, request: HttpRequest) -> HttpResponse:
        parts = urlsplit(request.url)
        if request.method == "GET":
            body = self.downloads.get(request.url)
            return HttpResponse(200, body) if body is not None else HttpResponse(404, b"<Error><Code>NoSuchKey</Code></Error>")
        assert request.method == "PUT"
        assert dict(request.headers) == PENDING_HEADERS, "the upload sends exactly the presigned headers"
        key = parts.path.lstrip("/")
        if key in self.uploads:
            return HttpResponse(
                412,
                b"<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions did not hold</Message></Error>",
            )
        self.uploads[key] = request.body
        return HttpResponse(200, b"")

    def read(self, log_id: str, after: Decimal | None, chunk: int = 0) -> HttpResponse:
        entries = self.entries(log_id)
        if not entries:
            return json_response(404, {"error": f"log {log_id} has no entries"})
        built = self.snapshots.get(log_id)
        snapshot = None
        if built:
            urls = built["chunk_urls"][chunk : chunk + self.chunk_page_limit]
            further = chunk + len(urls)
            snapshot = {
                **built,
                "chunks": len(built["chunk_urls"]),
                "first_chunk": chunk,
                "chunk_urls": urls,
                "next_chunk": further if further < len(built["chunk_urls"]) else None,
            }
        start = Decimal(built["cut"]) + Decimal("0.5") if built else Decimal(0)
        start = max(start, after or start)
        page = [(position, entry) for position, entry in enumerate(entries, 1) if position > start][: self.page_limit]
        public = [
            {
                "seq": str(position),
                "kind": entry["event"]["kind"],
                "position": position,
                "request_id": entry["request_id"],
                **entry["event"],
            }
            for position, entry in page
        ]
        next_after = str(page[-1][0]) if len(page) == self.page_limit else None
        document = {"log_id": log_id, "next_position": len(entries) + 1, "snapshot": snapshot, "entries": public, "next_after": next_after}
        return json_response(200, document)

    def sent_to_api(self, suffix: str = "") -> list[HttpRequest]:
        return [r for r in self.sent if urlsplit(r.url).hostname == HOST and urlsplit(r.url).path.endswith(suffix)]


Action = Callable[[HttpRequest, FakeApi], HttpResponse | None]


def drop(request: HttpRequest, api: FakeApi) -> HttpResponse | None:
    """A timeout before the API saw the request: nothing served."""
    raise TimeoutError("timed out (dropped)")


def lose(request: HttpRequest, api: FakeApi) -> HttpResponse | None:
    """The API serves the request; its answer is lost (a timeout)."""
    api(request, timeout=1)
    raise TimeoutError("timed out (answer lost)")


def status_before(status: int) -> Action:
    def answer(request: HttpRequest, api: FakeApi) -> HttpResponse:
        return json_response(status, {"message": f"HTTP {status}"})

    return answer


def status_after(status: int) -> Action:
    """The write happens, then the function fails (a crash after the transaction): a 5xx."""

    def answer(request: HttpRequest, api: FakeApi) -> HttpResponse:
        api(request, timeout=1)
        return json_response(status, {"message": "Internal Server Error"})

    return answer


def other_writer_first(request: HttpRequest, api: FakeApi) -> HttpResponse | None:
    """Another writer takes the log's next position just before this request arrives."""
    log_id = urlsplit(request.url).path.split("/")[2]
    api.other_writer_appends(log_id)
    return None


@dataclass
class Faults:
    """The client's transport: records each request in api.sent, and call n takes actions[n]
    (None, or no action left: the fake API serves it)."""

    api: FakeApi
    actions: list[Action | None] = field(default_factory=list)

    def __call__(self, request: HttpRequest, *, timeout: float) -> HttpResponse:
        calls = len(self.api.sent)
        self.api.sent.append(request)
        action = self.actions[calls] if calls < len(self.actions) else None
        if action is not None and (answer := action(request, self.api)) is not None:
            return answer
        return self.api(request, timeout=timeout)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make_client(
    api: FakeApi, actions: list[Action | None] | None = None, sleeps: list[float] | None = None, **options: Any
) -> EventLogClient:
    pauses = sleeps if sleeps is not None else []
    options.setdefault("signer", SigV4Signer(CREDENTIALS, REGION))
    return EventLogClient(BASE, transport=Faults(api, actions or []), sleep=pauses.append, rng=random.Random(7), **options)


def sent_bodies(api: FakeApi, suffix: str = "/entries") -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in api.sent_to_api(suffix)]


# --- signing ----------------------------------------------------------------------------------


def test_every_request_is_signed_by_botocore_over_the_exact_body(api: FakeApi) -> None:
    # Given a client with session credentials
    client = make_client(api)
    # When it appends and reads
    client.append("budget-2027", "B12", "42 €")
    client.read_snapshot("budget-2027")
    post, get = api.sent
    for request in (post, get):
        parts = authorization(request)
        # Then each request carries a SigV4 signature for execute-api in the region, with the session token
        date = header(request, "x-amz-date")
        assert date is not None and re.fullmatch(r"\d{8}T\d{6}Z", date)
        assert parts["Credential"] == f"AKIDEXAMPLE/{date[:8]}/{REGION}/execute-api/aws4_request"
        assert header(request, "x-amz-security-token") == "the-session-token"
        assert header(request, "host") == HOST
        assert {"host", "x-amz-date", "x-amz-security-token"} <= set(parts["SignedHeaders"].split(";"))
        # and the signature is botocore's over exactly what was sent
        assert parts["Signature"] == botocore_signature(request)
    assert "content-type" in authorization(post)["SignedHeaders"].split(";")
    assert json.loads(post.body)["event"] == {"kind": "SetCell", "cell": "B12", "value": "42 €"}
    # and one byte more or less in the body would not match it
    tampered = replace(post, body=post.body.replace(b"42", b"43"))
    assert botocore_signature(tampered) != authorization(post)["Signature"]


def test_credentials_and_region_come_from_a_boto3_session(api: FakeApi) -> None:
    # Given a boto3 session with its own keys and region
    session = boto3.session.Session(aws_access_key_id="AKIDSESSION", aws_secret_access_key="secret", region_name="eu-central-1")
    api.verify_signatures = False
    client = EventLogClient(BASE, session=session, transport=api)
    # When the client signs a request
    client.append("sheet", "A1", "1")
    request = api.requests[0]
    # Then the session's key and region sign it (an explicit region would win over both)
    assert authorization(request)["Credential"].startswith("AKIDSESSION/")
    assert "/eu-central-1/execute-api/" in authorization(request)["Credential"]
    assert authorization(request)["Signature"] == botocore_signature(request, Credentials("AKIDSESSION", "secret"), "eu-central-1")


def test_without_a_configured_region_the_execute_api_url_names_it(api: FakeApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given no region in the environment or the config files
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    api.verify_signatures = False  # signed with the environment's credentials
    # When the client signs for an execute-api URL, the URL's region is used
    EventLogClient(BASE, transport=api).append("sheet", "A1", "1")
    assert f"/{REGION}/execute-api/" in authorization(api.requests[0])["Credential"]
    # and for another URL there is no region: a configuration error
    with pytest.raises(ConfigurationError, match="no AWS region"):
        EventLogClient("http://localhost:9999", transport=api).append("sheet", "A1", "1")
    # and AWS_REGION, when set, is the region like AWS_DEFAULT_REGION (botocore reads only the latter; the CDK CLI
    # and Lambda set the former)
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    EventLogClient(BASE, transport=api).append("sheet", "A2", "2")
    assert "/ap-south-1/execute-api/" in authorization(api.requests[-1])["Credential"]
    # and an unknown profile is a configuration error too
    with pytest.raises(ConfigurationError, match="nope"):
        EventLogClient(BASE, profile="nope", transport=api).append("sheet", "A1", "1")


# --- rebases ----------------------------------------------------------------------------------


def test_a_conflict_rebases_on_next_position_keeping_the_request_id(api: FakeApi) -> None:
    # Given a log that other writers took to position 3, and a client that has not seen it
    api.other_writer_appends("sheet", 3)
    client = make_client(api)
    # When it appends
    result = client.append("sheet", "B2", "7")
    # Then its first try at 1 was a 409 naming position 4, and it appended there with the same request id
    first, second = sent_bodies(api)
    assert (first["position"], second["position"]) == (1, 4)
    assert first["request_id"] == second["request_id"] == result.request_id
    assert (result.position, result.rebases, result.duplicate) == (4, 1, False)
    assert api.logs["sheet"][3]["request_id"] == result.request_id
    # and the next append goes straight to the next position
    assert client.append("sheet", "B3", "8").position == 5
    assert len(api.sent_to_api("/entries")) == 3


def test_rebases_are_bounded_then_a_typed_error_says_nothing_was_appended(api: FakeApi) -> None:
    # Given a log where another writer takes every position just before the client's request arrives
    client = make_client(api, [other_writer_first] * 10, max_rebases=2)
    # When the client appends
    with pytest.raises(AppendConflictError) as raised:
        client.append("sheet", "C1", "1")
    # Then it rebased twice (three sends) and gave up with the position it last tried and the next one
    error = raised.value
    assert (error.rebases, error.position, error.next_position, error.status) == (2, 3, 4, 409)
    assert [body["position"] for body in sent_bodies(api)] == [1, 2, 3]
    assert len({body["request_id"] for body in sent_bodies(api)}) == 1 == len({error.request_id})
    assert all(entry["request_id"].startswith("other-writer") for entry in api.logs["sheet"])


def test_max_rebases_zero_fails_on_the_first_conflict(api: FakeApi) -> None:
    # Given a log at position 2 and a caller that wants exactly position 1 (an edit made on the empty sheet)
    api.other_writer_appends("sheet", 1)
    # When it appends with no rebase allowed
    with pytest.raises(AppendConflictError) as raised:
        make_client(api).append("sheet", "A1", "1", position=1, max_rebases=0)
    # Then the conflict comes back at once
    assert (raised.value.rebases, raised.value.next_position) == (0, 2)
    assert len(api.sent) == 1


# --- retries ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "duplicate"),
    [(drop, False), (lose, True), (status_before(503), False), (status_after(500), True), (status_before(429), False)],
    ids=["timeout-before-the-api", "timeout-after-the-write", "503", "500-after-the-write", "429"],
)
def test_an_unanswered_append_is_retried_with_the_same_request_and_body(
    api: FakeApi, sleeps: list[float], fault: Action, duplicate: bool
) -> None:
    # Given a first send that gets no answer (the API may or may not have written it)
    client = make_client(api, [fault], sleeps)
    # When the client appends
    result = client.append("sheet", "D4", "x")
    # Then it sent the very same bytes again (same request id, same position) after a pause
    first, second = api.sent_to_api("/entries")
    assert first.body == second.body
    assert sleeps and all(pause >= 0 for pause in sleeps)
    # and the log holds the event once; a duplicate answer is counted as the success it is
    assert [entry["request_id"] for entry in api.logs["sheet"]] == [result.request_id]
    assert (result.position, result.duplicate, result.retries, result.rebases) == (1, duplicate, 1, 0)


def test_unanswered_sends_are_bounded_and_the_error_names_the_request_to_resume(api: FakeApi) -> None:
    # Given an API whose answers are all lost (it writes the first one)
    client = make_client(api, [lose, lose, lose], max_retries=2)
    # When the client appends, it gives up after three sends
    with pytest.raises(UnavailableError) as raised:
        client.append("sheet", "E5", "y")
    error = raised.value
    assert (error.position, len(api.sent)) == (1, 3)
    assert "send it again with request id" in str(error)
    # When the caller resumes with the request id and the position
    result = client.append("sheet", "E5", "y", request_id=error.request_id, position=error.position)
    # Then the answer is the duplicate: the event is in the log once
    assert (result.duplicate, result.position) == (True, 1)
    assert len(api.logs["sheet"]) == 1


def test_a_409_after_an_unanswered_send_is_confirmed_before_any_rebase(api: FakeApi) -> None:
    # Given a first send that is still in flight when the client gives up on it, and a retry that
    # the API answers with 409 "the log kept moving" because that first copy landed meanwhile
    in_flight: list[HttpRequest] = []

    def hold(request: HttpRequest, api: FakeApi) -> HttpResponse | None:
        in_flight.append(request)
        raise TimeoutError("timed out")

    def first_copy_lands(request: HttpRequest, api: FakeApi) -> HttpResponse:
        api(in_flight[0], timeout=1)
        return json_response(409, {"error": "the log kept moving; retry at position 2", "next_position": 2})

    client = make_client(api, [hold, first_copy_lands])
    # When the client appends
    result = client.append("sheet", "F6", "z")
    # Then it did not rebase on that 409: it sent the same request again, and the API named it a duplicate
    assert [body["position"] for body in sent_bodies(api)] == [1, 1, 1]  # the held copy landing, the retry, the confirmation
    assert (result.position, result.duplicate, result.rebases) == (1, True, 0)
    assert len(api.logs["sheet"]) == 1  # a rebase would have appended it a second time, at 2


def test_a_409_after_an_unanswered_send_rebases_once_confirmed(api: FakeApi) -> None:
    # Given a first send that never reached the API, and another writer taking position 1 meanwhile
    client = make_client(api, [drop, other_writer_first])
    # When the client appends
    result = client.append("sheet", "G7", "w")
    # Then the 409 was confirmed by one more send at 1 before the rebase to 2
    assert [body["position"] for body in sent_bodies(api)] == [1, 1, 1, 2]  # dropped, 409, confirmed 409, appended
    assert (result.position, result.rebases, result.retries) == (2, 1, 1)
    assert [entry["request_id"] for entry in api.logs["sheet"]] == ["other-writer-0001", result.request_id]


def test_a_caller_resuming_with_request_id_and_position_gets_a_confirmed_rebase(api: FakeApi) -> None:
    # Given position 1 taken by another writer, and a caller resuming a request it may have sent before
    api.other_writer_appends("sheet")
    result = make_client(api).append("sheet", "H8", "v", request_id="edit-7f3a9c21", position=1)
    # Then the first 409 was confirmed before the rebase
    assert [body["position"] for body in sent_bodies(api)] == [1, 1, 2]
    assert (result.request_id, result.position) == ("edit-7f3a9c21", 2)
    # and resume=False skips the confirmation
    api.other_writer_appends("sheet")
    make_client(api).append("sheet", "H9", "u", request_id="edit-7f3a9c22", position=3, resume=False)
    assert [body["position"] for body in sent_bodies(api)][3:] == [3, 4]


# --- typed errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (400, RefusedError, "event.value must be a string for SetCell"),
        (413, RefusedError, "the request body is 70000 bytes; the limit is 65536"),
        (422, RefusedError, "request_id edit-1 was used for a different event at position 1"),
        (403, AuthError, "The security token included in the request is invalid."),
        (401, AuthError, "Unauthorized"),
        (404, ConfigurationError, "Not Found"),
    ],
)
def test_refusals_are_typed_and_carry_the_apis_message(api: FakeApi, status: int, error: type[Exception], message: str) -> None:
    # Given an API that refuses the request
    key = "message" if status in (401, 403, 404) else "error"

    def refuse(request: HttpRequest, api: FakeApi) -> HttpResponse:
        return json_response(status, {key: message})

    # When the client appends, the refusal is raised at once, typed, with the API's message
    with pytest.raises(error, match=re.escape(message)) as raised:
        make_client(api, [refuse]).append("sheet", "A1", "1")
    assert raised.value.status == status  # type: ignore[attr-defined]
    assert len(api.sent) == 1


def test_the_same_request_id_with_another_event_is_refused(api: FakeApi) -> None:
    client = make_client(api)
    client.append("sheet", "A1", "one", request_id="edit-00000001", position=1)
    with pytest.raises(RefusedError, match="used for a different event") as raised:
        client.append("sheet", "A1", "two", request_id="edit-00000001", position=1)
    assert raised.value.status == 422


def test_text_that_is_not_unicode_is_refused_before_sending(api: FakeApi) -> None:
    with pytest.raises(RefusedError, match="not valid Unicode"):
        make_client(api).append("sheet", "A1", "\ud800")
    assert api.sent == []


# --- large payloads ---------------------------------------------------------------------------


def test_the_large_payload_flow_puts_with_exactly_the_presigned_headers(api: FakeApi) -> None:
    # Given a value too large for an entry
    data = bytes(range(256)) * 64
    client = make_client(api)
    # When the client appends it
    result = client.append_large("sheet", "Z9", data)
    create, put, complete = api.sent
    # Then it asked for an upload URL for its request id
    assert urlsplit(create.url).path == "/logs/sheet/payloads"
    assert json.loads(create.body) == {"request_id": result.request_id}
    # and PUT the bytes to that URL with exactly the headers the API named (not signed again)
    upload_url = json.loads(FakeApi().create_upload("sheet", result.request_id).body)["upload_url"]
    assert (put.method, put.url, dict(put.headers), put.body) == ("PUT", upload_url, PENDING_HEADERS, data)
    # and completed with the same request id, the position and the cell
    assert urlsplit(complete.url).path == "/logs/sheet/payloads/complete"
    assert json.loads(complete.body) == {"request_id": result.request_id, "position": 1, "cell": "Z9"}
    assert result.payload_key == FakeApi.payload_key("sheet", result.request_id)
    assert api.logs["sheet"][0]["event"]["kind"] == "LargePayload"


def test_a_put_whose_answer_was_lost_is_done_when_s3_refuses_the_second_copy(api: FakeApi) -> None:
    # Given a PUT that S3 stored but whose answer was lost
    client = make_client(api, [None, lose])
    # When the client appends the large value
    result = client.append_large("sheet", "Z1", b"v" * 5000)
    # Then the retried PUT met If-None-Match (412) and the flow went on to complete
    assert [request.method for request in api.sent] == ["POST", "PUT", "PUT", "POST"]
    assert result.position == 1
    assert api.uploads[result.payload_key or ""] == b"v" * 5000


def test_a_412_on_the_first_put_is_a_payload_conflict(api: FakeApi) -> None:
    def exists(request: HttpRequest, api: FakeApi) -> HttpResponse:
        return HttpResponse(412, b"<Error><Code>PreconditionFailed</Code><Message>pre-conditions</Message></Error>")

    with pytest.raises(PayloadConflictError, match="PreconditionFailed"):
        make_client(api, [None, exists]).append_large("sheet", "Z2", b"w" * 5000)
    assert api.logs.get("sheet", []) == []


def test_a_completed_payload_cannot_be_uploaded_again_and_is_resumed_by_complete(api: FakeApi) -> None:
    # Given a payload uploaded under a request id, whose complete failed (no answer at all)
    client = make_client(api, [None, None, drop, drop], max_retries=1)
    with pytest.raises(UnavailableError) as raised:
        client.append_large("sheet", "Z3", b"u" * 5000, request_id="upload-0001")
    # When the caller runs the whole flow again, the API refuses a second upload URL
    with pytest.raises(PayloadConflictError, match="already uploaded"):
        client.append_large("sheet", "Z3", b"u" * 5000, request_id="upload-0001")
    # and complete_payload with the same request id finishes it
    result = client.complete_payload("sheet", "Z3", request_id="upload-0001", position=raised.value.position)
    assert (result.position, result.duplicate) == (1, False)


def test_complete_rebases_with_the_same_request_id(api: FakeApi) -> None:
    api.other_writer_appends("sheet", 2)
    result = make_client(api).append_large("sheet", "Z4", b"t" * 5000)
    bodies = sent_bodies(api, "/payloads/complete")
    assert [body["position"] for body in bodies] == [1, 3]
    assert {body["request_id"] for body in bodies} == {result.request_id}


def test_complete_before_an_upload_is_a_payload_conflict(api: FakeApi) -> None:
    with pytest.raises(PayloadConflictError, match="upload the payload"):
        make_client(api).complete_payload("sheet", "Z5", request_id="never-uploaded")


# --- snapshots --------------------------------------------------------------------------------


def snapshot_document(number: int, cut: int, chunks: list[bytes], api: FakeApi) -> dict[str, Any]:
    urls = [f"https://{BUCKET_HOST}/snapshots/sheet/{number:010d}/chunk-{index}.ndjson?X-Amz-Signature=s" for index in range(len(chunks))]
    api.downloads.update(zip(urls, chunks, strict=True))
    cells = sum(len(body.splitlines()) for body in chunks)
    return {
        "number": number,
        "cut": cut,
        "cells": cells,
        "digest": chained_digest(chunks),
        "root_url": f"https://{BUCKET_HOST}/snapshots/sheet/{number:010d}/root.json?X-Amz-Signature=s",
        "chunk_urls": urls,
    }


def test_reading_the_snapshot_follows_next_after_until_the_last_page() -> None:
    # Given a log of 6 events, a snapshot at cut 2, and pages of 2 entries
    api = FakeApi(page_limit=2)
    api.other_writer_appends("sheet", 6)
    api.snapshots["sheet"] = snapshot_document(1, 2, [b'{"cell":"A1","value":"x"}\n'], api)
    # When the client reads the latest snapshot
    latest = make_client(api).read_snapshot("sheet")
    # Then it asked for the pages after 4 and after 6 (the last one empty: the page was full), past the snapshot's one
    # chunk, whose URL the first page gave
    assert [urlsplit(request.url).query for request in api.sent] == ["", "after=4&chunk=1", "after=6&chunk=1"]
    # and returns the snapshot with every entry after it, in order
    assert latest.snapshot is not None and (latest.snapshot.number, latest.snapshot.cut) == (1, 2)
    assert [entry["position"] for entry in latest.entries] == [3, 4, 5, 6]
    assert latest.next_position == 7
    assert json.loads(json.dumps(latest.to_json()))["snapshot"]["number"] == 1


@pytest.mark.parametrize(("new_cut", "positions"), [(5, [6]), (3, [4, 5, 6])])
def test_a_snapshot_built_between_pages_replaces_the_entries_it_covers(new_cut: int, positions: list[int]) -> None:
    # Given pages of 2 entries, and snapshot 2 built while the client reads page 1
    api = FakeApi(page_limit=2)
    api.other_writer_appends("sheet", 6)
    api.snapshots["sheet"] = snapshot_document(1, 2, [b'{"cell":"A1","value":"x"}\n'], api)

    def build_snapshot_2(request: HttpRequest, api: FakeApi) -> HttpResponse:
        answer = api(request, timeout=1)
        api.snapshots["sheet"] = snapshot_document(2, new_cut, [b'{"cell":"A1","value":"x"}\n'], api)
        return answer

    latest = make_client(api, [build_snapshot_2]).read_snapshot("sheet")
    # Then the result is the newest snapshot and the entries after its cut, each once
    assert latest.snapshot is not None and latest.snapshot.number == 2
    assert [entry["position"] for entry in latest.entries] == positions


def test_reading_the_snapshot_gathers_every_chunk_url_over_the_pages() -> None:
    # Given a snapshot of 5 chunks, answered 2 chunk URLs and 2 entries a page, and 3 entries after it
    api = FakeApi(page_limit=2, chunk_page_limit=2)
    api.other_writer_appends("sheet", 5)
    chunks = [f'{{"cell":"A{row}","value":"x"}}\n'.encode() for row in range(1, 6)]
    api.snapshots["sheet"] = snapshot_document(1, 2, chunks, api)
    client = make_client(api)
    # When the client reads the latest snapshot
    latest = client.read_snapshot("sheet")
    # Then it followed next_chunk with next_after, and past the last chunk once the URLs ran out before the entries
    assert [urlsplit(request.url).query for request in api.sent] == ["", "after=4&chunk=2", "after=5&chunk=4"]
    # and the snapshot has every chunk URL in order, whose cells check against the digest
    assert latest.snapshot is not None and latest.snapshot.chunk_urls == tuple(api.snapshots["sheet"]["chunk_urls"])
    assert (latest.snapshot.chunks, latest.snapshot.first_chunk, latest.snapshot.next_chunk) == (5, 0, None)
    assert [entry["position"] for entry in latest.entries] == [3, 4, 5]
    assert [cell["cell"] for cell in client.snapshot_cells(latest.snapshot)] == ["A1", "A2", "A3", "A4", "A5"]


def test_a_snapshot_built_while_its_chunk_urls_are_read_is_read_from_its_first_chunk() -> None:
    # Given 2 chunk URLs a page of a 3-chunk snapshot, and snapshot 2 (3 chunks) built after the first page
    api = FakeApi(chunk_page_limit=2)
    api.other_writer_appends("sheet", 6)
    api.snapshots["sheet"] = snapshot_document(1, 2, [b'{"cell":"A1","value":"1"}\n'] * 3, api)

    def build_snapshot_2(request: HttpRequest, api: FakeApi) -> HttpResponse:
        answer = api(request, timeout=1)
        api.snapshots["sheet"] = snapshot_document(2, 4, [b'{"cell":"A1","value":"2"}\n'] * 3, api)
        return answer

    latest = make_client(api, [build_snapshot_2]).read_snapshot("sheet")
    # Then the page that met snapshot 2 at chunk 2 was asked again from chunk 0, and the result has snapshot 2's URLs only
    assert [urlsplit(request.url).query for request in api.sent] == ["", "after=6&chunk=2", "after=6", "after=6&chunk=2"]
    assert latest.snapshot is not None and latest.snapshot.number == 2
    assert latest.snapshot.chunk_urls == tuple(api.snapshots["sheet"]["chunk_urls"])
    assert [entry["position"] for entry in latest.entries] == [5, 6]


def test_pages_give_each_entry_once_when_a_snapshot_is_built_while_its_chunk_urls_are_read() -> None:
    # Given pages of 2 entries and 1 chunk URL over 8 events, snapshot 1 (3 chunks) at cut 2, and snapshot 2 (3 chunks,
    # cut 3) built after the first page, so that the second page meets it past its first chunk
    api = FakeApi(page_limit=2, chunk_page_limit=1)
    api.other_writer_appends("sheet", 8)
    api.snapshots["sheet"] = snapshot_document(1, 2, [b'{"cell":"A1","value":"1"}\n'] * 3, api)

    def build_snapshot_2(request: HttpRequest, api: FakeApi) -> HttpResponse:
        answer = api(request, timeout=1)
        api.snapshots["sheet"] = snapshot_document(2, 3, [b'{"cell":"A1","value":"2"}\n'] * 3, api)
        return answer

    # When every page is read
    pages = list(make_client(api, [build_snapshot_2]).snapshot_pages("sheet"))
    # Then snapshot 2's chunk URLs were asked for from its first chunk, after the entries already given
    assert [urlsplit(request.url).query for request in api.sent][:3] == ["", "after=4&chunk=1", "after=6"]
    # and no entry is on two pages
    positions = [entry["position"] for page in pages for entry in page.entries]
    assert positions == [3, 4, 5, 6, 7, 8]


def test_a_chunk_page_that_does_not_move_on_is_a_protocol_error() -> None:
    # Given an API that answers next_chunk 0 for the chunk it was asked from
    api = FakeApi(chunk_page_limit=1)
    api.other_writer_appends("sheet", 3)
    api.snapshots["sheet"] = snapshot_document(1, 2, [b'{"cell":"A1","value":"1"}\n'] * 2, api)

    def stuck(request: HttpRequest, api: FakeApi) -> HttpResponse:
        document = json.loads(api(request, timeout=1).body)
        document["snapshot"]["next_chunk"] = 0
        return json_response(200, document)

    # When the client reads the snapshot, Then it stops with a ProtocolError rather than asking forever
    with pytest.raises(ProtocolError, match="next_chunk 0 does not move past 0"):
        make_client(api, [stuck]).read_snapshot("sheet")


def test_a_log_without_entries_is_not_found(api: FakeApi) -> None:
    with pytest.raises(LogNotFoundError, match="has no entries"):
        make_client(api).read_snapshot("empty")


def test_a_log_without_a_snapshot_reads_every_entry(api: FakeApi) -> None:
    api.other_writer_appends("sheet", 3)
    latest = make_client(api).read_snapshot("sheet")
    assert latest.snapshot is None and [entry["position"] for entry in latest.entries] == [1, 2, 3]


def test_snapshot_cells_are_downloaded_unsigned_and_checked_against_the_digest(api: FakeApi) -> None:
    # Given a snapshot of two chunks
    chunks = [b'{"cell":"A1","value":"1"}\n{"cell":"B1","value":"2"}\n', b'{"cell":"A2","payload":"payloads/sheet/k","size":9000}\n']
    document = snapshot_document(1, 3, chunks, api)
    snapshot = SnapshotInfo(**{**document, "chunk_urls": tuple(document["chunk_urls"])})
    client = make_client(api)
    # When the client downloads its cells
    cells = client.snapshot_cells(snapshot)
    # Then they are the chunks' lines in order, fetched without a signature
    assert [cell["cell"] for cell in cells] == ["A1", "B1", "A2"]
    assert all(header(request, "authorization") is None for request in api.sent)
    # and a chunk that does not match the digest is refused
    api.downloads[snapshot.chunk_urls[1]] = b'{"cell":"A2","value":"forged"}\n'
    with pytest.raises(ProtocolError, match="digest"):
        client.snapshot_cells(snapshot)


# --- outputs file and CLI ---------------------------------------------------------------------


def outputs_file(tmp_path: Path, env: str = "dev") -> Path:
    path = tmp_path / f"cdk-outputs-{env}.json"
    path.write_text(
        json.dumps(
            {f"Onceflow-{env}-EventLog": {"ApiUrl": BASE, "LogTableName": "t"}, f"Onceflow-{env}-TaxiEtl": {"ApiUrl": "https://other/"}}
        )
    )
    return path


def test_the_api_url_is_read_from_the_event_log_stack_of_an_outputs_file(tmp_path: Path) -> None:
    assert api_url_from_outputs_file(outputs_file(tmp_path)) == BASE
    with pytest.raises(ConfigurationError, match="no outputs file"):
        api_url_from_outputs_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps({"Onceflow-dev-RunnerStats": {}}))
    with pytest.raises(ConfigurationError, match="0 stacks ending in -EventLog"):
        api_url_from_outputs_file(tmp_path / "bad.json")


def run_cli(argv: list[str], transport: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, str]:
    status = main(argv, transport=transport, signer=SigV4Signer(CREDENTIALS, REGION))
    out, err = capsys.readouterr()
    return status, json.loads(out) if out else None, err


def test_the_cli_appends_and_prints_json(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    status, document, _ = run_cli(["--url", BASE, "append", "budget-2027", "B12", "42"], api, capsys)
    assert status == 0
    assert document["position"] == 1 and document["duplicate"] is False and document["log_id"] == "budget-2027"
    # Options may follow the command, and a named request at a named position is sent as named
    status, document, _ = run_cli(
        ["clear", "budget-2027", "B12", "--url", BASE, "--position", "2", "--request-id", "edit-00000002"], api, capsys
    )
    assert (status, document["position"], document["request_id"]) == (0, 2, "edit-00000002")
    assert api.logs["budget-2027"][1]["event"] == {"kind": "ClearCell", "cell": "B12"}


def test_the_cli_append_large_and_snapshot(api: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    value = tmp_path / "value.bin"
    value.write_bytes(b"q" * 6000)
    monkey_env = ["--env", "dev", "--outputs-file", str(outputs_file(tmp_path))]
    status, document, _ = run_cli([*monkey_env, "append-large", "sheet", "C3", str(value)], api, capsys)
    assert status == 0 and document["payload_key"]
    api.snapshots["sheet"] = snapshot_document(1, 0, [b'{"cell":"A1","value":"1"}\n'], api)
    status, document, _ = run_cli([*monkey_env, "snapshot", "sheet", "--cells"], api, capsys)
    assert status == 0
    assert document["snapshot"]["number"] == 1 and document["cells"] == [{"cell": "A1", "value": "1"}]
    assert [entry["kind"] for entry in document["entries"]] == ["LargePayload"]


def test_the_cli_reads_the_url_from_the_outputs_file_of_env(
    api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs_file(tmp_path, "prod")
    monkeypatch.chdir(tmp_path)
    status, _, _ = run_cli(["--env", "prod", "append", "sheet", "A1", "1"], api, capsys)
    assert status == 0 and urlsplit(api.requests[0].url).hostname == HOST


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["append", "sheet", "A1", "1"], "give --url URL, or --env NAME"),
        (["--url", BASE, "--env", "dev", "append", "sheet", "A1", "1"], "not both"),
        (["--env", "nowhere", "append", "sheet", "A1", "1"], "no outputs file"),
        (["--url", "ftp://x", "snapshot", "sheet"], "must be http(s)"),
    ],
)
def test_cli_usage_errors_are_one_line_and_exit_2(
    api: FakeApi, argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    status, document, err = run_cli(argv, api, capsys)
    assert (status, document) == (2, None)
    assert message in one_line(err) and one_line(err).startswith("onceflow-event-log: error: ")


def test_cli_auth_refusals_and_missing_credentials_exit_2(
    api: FakeApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A 403 from the API
    def forbidden(request: HttpRequest, api: FakeApi) -> HttpResponse:
        return json_response(403, {"message": "Forbidden"})

    status, _, err = run_cli(["--url", BASE, "append", "sheet", "A1", "1"], Faults(api, [forbidden]), capsys)
    assert status == 2 and "Forbidden" in one_line(err)
    # No credentials anywhere (the client's own session)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    status = main(["--url", BASE, "append", "sheet", "A1", "1"], transport=api)
    assert status == 2 and "no AWS credentials" in one_line(capsys.readouterr().err)


def test_cli_refusals_exit_1(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.other_writer_appends("sheet")
    status, _, err = run_cli(["--url", BASE, "append", "sheet", "A1", "1", "--max-rebases", "0"], api, capsys)
    assert status == 1 and "nothing was appended" in one_line(err)
    status, _, err = run_cli(["--url", BASE, "snapshot", "empty"], api, capsys)
    assert status == 1 and "has no entries" in one_line(err)


@pytest.fixture(autouse=True)
def no_real_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's client paces retries with time.sleep: not in these tests."""
    monkeypatch.setattr("onceflow.clients.event_log.time.sleep", lambda seconds: None)
    yield
