"""An API Gateway HTTP API on localhost, in front of in-process Lambda entry points.

Each request becomes the event API Gateway sends a Lambda proxy integration (payload format 2.0):
`routeKey` of the matched route (its template, as the CDK construct declares it), `rawPath`
(URL-decoded, as HTTP APIs deliver it) and `rawQueryString`, headers with lower-case names (repeats
joined by commas, cookies moved to `cookies`), `queryStringParameters` (repeats joined by commas),
`pathParameters` filled from the route template, `requestContext` (http method, path, protocol,
source IP and user agent, request id, `$default` stage, the authorizer's output), and the body: text
for a textual Content-Type, base64 with `isBase64Encoded` otherwise. The integration's response
(statusCode, headers, cookies, body, isBase64Encoded) is mapped back.

What API Gateway answers itself is answered here the same way: no route -> 404 {"message":"Not
Found"}; a refused caller -> 401 {"message":"Unauthorized"} or 403 {"message":"Forbidden"}; an
integration that fails -> 500 {"message":"Internal Server Error"}. The authorization is the API's
`authorize`, given the event and the request as received (devtools/local/cloud.py: for IAM, the
request's SigV4 signature verified against the local key pair (devtools/aws/sigv4.py; IAM policies
are not evaluated), a refusal answered 403 with API Gateway's message and x-amzn-errortype; for the
taxi API, the real Lambda authorizer). AWS's limits (devtools/aws/service_limits.py): a body over
the HTTP API's 10 MB -> 413 {"message":"Request Entity Too Large"} before anything runs and before the
server reads past 10 MB (a larger Content-Length is not read at all, a chunked body stops at the chunk
that passes it; the connection then closes), and so is an event over Lambda's 6 MB; a response over
Lambda's 6 MB -> 500; an integration that takes longer than the HTTP API's 30 s -> 503
{"message":"Service Unavailable"} (the function itself runs on, as on AWS). Not emulated:
throttling, CORS, authorizer result caching.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from devtools.aws.http_server import (
    HOST,
    BackgroundHttpServer,
    BadContentLength,
    BodyAwareHandler,
    BodyTooLarge,
    LocalHttpServer,
    authority,
    declared_length,
    read_body,
)
from devtools.aws.service_limits import (
    HTTP_API_INTEGRATION_TIMEOUT_SECONDS,
    HTTP_API_PAYLOAD_BYTES,
    LambdaPayloadTooLarge,
    check_lambda_request,
    check_lambda_response,
    http_api_length_refusal,
    http_api_refusal,
)

Invoke = Callable[[dict[str, Any]], dict[str, Any]]
ACCOUNT = "123456789012"
STAGE = "$default"
# The Content-Types whose body API Gateway hands a Lambda integration as text; any other is base64.
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript", "application/x-javascript"})
TEXT_SUFFIXES = ("+json", "+xml")


@dataclass(frozen=True)
class Denied:
    """What API Gateway answers a caller its authorization refused."""

    status: int
    message: str
    error_type: str | None = None  # API Gateway's x-amzn-errortype header, e.g. InvalidSignatureException

    def response(self) -> HttpResponse:
        headers = [("x-amzn-errortype", self.error_type)] if self.error_type else []
        return HttpResponse.json(self.status, {"message": self.message}, headers)


# The authorization of an API: the request's event and the request as received (IAM checks the
# signature of its exact path, headers and body) in, either a refusal or what goes into
# requestContext.authorizer.
Authorize = Callable[[dict[str, Any], "HttpRequest"], "Denied | dict[str, Any]"]


def open_to_all(event: dict[str, Any], request: HttpRequest) -> Denied | dict[str, Any]:
    return {}


@dataclass(frozen=True)
class HttpRequest:
    method: str
    target: str  # the request line's target: path and query, still percent-encoded
    headers: Sequence[tuple[str, str]]
    body: bytes = b""
    source_ip: str = "127.0.0.1"
    host: str = "localhost"
    # A body the server stopped reading at the payload quota: its length so far (then `body` is empty).
    unread_length: int | None = None


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def json(cls, status: int, document: Any, headers: Sequence[tuple[str, str]] = ()) -> HttpResponse:
        return cls(status, [("content-type", "application/json"), *headers], json.dumps(document).encode())


class Integration:
    """A Lambda entry point behind one or more routes. Invocations are serialized: a function's
    execution environment serves one request at a time, and the Powertools resolvers the handlers
    route with hold the current request in module state."""

    def __init__(self, name: str, invoke: Invoke) -> None:
        self.name = name
        self._invoke = invoke
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._invoke(event)


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the route's template as the construct declares it, e.g. /logs/{logId}/entries
    integration: Integration

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    def _template(self) -> list[str]:
        return self.path.strip("/").split("/")

    @property
    def literal_segments(self) -> int:
        return sum(1 for part in self._template() if not part.startswith("{"))

    def match(self, method: str, segments: Sequence[str]) -> dict[str, str] | None:
        """The path parameters (decoded) when the request is this route's, else None."""
        template = self._template()
        if method != self.method or len(template) != len(segments):
            return None
        parameters: dict[str, str] = {}
        for part, segment in zip(template, segments, strict=True):
            if part.startswith("{") and part.endswith("}"):
                if not segment:
                    return None
                parameters[part[1:-1]] = unquote(segment)
            elif part != segment:
                return None
        return parameters


def is_textual(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media.startswith("text/") or media in TEXT_TYPES or media.endswith(TEXT_SUFFIXES)


def joined_headers(raw: Sequence[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """Lower-case names, repeats joined by commas, as in payload 2.0; cookies apart."""
    headers: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in raw:
        lowered = name.lower()
        if lowered == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
            continue
        headers[lowered] = f"{headers[lowered]},{value}" if lowered in headers else value
    return headers, cookies


def query_parameters(raw_query: str) -> dict[str, str]:
    parameters: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        parameters[name] = f"{parameters[name]},{value}" if name in parameters else value
    return parameters


@dataclass
class HttpApi:
    """The routes of one HTTP API, its authorization, and the event and response mapping."""

    name: str
    api_id: str
    routes: list[Route]
    authorize: Authorize = open_to_all
    region: str = "us-east-1"
    access_log: Callable[[str], None] | None = None
    integration_timeout_seconds: float = HTTP_API_INTEGRATION_TIMEOUT_SECONDS  # the HTTP API's maximum (and default)

    def find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The matching route; literal segments win over parameters, as in API Gateway."""
        segments = path.strip("/").split("/") if path.strip("/") else []
        found = [(route, params) for route in self.routes if (params := route.match(method, segments)) is not None]
        if not found:
            return None
        return max(found, key=lambda pair: pair[0].literal_segments)

    def event(self, request: HttpRequest, route: Route, path_parameters: Mapping[str, str], request_id: str) -> dict[str, Any]:
        path, _, raw_query = request.target.partition("?")
        decoded_path = unquote(path)
        headers, cookies = joined_headers(request.headers)
        headers.setdefault("x-forwarded-for", request.source_ip)
        headers.setdefault("x-forwarded-proto", "http")
        now = datetime.now(UTC)
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": route.key,
            "rawPath": decoded_path,
            "rawQueryString": raw_query,
            "headers": headers,
            "requestContext": {
                "accountId": ACCOUNT,
                "apiId": self.api_id,
                "domainName": request.host,
                "domainPrefix": request.host.split(".", 1)[0],
                "http": {
                    "method": request.method,
                    "path": decoded_path,
                    "protocol": "HTTP/1.1",
                    "sourceIp": request.source_ip,
                    "userAgent": headers.get("user-agent", ""),
                },
                "requestId": request_id,
                "routeKey": route.key,
                "stage": STAGE,
                "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                "timeEpoch": int(now.timestamp() * 1000),
            },
            "isBase64Encoded": False,
        }
        if cookies:
            event["cookies"] = cookies
        if raw_query:
            event["queryStringParameters"] = query_parameters(raw_query)
        if path_parameters:
            event["pathParameters"] = dict(path_parameters)
        if request.body:
            text: str | None = None
            if is_textual(headers.get("content-type")):
                try:
                    text = request.body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            if text is None:
                event["body"] = base64.b64encode(request.body).decode("ascii")
                event["isBase64Encoded"] = True
            else:
                event["body"] = text
        return event

    def handle(self, request: HttpRequest) -> HttpResponse:
        started = time.monotonic()
        request_id = str(uuid.uuid4())
        response = self._answer(request, request_id)
        response.headers.append(("apigw-requestid", request_id))
        if self.access_log is not None:
            took = (time.monotonic() - started) * 1000
            self.access_log(f"{self.name}: {request.method} {request.target} -> {response.status} ({took:.0f} ms)")
        return response

    def _answer(self, request: HttpRequest, request_id: str) -> HttpResponse:
        refused = http_api_refusal(request.body) if request.unread_length is None else http_api_length_refusal(request.unread_length)
        if refused is not None:
            return HttpResponse.json(*refused)
        path = request.target.partition("?")[0]
        found = self.find(request.method, path)
        if found is None:
            return HttpResponse.json(404, {"message": "Not Found"})
        route, parameters = found
        event = self.event(request, route, parameters, request_id)
        try:
            decision = self.authorize(event, request)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            return Denied(500, "Internal Server Error").response()
        if isinstance(decision, Denied):
            return decision.response()
        event["requestContext"]["authorizer"] = decision
        try:
            check_lambda_request(event)  # Lambda refuses the invocation; API Gateway passes its 413 on
        except LambdaPayloadTooLarge:
            return HttpResponse.json(413, {"message": "Request Entity Too Large"})
        started = time.monotonic()
        try:
            result = route.integration(event)
            check_lambda_response(result)
        except Exception:  # the function's own error, or its response over 6 MB (LambdaResponseTooLarge)
            # What Lambda would log; API Gateway answers the caller without the details.
            print(f"{route.integration.name} failed on {route.key}:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            return HttpResponse.json(500, {"message": "Internal Server Error"})
        if time.monotonic() - started > self.integration_timeout_seconds:
            print(f"{route.integration.name} took longer than the integration timeout on {route.key}", file=sys.stderr)
            return HttpResponse.json(503, {"message": "Service Unavailable"})
        return lambda_response(result)


def lambda_response(result: Any) -> HttpResponse:
    """A payload 2.0 integration response as API Gateway turns it into HTTP."""
    if not isinstance(result, Mapping) or "statusCode" not in result:
        return HttpResponse.json(200, result)  # a bare value is the JSON body of a 200
    headers = [(str(name), str(value)) for name, value in (result.get("headers") or {}).items()]
    headers.extend(("set-cookie", str(cookie)) for cookie in result.get("cookies") or [])
    body = result.get("body")
    data = b""
    if body is not None:
        text = body if isinstance(body, str) else json.dumps(body)
        if result.get("isBase64Encoded"):
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                return HttpResponse.json(500, {"message": "Internal Server Error"})
        else:
            data = text.encode("utf-8")
    return HttpResponse(int(result["statusCode"]), headers, data)


# What the API answers a request whose Content-Length is not a number of bytes, before reading anything.
BAD_REQUEST = HttpResponse.json(400, {"message": "Bad Request"})


class _ApiRequestHandler(BodyAwareHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY, as the moto server's handler (devtools/aws/moto_server.py) says why
    server: _ApiHttpServer

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        """Silent: the API's access log (HttpApi.access_log) says what each request became."""

    def _request(self, body: bytes = b"", unread_length: int | None = None) -> HttpRequest:
        return HttpRequest(
            method=self.command,
            target=self.path,
            headers=list(self.headers.items()),
            body=body,
            source_ip=self.client_address[0],
            host=self.headers.get("Host") or authority(self.server),
            unread_length=unread_length,
        )

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` with a Content-Length over the quota: the 413 instead of 100 Continue, so the
        client never sends the body."""
        try:
            length = declared_length(self)
        except BadContentLength:
            self._respond(BAD_REQUEST, body_unread=True)
            return False
        if length is not None and http_api_length_refusal(length) is not None:
            self._respond(self.server.api.handle(self._request(unread_length=length)), body_unread=True)
            return False
        return super().handle_expect_100()

    def _serve(self) -> None:
        # The body is read up to the HTTP API's payload quota and no further: a Content-Length over it is
        # not read at all, a chunked body stops at the chunk that passes it.
        try:
            request, body_unread = self._request(read_body(self, HTTP_API_PAYLOAD_BYTES)), False
        except BadContentLength:
            self._respond(BAD_REQUEST, body_unread=True)
            return
        except BodyTooLarge as too_large:
            request, body_unread = self._request(unread_length=too_large.length), True
        self._respond(self.server.api.handle(request), body_unread=body_unread)

    def _respond(self, response: HttpResponse, *, body_unread: bool) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        if body_unread:
            self.leave_body_unread()
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _serve  # noqa: N815  # the stdlib's names


class _ApiHttpServer(LocalHttpServer):
    api: HttpApi

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer (a timed-out or interrupted loader) is not an
        error of the API: API Gateway drops the answer too. Anything else is printed as before."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class ApiServer(BackgroundHttpServer):
    """One HttpApi on http://127.0.0.1:<port> (port 0: one the OS picks)."""

    def __init__(self, api: HttpApi, port: int = 0, host: str = HOST) -> None:
        self.api = api
        server = _ApiHttpServer((host, port), _ApiRequestHandler)
        server.api = api
        super().__init__(server, f"http-api-{api.api_id}")
