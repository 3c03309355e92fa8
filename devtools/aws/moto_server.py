"""The embedded cloud over HTTP: moto's backends *of this process* served on a localhost port, so
another process (a CLI, a test client, the operator tools) reaches the very tables, queues, streams,
buckets and secrets the in-process handlers use.

moto's own server mode (`moto.server.ThreadedMotoServer`) needs Flask, which is not a dependency of
this project; this is the same dispatch on the standard library. A request is matched to its service
the way moto's server does it (the SigV4 credential scope of its `Authorization` header, or of a
presigned URL's `X-Amz-Credential`; S3 when there is neither), its URL is rewritten to the service's
AWS endpoint (S3 path-style), and moto's request router (`BotocoreStubber.process_request`, what
`mock_aws` uses) answers it. The `Host` header is kept, so the URLs moto hands out (SQS queue URLs)
point back at this server.

An S3 request's authentication is checked first, on its request line and headers, as S3 checks it in a
Region that takes only SigV4, and the body of a refused request is never read (the connection closes
after the refusal; `Expect: 100-continue` gets the refusal instead of 100 Continue):
- SigV2, an `Authorization: AWS <key>:<signature>` header or a presigned URL's AWSAccessKeyId,
  Signature and Expires: 400 InvalidRequest "The authorization mechanism you have provided is not
  supported. Please use AWS4-HMAC-SHA256.";
- a SigV4 presigned URL (X-Amz-Signature or X-Amz-Credential in its query, no Authorization header),
  checked by devtools/aws/sigv4.py: every header its X-Amz-SignedHeaders names must be sent (the event
  log's upload URLs sign `If-None-Match: *`, so leaving it out cannot replace an object), no x-amz-*
  header may be sent unsigned, the URL must not have expired (X-Amz-Date + X-Amz-Expires), and, given
  the server's key pairs (`credentials`), the signature is recomputed and compared; a refusal is S3's
  XML error (SignatureDoesNotMatch, AccessDenied "Request has expired", InvalidAccessKeyId, ...);
- no authentication at all (but a CORS preflight): 403 AccessDenied, as for a bucket that blocks
  public access (browser POST uploads, signed in the form, are not served).
Requests signed in a SigV4 Authorization header are not verified: moto takes any key pair.

A virtual-hosted request (Host `<bucket>.s3.<region>.amazonaws.com`, as the functions address S3 on
AWS) is served as well when it reaches the server with that Host header: moto reads the bucket from it.
The embedded cloud's own clients are path-style on the server's endpoint (no DNS names the bucket hosts).

`serving_state_machines` sets moto up to run the state machines it is given (its Step Functions
executor on its own threads, calling Lambda back through this server, where `TaxiWorld.routing`
takes the calls, with Step Functions' error handling as AWS's) and makes moto's DynamoDB requests
atomic across the server's threads.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from devtools.aws.http_server import HOST, BackgroundHttpServer, BadContentLength, BodyAwareHandler, LocalHttpServer, read_body
from devtools.aws.moto_fit import Reach, reaches_into_moto
from devtools.aws.sigv4 import S3_SIGV2_REFUSED, LocalCredentials, Refused, is_presigned, is_signature_v2, verify_presigned

DEFAULT_REGION = "us-east-1"
# Services whose endpoint is not `<signing name>.<region>.amazonaws.com`.
GLOBAL_SERVICES = frozenset({"iam", "cloudfront", "route53", "budgets"})
SIGV4 = "AWS4-HMAC-SHA256"
S3_URL = "http://s3."
FORM_TYPE = "application/x-www-form-urlencoded"
S3_DEFAULT_TYPE = "binary/octet-stream"
# S3's answer to a request with no authentication for a bucket that blocks public access.
S3_ANONYMOUS_REFUSED = Refused(403, "AccessDenied", "Access Denied")


def credential_scope(headers: Mapping[str, str], query: str) -> tuple[str, str] | None:
    """(region, signing name) of a SigV4-signed request (headers by lower-case name): from its
    Authorization header, or from a presigned URL's X-Amz-Credential (key/date/region/service/aws4_request)."""
    authorization = headers.get("authorization", "")
    credential = ""
    if authorization.startswith(SIGV4):
        for part in authorization[len(SIGV4) :].split(","):
            name, _, value = part.strip().partition("=")
            if name == "Credential":
                credential = value
    else:
        credential = parse_qs(query).get("X-Amz-Credential", [""])[0]
    parts = credential.split("/")
    if len(parts) != 5:
        return None
    return parts[2], parts[3].lower()


def aws_url(method_target: str, headers: Mapping[str, str]) -> str:
    """The AWS endpoint URL moto's router matches, for a request line's target (`/path?query`) and its
    headers by lower-case name."""
    path, _, query = method_target.partition("?")
    scope = credential_scope(headers, query)
    region, service = scope if scope is not None else (DEFAULT_REGION, "s3")
    target = headers.get("x-amz-target", "")
    if service == "dynamodb" and target.startswith("DynamoDBStreams"):
        host = f"streams.dynamodb.{region}.amazonaws.com"
    elif service in GLOBAL_SERVICES:
        host = f"{service}.amazonaws.com"
    else:
        host = f"{service}.{region}.amazonaws.com"  # S3 included: path-style, the bucket is the first segment
    return f"http://{host}{path}" + (f"?{query}" if query else "")


def s3_error(refused: Refused, request_id: str) -> bytes:
    """S3's XML error document for a refusal."""
    elements = [("Code", refused.code), ("Message", refused.message), *refused.details, ("RequestId", request_id)]
    inner = "".join(f"<{name}>{escape(value)}</{name}>" for name, value in elements)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<Error>{inner}</Error>'.encode()


def authentication_refusal(
    method: str, target: str, headers: list[tuple[str, str]], credentials: Mapping[str, LocalCredentials] | None
) -> Refused | None:
    """S3's refusal of a request on its authentication alone, decided before its body is read (None: it
    goes on to moto). Requests to another service, and S3 requests signed in a SigV4 Authorization
    header, are not checked here (moto takes any key pair)."""
    by_name = {name.lower(): value for name, value in headers}
    query = target.partition("?")[2]
    scope = credential_scope(by_name, query)
    if scope is not None and scope[1] != "s3":
        return None
    if is_signature_v2(target, by_name):
        return S3_SIGV2_REFUSED
    if "authorization" in by_name:
        return None
    if is_presigned(target):
        verdict = verify_presigned(method, target, headers, keys=credentials, now=datetime.now(UTC))
        return verdict if isinstance(verdict, Refused) else None
    # Anonymous: the buckets block public access and grant nothing to everyone, so S3 refuses it (a
    # CORS preflight, OPTIONS, is moto's to answer).
    return None if method == "OPTIONS" else S3_ANONYMOUS_REFUSED


def _as_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return b"".join(part if isinstance(part, bytes) else str(part).encode() for part in body)


class _MotoRequestHandler(BodyAwareHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs expect; every answer carries Content-Length
    # An answer is two writes (its head, then its body): with Nagle's algorithm on, the body waited for the client's
    # delayed ACK of the head, about 40 ms per call on a kept-alive connection (TCP_NODELAY: 360 appends through
    # `make serve` took 38 s, 4 s without it).
    disable_nagle_algorithm = True
    server: _MotoHttpServer

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        """Silent: an SDK makes many calls, and moto's answers are not what the console is for."""

    def _refusal(self) -> Refused | None:
        return authentication_refusal(self.command, self.path, list(self.headers.items()), self.server.credentials)

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` refused on its headers: the refusal instead of 100 Continue, so the body is never sent."""
        refused = self._refusal()
        if refused is not None:
            self._refuse(refused)
            return False
        return super().handle_expect_100()

    def _dispatch(self) -> None:
        from botocore.awsrequest import AWSPreparedRequest
        from botocore.compat import HTTPHeaders

        # Authentication first, then the body: a refused request's body is never read.
        refused = self._refusal()
        if refused is not None:
            self._refuse(refused)
            return
        try:
            body = read_body(self)
        except BadContentLength as bad:
            self._refuse(Refused(400, "BadRequest", str(bad)))
            return
        url = aws_url(self.path, {name.lower(): value for name, value in self.headers.items()})
        headers = HTTPHeaders()
        for name, value in self.headers.items():
            headers[name] = value
        if self.command == "PUT" and url.startswith(S3_URL) and FORM_TYPE in (headers.get("Content-Type") or ""):
            # moto reads a form-encoded body as a form and stores nothing; S3 stores the bytes (curl -d/--data-binary
            # sends this type unless told otherwise).
            headers.replace_header("Content-Type", S3_DEFAULT_TYPE)
        request = AWSPreparedRequest(method=self.command, url=url, headers=headers, body=body, stream_output=False)
        try:
            answer = self.server.stubber.process_request(request)
        except Exception as error:  # moto's own failure: an answer, not a dead connection
            answer = (500, {"Content-Type": "text/plain"}, f"moto failed: {type(error).__name__}: {error}")
        status, response_headers, payload = answer if answer is not None else (404, {}, f"no embedded service answers {request.url}")
        data = _as_bytes(payload)
        self.send_response(int(status))
        sent_length = False
        for name, value in (response_headers or {}).items():
            lowered = name.lower()
            if lowered in ("transfer-encoding", "connection", "server", "date"):
                continue
            if lowered == "content-length":
                if self.command != "HEAD":
                    continue  # the body's own length below
                sent_length = True
            self.send_header(name, str(value))
        if not sent_length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)

    def _refuse(self, refused: Refused) -> None:
        """S3's error, before the request's body (if any) was read."""
        request_id = uuid.uuid4().hex[:16].upper()
        data = s3_error(refused, request_id)
        self.send_response(refused.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", request_id)
        self.send_header("Content-Length", str(len(data)))
        self.leave_body_unread()
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _dispatch  # noqa: N815  # the stdlib's names


class _MotoHttpServer(LocalHttpServer):
    stubber: Any
    credentials: Mapping[str, LocalCredentials] | None


class MotoServer(BackgroundHttpServer):
    """moto's in-process backends on http://127.0.0.1:<port> (port 0: one the OS picks). `credentials`
    (access key -> key pair): what the signatures of presigned URLs are verified against; None: only
    their signed headers and expiry are checked."""

    # moto's request router, as mock_aws uses it (its `process_request` answers a prepared request).
    @reaches_into_moto(
        Reach("moto.core.botocore_stubber", "BotocoreStubber.__init__", ("self",)),
        Reach("moto.core.botocore_stubber", "BotocoreStubber.process_request", ("self", "request")),
    )
    def __init__(self, port: int = 0, host: str = HOST, *, credentials: Mapping[str, LocalCredentials] | None = None) -> None:
        from moto.core.botocore_stubber import BotocoreStubber

        server = _MotoHttpServer((host, port), _MotoRequestHandler)
        server.stubber = BotocoreStubber()
        server.credentials = credentials
        super().__init__(server, "moto-server")

    @property
    def endpoint(self) -> str:
        return self.url


@reaches_into_moto(
    Reach("moto.core.config", "default_user_config", keys=("stepfunctions", "lambda")),
    Reach("moto.stepfunctions.parser.asl.utils.boto_client", "moto_server_port", ()),
)
@contextlib.contextmanager
def serving_state_machines(port: int) -> Iterator[None]:
    """moto runs the state machines it is given (Lambda tasks on its simple, docker-free backend,
    reached through the server on `port`) with Step Functions' error handling as AWS's
    (moto_patches.step_functions_as_aws), a Distributed Map's tolerated failures, loop and counts as AWS's
    (strict_distributed_map), AWS's service limits enforced (service_limits), S3 events with their object's
    version (s3_events_as_aws), and each of its DynamoDB requests atomic across threads: the embedded cloud of
    `embedded_aws`, served."""
    from unittest import mock

    from moto.core.config import default_user_config
    from moto.stepfunctions.parser.asl.utils import boto_client

    from devtools.aws.moto_patches import (
        atomic_moto_dynamodb,
        cached_action_names,
        cached_attribute_aliases,
        cached_backend_urls,
        cached_state_machines,
        cached_step_functions_clients,
        direct_attribute_values,
        s3_events_as_aws,
        step_functions_as_aws,
        strict_distributed_map,
    )
    from devtools.aws.service_limits import enforced_service_limits

    config = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
    parser_log = logging.getLogger("moto.stepfunctions.parser")
    level = parser_log.level
    parser_log.setLevel(logging.CRITICAL)  # it logs every failure a Retry or Catch handles
    with (
        mock.patch.dict(default_user_config, config),
        # Outside mock_aws, moto's executor calls Lambda over HTTP at localhost:<MOTO_PORT>: this server.
        mock.patch.object(boto_client, "moto_server_port", lambda: str(port)),
        atomic_moto_dynamodb(),
        enforced_service_limits(),
        step_functions_as_aws(),
        cached_action_names(),
        cached_attribute_aliases(),
        direct_attribute_values(),
        cached_backend_urls(),
        strict_distributed_map(),  # before cached_state_machines, whose cache keeps what it parses
        cached_state_machines(),
        cached_step_functions_clients(),
        s3_events_as_aws(),
    ):
        try:
            yield
        finally:
            parser_log.setLevel(level)
