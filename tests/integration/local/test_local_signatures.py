"""Signatures checked locally (`make serve`, the session fixture `local_stack`), over real HTTP: the
event-log API verifies SigV4 as API Gateway's IAM authorization does (a forged signature, a wrong
secret, an unknown key, a changed body or signed header, a stale date, no signature: 403, and nothing
appended), while the event-log client's own requests go through; the embedded S3 holds its presigned
upload URLs to the headers they sign (no If-None-Match: refused, and the stored bytes stay)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit
from xml.etree import ElementTree

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from devtools.aws.sigv4 import API_INVALID_TOKEN, API_SIGNATURE_MISMATCH
from devtools.local.stack import LocalStack
from onceflow.clients.event_log import EventLogClient
from runtime.event_log import contract as event_log_contract
from tests.integration.local import raw_http

Headers = list[tuple[str, str]]


def send(url: str, method: str, body: bytes | None, headers: Headers) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (and Content-Length for a body); status, headers, body."""
    return raw_http.request(url, method, body, headers, own_host=True)


def signed_headers(
    stack: LocalStack,
    method: str,
    url: str,
    body: bytes,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    at: datetime | None = None,
) -> Headers:
    """The headers of a request signed for execute-api as botocore signs it, with the stack's key pair
    unless told otherwise, at `at` (default: now)."""
    request = AWSRequest(method=method, url=url, data=body, headers={"content-type": "application/json", "host": urlsplit(url).netloc})
    credentials = Credentials(access_key or stack.access_key_id, secret_key or stack.secret_access_key)
    signer = SigV4Auth(credentials, "execute-api", stack.region)
    if at is None:
        signer.add_auth(request)
    else:  # add_auth's steps, at another time than now
        request.context["timestamp"] = at.strftime(SIGV4_TIMESTAMP)
        request.headers["X-Amz-Date"] = request.context["timestamp"]
        signature = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        names = signer.signed_headers(signer.headers_to_sign(request))
        request.headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={signer.scope(request)}, SignedHeaders={names}, Signature={signature}"
        )
    return list(request.headers.items())


def append_body(log_id: str) -> bytes:
    return json.dumps({"request_id": f"{log_id}-r1", "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "1"}}).encode()


def entries_of(stack: LocalStack, log_id: str) -> list[Any]:
    log_table = stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_LOG_TABLE]
    items: list[Any] = stack.client("dynamodb").query(
        TableName=log_table,
        KeyConditionExpression="#log = :log",
        ExpressionAttributeNames={"#log": event_log_contract.KEY_LOG_ID},
        ExpressionAttributeValues={":log": {"S": log_id}},
    )["Items"]
    return items


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def replaced(headers: Headers, name: str, value: str) -> Headers:
    return [(key, value if key.lower() == name else old) for key, old in headers]


def test_requests_signed_otherwise_than_with_the_local_key_pair_are_refused_and_append_nothing(local_stack: LocalStack) -> None:
    # Given appends to a fresh log, each signed wrongly in one way (or not at all)
    log_id = fresh("forged")
    url = f"{local_stack.event_log_url}/logs/{log_id}/entries"
    body = append_body(log_id)
    good = signed_headers(local_stack, "POST", url, body)
    authorization = dict((name.lower(), value) for name, value in good)["authorization"]
    stale = datetime.now(UTC) - timedelta(minutes=6)
    attempts: dict[str, tuple[bytes, Headers]] = {
        "forged signature": (body, replaced(good, "authorization", authorization.rsplit("=", 1)[0] + "=" + "0" * 64)),
        "wrong secret": (body, signed_headers(local_stack, "POST", url, body, secret_key="not-the-secret")),
        "unknown key": (body, signed_headers(local_stack, "POST", url, body, access_key="AKIDUNKNOWN")),
        "tampered body": (body.replace(b'"1"}', b'"2"}'), good),
        "tampered signed header": (body, replaced(good, "content-type", "text/plain")),
        "stale date": (body, signed_headers(local_stack, "POST", url, body, at=stale)),
        "missing authorization": (body, [(name, value) for name, value in good if name.lower() != "authorization"]),
    }
    # When each is sent to the local event-log API
    answers = {name: send(url, "POST", sent_body, headers) for name, (sent_body, headers) in attempts.items()}
    # Then each is API Gateway's 403 with its message (and error type), and nothing was appended
    messages = {
        name: (status, json.loads(answer)["message"], headers.get("x-amzn-errortype"))
        for name, (status, headers, answer) in answers.items()
    }
    mismatch = (403, API_SIGNATURE_MISMATCH, "InvalidSignatureException")
    assert {name: value for name, value in messages.items() if name != "stale date"} == {
        "forged signature": mismatch,
        "wrong secret": mismatch,
        "unknown key": (403, API_INVALID_TOKEN, "AccessDeniedException"),
        "tampered body": mismatch,
        "tampered signed header": mismatch,
        "missing authorization": (403, "Forbidden", None),
    }
    status, message, error_type = messages["stale date"]
    assert (status, error_type) == (403, "InvalidSignatureException")
    assert message.startswith(f"Signature expired: {stale.strftime(SIGV4_TIMESTAMP)} is now earlier than ") and message.endswith(
        "- 5 min.)"
    )
    assert entries_of(local_stack, log_id) == []
    # and the same request, correctly signed, is appended
    status, _, answer = send(url, "POST", body, good)
    assert (status, json.loads(answer)["position"]) == (201, 1)


def test_the_event_log_client_signs_requests_the_local_api_verifies(local_stack: LocalStack) -> None:
    # Given the event-log client with the stack's key pair
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=local_stack.access_key_id, aws_secret_access_key=local_stack.secret_access_key, region_name=local_stack.region
    )
    log_id = fresh("client")
    with EventLogClient(local_stack.event_log_url, session=session) as client:
        # When it appends and reads back
        result = client.append(log_id, "B2", "verified")
        latest = client.read_snapshot(log_id)
    # Then both were let in
    assert (result.position, result.duplicate) == (1, False)
    assert [(entry["cell"], entry["value"]) for entry in latest.entries] == [("B2", "verified")]


def test_a_presigned_upload_is_held_to_its_signed_if_none_match(local_stack: LocalStack) -> None:
    # Given an upload URL from the event-log API, and the headers it signs (If-None-Match: * among them)
    log_id = fresh("presigned")
    url = f"{local_stack.event_log_url}/logs/{log_id}/payloads"
    body = json.dumps({"request_id": f"{log_id}-big"}).encode()
    status, _, answer = send(url, "POST", body, signed_headers(local_stack, "POST", url, body))
    assert status == 200
    upload = json.loads(answer)
    assert {name.lower(): value for name, value in upload["headers"].items()}["if-none-match"] == "*"
    host = [("Host", urlsplit(upload["upload_url"]).netloc)]
    with_headers = [*host, *upload["headers"].items()]
    without_if_none_match = [(name, value) for name, value in with_headers if name.lower() != "if-none-match"]
    first, replacement = b"first bytes " * 100, b"other bytes " * 100
    # When the bytes are PUT with the signed headers, then other bytes without If-None-Match
    created = send(upload["upload_url"], "PUT", first, with_headers)
    refused = send(upload["upload_url"], "PUT", replacement, without_if_none_match)
    # Then the first is accepted, the second refused with S3's XML SignatureDoesNotMatch
    assert created[0] == 200
    assert refused[0] == 403
    error = ElementTree.fromstring(refused[2])
    assert (error.findtext("Code"), error.findtext("AWSAccessKeyId")) == ("SignatureDoesNotMatch", local_stack.access_key_id)
    # and the stored bytes are the first ones
    bucket = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    assert local_stack.client("s3").get_object(Bucket=bucket, Key=upload["object_key"])["Body"].read() == first
    # and with the header, a second PUT is S3's 412: the object is only ever created
    assert send(upload["upload_url"], "PUT", replacement, with_headers)[0] == 412
