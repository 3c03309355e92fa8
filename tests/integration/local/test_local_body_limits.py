"""The local servers hold a request's body at the edge as AWS does, over real sockets: an HTTP API
answers a body over its 10 MB payload quota with 413 before reading past the quota (a Content-Length
over it: nothing read; chunked: reading stops at the chunk that passes it), and the embedded S3 refuses
a request on its authentication before reading its body. Each answer closes the connection, after
which the server discards what the client still sends (a lingering close)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit
from xml.etree import ElementTree

import boto3
import pytest
from botocore.config import Config

from devtools.aws.service_limits import HTTP_API_PAYLOAD_BYTES
from devtools.local.stack import LocalStack
from runtime.event_log import contract as event_log_contract
from runtime.taxi_etl import contract as taxi_etl_contract

DECLARED = 300 * 1024 * 1024  # what the issue sent: 300 MB
MIB = 1024 * 1024
PROMPT_SECONDS = 2.0  # a server that waited for the declared body would wait for ever: the client sends no more
TOO_LARGE = {"message": "Request Entity Too Large"}


def connect(base_url: str) -> socket.socket:
    parts = urlsplit(base_url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10)


def head(method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    response = http.client.HTTPResponse(connection)
    response.begin()
    return response.status, {name.lower(): value for name, value in response.getheaders()}, response.read()


def closed(connection: socket.socket) -> bool:
    """Whether the server closed the connection (an end of stream, not more data)."""
    return connection.recv(1) == b""


def declared_but_not_sent(
    base_url: str, method: str, target: str, headers: list[tuple[str, str]]
) -> tuple[float, int, dict[str, str], bytes]:
    """Seconds to the answer, and the answer, of a request declaring a 300 MB body and sending five bytes of it."""
    with connect(base_url) as connection:
        started = time.monotonic()
        connection.sendall(head(method, target, [*headers, ("Content-Length", str(DECLARED))]) + b"abcde")
        status, response_headers, body = answer(connection)
        took = time.monotonic() - started
        assert closed(connection)
    return took, status, response_headers, body


def api_routes(stack: LocalStack) -> list[tuple[str, str]]:
    """A POST route of each local HTTP API: (base URL, target)."""
    return [(stack.event_log_url, "/logs/limits/entries"), (stack.taxi_url, taxi_etl_contract.ROUTE_TRIP_BATCH)]


# --- the HTTP APIs: 10 MB ----------------------------------------------------------------------------


def test_a_declared_body_over_the_quota_is_answered_413_at_once_without_being_read(local_stack: LocalStack) -> None:
    for base_url, target in api_routes(local_stack):
        # Given a POST declaring a 300 MB body (Content-Length) of which only five bytes are sent
        # When it reaches the API
        took, status, headers, body = declared_but_not_sent(base_url, "POST", target, [("Content-Type", "application/json")])
        # Then API Gateway's 413 comes at once (before: the server waited to read all 300 MB), and the connection closes
        assert (status, json.loads(body)) == (413, TOO_LARGE), base_url
        assert took < PROMPT_SECONDS, f"{base_url}: {took:.1f} s"
        assert headers["connection"] == "close"


@pytest.mark.parametrize("declared", ["-1", "12abc", "+5"])
def test_a_content_length_that_is_no_number_of_bytes_is_refused_before_reading(local_stack: LocalStack, declared: str) -> None:
    # Given requests to each HTTP API whose Content-Length is not digits (read as given, -1 would read every byte the
    # client sends, past the 10 MB quota), followed by 11 MiB of body
    for base_url, target in api_routes(local_stack):
        with connect(base_url) as connection:
            started = time.monotonic()
            connection.sendall(head("POST", target, [("Content-Length", declared)]))
            connection.sendall(b" " * (11 * MIB))
            # When the server answers
            status, headers, _ = answer(connection)
            took = time.monotonic() - started
            # Then it is a 400 at once, and the connection closes (nothing of the body was read as a request)
            assert status == 400, (base_url, declared)
            assert took < PROMPT_SECONDS and headers["connection"] == "close", (base_url, took)


def test_a_chunked_body_is_read_only_until_it_passes_the_quota(local_stack: LocalStack) -> None:
    # Given a chunked POST that sends exactly the quota in 1 MiB chunks, then announces one byte more
    with connect(local_stack.event_log_url) as connection:
        connection.sendall(head("POST", "/logs/limits/entries", [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")]))
        chunk = b"%x\r\n" % MIB + b" " * MIB + b"\r\n"
        for _ in range(HTTP_API_PAYLOAD_BYTES // MIB):
            connection.sendall(chunk)
        connection.sendall(b"1\r\n")  # the chunk that passes the quota: its byte is never sent
        # When the API answers (the client sends nothing more, and no last chunk)
        status, headers, body = answer(connection)
        # Then it is the 413, and the connection closes
        assert (status, json.loads(body)) == (413, TOO_LARGE)
        assert headers["connection"] == "close" and closed(connection)


def test_expect_100_continue_over_the_quota_gets_the_413_instead_of_100_continue(local_stack: LocalStack) -> None:
    # Given a POST declaring 300 MB that waits for 100 Continue before sending its body (as curl does for large bodies)
    with connect(local_stack.event_log_url) as connection:
        headers = [("Content-Type", "application/json"), ("Content-Length", str(DECLARED)), ("Expect", "100-continue")]
        connection.sendall(head("POST", "/logs/limits/entries", headers))
        # When the API answers, Then the first answer is the 413: the body is never asked for
        status, _, body = answer(connection)
        assert (status, json.loads(body)) == (413, TOO_LARGE)
        assert closed(connection)


def test_a_client_still_sending_its_body_reads_the_413(local_stack: LocalStack) -> None:
    # Given a POST whose client sends all of an 11 MiB body before it reads the answer (http.client does)
    connection = http.client.HTTPConnection(urlsplit(local_stack.event_log_url).netloc, timeout=30)
    try:
        # When it is sent
        connection.request("POST", "/logs/limits/entries", body=b" " * (11 * MIB), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        # Then it reads the 413 (the server discards the rest rather than resetting the connection under it)
        assert (response.status, json.loads(response.read())) == (413, TOO_LARGE)
    finally:
        connection.close()


# --- the embedded S3: authentication before the body ---------------------------------------------------


def sigv2_put_url(stack: LocalStack, key: str) -> str:
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.moto_endpoint,
        region_name=stack.region,
        aws_access_key_id=stack.access_key_id,
        aws_secret_access_key="not-the-secret",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3"),
    )
    bucket = stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    return str(s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key}))


@pytest.mark.parametrize(("signed", "status", "code"), [("unsigned", 403, "AccessDenied"), ("SigV2", 400, "InvalidRequest")])
def test_the_local_s3_refuses_on_authentication_before_reading_the_body(
    local_stack: LocalStack, signed: str, status: int, code: str
) -> None:
    # Given a PUT of a 300 MB body (five bytes sent), unsigned or to a SigV2 presigned URL
    bucket = local_stack.outputs["Onceflow-local-EventLog"][event_log_contract.OUTPUT_BUCKET]
    url = sigv2_put_url(local_stack, "payloads/limits") if signed == "SigV2" else f"{local_stack.moto_endpoint}/{bucket}/payloads/limits"
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    # When it reaches the embedded S3
    took, got, headers, body = declared_but_not_sent(local_stack.moto_endpoint, "PUT", target, [])
    # Then S3's refusal comes at once, without the body (before: it was read whole, then stored), and the connection closes
    assert (got, ElementTree.fromstring(body).findtext("Code")) == (status, code)
    assert took < PROMPT_SECONDS, f"{took:.1f} s"
    assert headers["connection"] == "close"
