"""What both HTTP APIs share: routing of API Gateway HTTP API events, JSON responses (a refusal's
with its status, runtime/shared/refusals.py), and the one reading of a request body (its media
type, base64, size and strict UTF-8). Only the HTTP handlers import it.

The router is the package's own, not Powertools' event handler: importing that package loads every
resolver it has (AppSync's pulls in asyncio and ssl), about 0.3x of boto3's import at every cold
start, for the three routes each API has. Routes match as Powertools' did: the method, and the
whole raw path against the template, a `<name>` standing for one segment of RFC 3986 characters.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from runtime.shared.refusals import InvalidRequest, PayloadTooLarge, Refusal, UnsupportedMediaType
from runtime.shared.responses import JSON_MEDIA_TYPE, http_result

# --- request bodies -----------------------------------------------------------------------------

JSON = JSON_MEDIA_TYPE
CSV = "text/csv"
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little and big endian (UTF-32 LE starts with the first, too)
UTF16_SNIFF_BYTES = 256


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """A header's value whatever the case of its name: API Gateway v2 lower-cases names, but a test
    event, another proxy or a hand-made event may not."""
    if not headers:
        return None
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)


def require_media_type(content_type: str | None, body: str | None, accepted: Sequence[str]) -> None:
    """Refuse (415) a body that does not say it is one of `accepted`, in UTF-8.

    Only a request with a body is judged: a GET, or a POST without a body, has nothing to label (the
    route's own empty-body refusal speaks to it). Media types and parameter names are compared without
    case; parameters other than charset (text/csv's `header=present`, say) are ignored. A charset
    other than UTF-8 is a 415 rather than a 400: the client declared a format this API does not read,
    which is what 415 says (RFC 9110, 15.5.16), and the fix is the same as for a wrong media type."""
    if not body:
        return
    takes = " or ".join(f"{media} (charset=utf-8, or no charset)" for media in accepted)
    if content_type is None or not content_type.strip():
        raise UnsupportedMediaType(f"the request has a body but no Content-Type; send it as {takes}", accepted)
    media, *parameters = (part.strip() for part in content_type.split(";"))
    if media.lower() not in {kind.lower() for kind in accepted}:
        raise UnsupportedMediaType(f"the request body is {media or 'untyped'}; send it as {takes}", accepted)
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').strip()
        if name.strip().lower() == "charset" and charset.lower() != "utf-8":
            raise UnsupportedMediaType(f"the request body's charset is {charset or 'empty'}; send it as {takes}", accepted)


def body_text(
    body: str | None, *, is_base64: bool, max_bytes: int, too_large: type[InvalidRequest] = PayloadTooLarge, hint: str = "send UTF-8 text"
) -> str:
    """The body as the client sent it, decoded as strict UTF-8 ("" when there is none).

    A base64 body (API Gateway's `isBase64Encoded`, for a media type it does not deem text) is decoded
    first, so both encodings of the same bytes get the same answer; the limit applies to those bytes.
    A text body is encoded back to the bytes it holds: surrogate escapes (how a str carries bytes that
    are not UTF-8) as the bytes they escape, so text and base64 get the same answer; any other lone
    surrogate as itself (surrogatepass), so it is measured and then refused as not UTF-8 rather than
    failing with a 500. A byte-order mark is refused, not skipped: UTF-8 has no byte order, a BOM in
    front of JSON is not JSON (RFC 8259, 8.1), and skipping it silently would make the same content
    two different requests to anything that hashes the body."""
    if not body:
        return ""
    if is_base64:
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as err:
            raise InvalidRequest("the request body is not valid base64") from err
    else:
        try:
            raw = body.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = body.encode("utf-8", "surrogatepass")
    if len(raw) > max_bytes:
        raise too_large(f"the request body is {len(raw)} bytes; the limit is {max_bytes}")
    return strict_utf8(raw, hint=hint)


def strict_utf8(raw: bytes, *, hint: str = "send UTF-8 text") -> str:
    """`raw` as UTF-8 text, or a 400 that says which encoding it looks like instead. `hint` ends the
    message for bytes that are no text at all (the route's own words: "send CSV lines", say)."""
    if raw.startswith(UTF8_BOM):
        raise InvalidRequest("the request body starts with a byte-order mark (BOM, EF BB BF); send UTF-8 without one")
    if raw.startswith(UTF16_BOMS):
        raise InvalidRequest("the request body starts with a UTF-16 byte-order mark: it is UTF-16 text; send UTF-8")
    if _looks_like_utf16(raw):
        raise InvalidRequest("the request body looks like UTF-16 text (a zero byte in every other position); send UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRequest(f"the request body is not UTF-8 text; {hint}") from err


def _looks_like_utf16(raw: bytes) -> bool:
    """UTF-16 without a BOM: Latin text has a zero byte in every other position, which UTF-8 text (a
    JSON document or CSV lines) never has. At least half of the even or of the odd bytes of the first
    few hundred being zero tells it from binary data with a stray NUL."""
    head = raw[:UTF16_SNIFF_BYTES]
    return len(head) >= 4 and any(2 * half.count(0) >= len(half) for half in (head[0::2], head[1::2]))


# --- routing ------------------------------------------------------------------------------------

# One path segment: RFC 3986's unreserved and sub-delimiter characters, and those API Gateway passes on unencoded.
_SEGMENT = r"[-._~()'!*:@,;=+&$%<> \[\]{}|^\w]+"
_PARAMETER = re.compile(r"<(\w+)>")


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: dict[str, Any]

    def to_result(self) -> dict[str, Any]:
        """The Lambda result API Gateway HTTP APIs (payload format 2.0) turn into the HTTP response
        (runtime/shared/responses.py, which also measures it)."""
        return http_result(self.status, self.body)


def json_response(status: int, body: dict[str, Any]) -> HttpResponse:
    return HttpResponse(status, body)


def refusal_response(refusal: Refusal) -> HttpResponse:
    return json_response(refusal.status, refusal.body())


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """What a route reads of an HTTP API event (payload format 2.0)."""

    method: str
    path: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    body: str | None
    is_base64: bool

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> HttpRequest:
        http = (event.get("requestContext") or {}).get("http") or {}
        return cls(
            method=str(http.get("method", "")).upper(),
            path=str(event.get("rawPath", "")),
            headers=event.get("headers") or {},
            query=event.get("queryStringParameters") or {},
            body=event.get("body"),
            is_base64=bool(event.get("isBase64Encoded")),
        )

    def header(self, name: str) -> str | None:
        return header(self.headers, name)


DepsT = TypeVar("DepsT")
Route = Callable[..., HttpResponse]  # (request, deps, **path parameters)


class HttpRouter(Generic[DepsT]):
    """Routes by method and path template; a Refusal a route raises is answered with its status and
    body, after `on_refusal` records it; any other exception propagates (API Gateway answers 500)."""

    def __init__(self, on_refusal: Callable[[Refusal], None]) -> None:
        self._on_refusal = on_refusal
        self._routes: list[tuple[str, re.Pattern[str], Route]] = []

    def get(self, template: str) -> Callable[[Route], Route]:
        return self._add("GET", template)

    def post(self, template: str) -> Callable[[Route], Route]:
        return self._add("POST", template)

    def _add(self, method: str, template: str) -> Callable[[Route], Route]:
        pattern = re.compile(_PARAMETER.sub(lambda name: f"(?P<{name.group(1)}>{_SEGMENT})", template))

        def register(route: Route) -> Route:
            self._routes.append((method, pattern, route))
            return route

        return register

    def resolve(self, event: Mapping[str, Any], deps: DepsT) -> dict[str, Any]:
        request = HttpRequest.from_event(event)
        for method, pattern, route in self._routes:
            if method == request.method and (match := pattern.fullmatch(request.path)):
                try:
                    return route(request, deps, **match.groupdict()).to_result()
                except Refusal as refusal:
                    self._on_refusal(refusal)
                    return refusal_response(refusal).to_result()
        return json_response(404, {"statusCode": 404, "message": "Not found"}).to_result()
