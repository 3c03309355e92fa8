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


def new_upload(stack: LocalStack, prefix: str) -> dict[str, Any]:
    """An upload URL from the event-log API for a fresh log, and the headers it signs."""
    log_id = fresh(prefix)
    url = f"{stack.event_log_url}/logs/{log_id}/payloads"
    body = json.dumps({"request_id": f"{log_id}-big"}).encode()
    status, _, answer = send(url, "POST", body, signed_headers(stack, "POST", url, body))
    assert status == 200
    upload: dict[str, Any] = json.loads(answer)
    return upload


def stored(stack: LocalStack, key: str) -> tuple[bytes, list[dict[str, str]]]:
    """An object's bytes and tags in the event log's bucket."""
    s3 = stack.client("s3")
    bucket = stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read(), s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]


def test_a_sigv2_presigned_put_is_refused_and_the_stored_payload_and_its_tag_stay(local_stack: LocalStack) -> None:
    # Given a payload uploaded through its SigV4 upload URL: stored, and tagged pending
    import boto3
    from botocore.config import Config

    upload = new_upload(local_stack, "sigv2")
    payload = b"the uploaded bytes " * 50
    created = send(upload["upload_url"], "PUT", payload, [("Host", urlsplit(upload["upload_url"]).netloc), *upload["headers"].items()])
    assert created[0] == 200
    before = stored(local_stack, upload["object_key"])
    assert before[1] != []
    bucket = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    # When a SigV2 presigned PUT of the same key (AWSAccessKeyId, Signature, Expires), signed with a wrong
    # secret and with the right one, replaces the bytes without the tag
    answers = []
    for secret in ("not-the-secret", local_stack.secret_access_key):
        sigv2 = boto3.client(
            "s3",
            endpoint_url=local_stack.moto_endpoint,
            region_name=local_stack.region,
            aws_access_key_id=local_stack.access_key_id,
            aws_secret_access_key=secret,
            config=Config(s3={"addressing_style": "path"}, signature_version="s3"),
        )
        url = sigv2.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": upload["object_key"]})
        assert "AWSAccessKeyId=" in url and "X-Amz-" not in url
        answers.append(send(url, "PUT", b"replaced", [("Host", urlsplit(url).netloc)]))
    # Then each is S3's 400 InvalidRequest of a SigV4-only Region (before: the first replaced the payload and its tag)
    for status, headers, answer in answers:
        error = ElementTree.fromstring(answer)
        assert (status, error.findtext("Code")) == (400, "InvalidRequest")
        assert error.findtext("Message") == "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
        assert headers["connection"] == "close"
    # and the stored bytes and their pending tag are unchanged, and still read back through a SigV4 URL
    assert stored(local_stack, upload["object_key"]) == before
    download = local_stack.client("s3").generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": upload["object_key"]})
    status, _, read_back = send(download, "GET", None, [("Host", urlsplit(download).netloc)])
    assert (status, read_back) == (200, payload)


def test_a_virtual_hosted_url_as_the_functions_sign_it_on_aws_is_served_with_its_own_host(local_stack: LocalStack) -> None:
    # Given an S3 client built as the functions build theirs on AWS (client_config: the bucket's regional
    # virtual-hosted endpoint, no endpoint override), with the stack's key pair
    import boto3

    from runtime.event_log.objects import S3Objects
    from runtime.shared.aws import client_config

    session = boto3.session.Session(
        aws_access_key_id=local_stack.access_key_id, aws_secret_access_key=local_stack.secret_access_key, region_name=local_stack.region
    )
    bucket = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    objects = S3Objects(bucket, client=session.client("s3", config=client_config("s3")))
    key = f"payloads/{fresh('virtual-hosted')}"
    upload, download = objects.upload_url(key, "pending=1", 300), objects.download_url(key, 300)
    host = f"{bucket}.s3.{local_stack.region}.amazonaws.com"
    assert urlsplit(upload).netloc == urlsplit(download).netloc == host

    def to_the_local_server(url: str, method: str, body: bytes | None, headers: Headers) -> tuple[int, dict[str, str], bytes]:
        """The request as DNS or a proxy for the bucket's host would deliver it: to the moto server, with its Host."""
        parts = urlsplit(url)
        return send(f"{local_stack.moto_endpoint}{parts.path}?{parts.query}", method, body, [("Host", parts.netloc), *headers])

    # When the upload and the download are sent to the local S3 with the URLs' own host
    created = to_the_local_server(upload, "PUT", b"virtual bytes", [("x-amz-tagging", "pending=1"), ("If-None-Match", "*")])
    read_back = to_the_local_server(download, "GET", None, [])
    # Then the object is stored, tagged, and read back
    assert created[0] == 200
    assert (read_back[0], read_back[2]) == (200, b"virtual bytes")
    assert stored(local_stack, key) == (b"virtual bytes", [{"Key": "pending", "Value": "1"}])
    # and the host is signed: the same URL sent for another bucket's host is refused
    parts = urlsplit(download)
    moved = send(f"{local_stack.moto_endpoint}{parts.path}?{parts.query}", "GET", None, [("Host", f"other-{host}")])
    assert (moved[0], ElementTree.fromstring(moved[2]).findtext("Code")) == (403, "SignatureDoesNotMatch")
