"""SigV4 signatures checked as AWS checks them, for the local emulators: API Gateway's IAM
authorization of the event-log API (devtools/local/cloud.py) and S3's presigned URLs on the moto
server (devtools/aws/moto_server.py).

The signature is recomputed with botocore's own SigV4 signer (`SigV4Auth`: its canonical request,
string to sign and signing key) over the request as it arrived: its method, its path as sent, its
query (decoded, re-encoded and sorted, as AWS canonicalizes it), exactly the headers its
SignedHeaders names with the values received (not the ones botocore would pick), the payload's hash,
its time stamp and its credential scope; then it is compared with the one sent in constant time.
Refused, with the code and message AWS answers: a key the server does not know, a secret that is not
the key's, a method, path, query, body or signed header changed after signing, a signed header not
sent, a time stamp more than five minutes away, a session token that is not the server's (when the
server's credentials have one; without one, a token sent is ignored). IAM policies are not evaluated:
a known key may call anything.

What AWS does, and where it says so:
- a signed request must reach AWS within five minutes of its time stamp, else it is denied (IAM User
  Guide, "Signing AWS API requests", https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_aws-signing.html);
- the credential scope's date must be the time stamp's date (AWS General Reference, "Handling dates in
  Signature Version 4", https://docs.aws.amazon.com/general/latest/gr/sigv4-date-handling.html);
- API Gateway's 403s with IAM authorization (https://repost.aws/knowledge-center/api-gateway-troubleshoot-403-forbidden,
  https://repost.aws/knowledge-center/api-gateway-iam-sigv4-mismatch): "Signature expired"
  (x-amzn-errortype InvalidSignatureException), "The security token included in the request is
  invalid." for a key it does not know (AccessDeniedException), "The request signature we calculated
  does not match the signature you provided. Check your AWS Secret Access Key and signing method." for
  anything else that changes the signature; an HTTP API answers an unsigned request {"message":"Forbidden"};
- S3's presigned URLs (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html):
  the payload is UNSIGNED-PAYLOAD, the URL is good until X-Amz-Date + X-Amz-Expires (at most 604800 s),
  then AccessDenied "Request has expired"; a signed header not sent changes the canonical request:
  SignatureDoesNotMatch.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from http.client import HTTPMessage
from urllib.parse import quote, unquote

from botocore.auth import SIGV4_TIMESTAMP, UNSIGNED_PAYLOAD, S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import ReadOnlyCredentials

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
# "In most cases, a request must reach AWS within five minutes of the time stamp in the request.
# Otherwise, AWS denies the request." (IAM User Guide, Signing AWS API requests, see above.)
CLOCK_SKEW = timedelta(minutes=5)
# A presigned URL's X-Amz-Expires: seven days at most (S3, Authenticating requests: query parameters).
PRESIGNED_MAX_EXPIRES = 604800
UNRESERVED = "-_.~"  # what SigV4's URI encoding leaves as is, besides letters and digits
CONTENT_SHA256 = "x-amz-content-sha256"
PRESIGN_PARAMETERS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Expires")

API_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."
)
API_INVALID_TOKEN = "The security token included in the request is invalid."
S3_SIGNATURE_MISMATCH = "The request signature we calculated does not match the signature you provided. Check your key and signing method."


@dataclass(frozen=True)
class LocalCredentials:
    """A key pair the local server knows, with its session token when it has one."""

    access_key: str
    secret_key: str
    token: str | None = None


def key_ring(*credentials: LocalCredentials) -> dict[str, LocalCredentials]:
    return {known.access_key: known for known in credentials}


@dataclass(frozen=True)
class Verified:
    """A request whose signature is the one its key's secret makes."""

    access_key: str


@dataclass(frozen=True)
class Refused:
    """Why AWS would refuse the request: its HTTP status, error code and message (and, for S3's XML
    error, the extra elements it adds)."""

    status: int
    code: str  # "" when AWS documents none
    message: str
    details: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Computed:
    """The signature the server computes, with the canonical request and string to sign it signed."""

    signature: str
    canonical_request: str
    string_to_sign: str


# --- the computation (botocore's) ------------------------------------------------------------------


class _AsSigned:
    """In place of what botocore would choose for a request of its own: the headers, the canonical
    query and the payload hash the received request says were signed."""

    signed: HTTPHeaders
    query: str
    payload_hash: str

    def headers_to_sign(self, request: AWSRequest) -> HTTPMessage:
        return self.signed

    def canonical_query_string(self, request: AWSRequest) -> str:
        return self.query

    def payload(self, request: AWSRequest) -> str:
        return self.payload_hash


class _ServiceSigV4(_AsSigned, SigV4Auth):
    """SigV4 of execute-api and the other services: the path normalized and URI-encoded once more."""


class _S3QuerySigV4(_AsSigned, S3SigV4QueryAuth):
    """SigV4 of an S3 presigned URL: the path as sent."""


def compute(
    credentials: LocalCredentials,
    *,
    method: str,
    path: str,
    query: str,
    signed: HTTPHeaders,
    payload_hash: str,
    timestamp: str,
    region: str,
    service: str,
    s3_presigned: bool = False,
) -> Computed:
    """The signature of a request with botocore's SigV4 signer: `path` as sent (still percent-encoded),
    `query` canonical already (canonical_query), `signed` the signed headers as received."""
    signer = (_S3QuerySigV4 if s3_presigned else _ServiceSigV4)(
        ReadOnlyCredentials(credentials.access_key, credentials.secret_key, credentials.token), service, region
    )
    signer.signed, signer.query, signer.payload_hash = signed, query, payload_hash
    request = AWSRequest(method=method, url=f"http://localhost{path}")
    request.context["timestamp"] = timestamp
    canonical_request = signer.canonical_request(request)
    string_to_sign = signer.string_to_sign(request, canonical_request)
    return Computed(signer.signature(string_to_sign, request), canonical_request, string_to_sign)


def same(computed: str, provided: str) -> bool:
    return hmac.compare_digest(computed.encode("utf-8"), provided.encode("utf-8"))


# --- the request's parts -------------------------------------------------------------------------------


def canonical_query(raw_query: str, *, leave_out: str | None = None) -> str:
    """The canonical query string of a raw one: each name and value decoded and URI-encoded as SigV4
    says, sorted by name then value; `leave_out` (a presigned URL's X-Amz-Signature) not included."""
    pairs: list[tuple[str, str]] = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        if unquote(name) == leave_out:
            continue
        pairs.append((quote(unquote(name), safe=UNRESERVED), quote(unquote(value), safe=UNRESERVED)))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def query_values(raw_query: str) -> dict[str, str]:
    """The first value of each query parameter, decoded."""
    values: dict[str, str] = {}
    for part in raw_query.split("&"):
        name, _, value = part.partition("=")
        values.setdefault(unquote(name), unquote(value))
    return values


def first_values(headers: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The first value of each header, by lower-case name."""
    values: dict[str, str] = {}
    for name, value in headers:
        values.setdefault(name.lower(), value)
    return values


def signed_headers(headers: Sequence[tuple[str, str]], names: Sequence[str]) -> tuple[HTTPHeaders, list[str]]:
    """The headers named (lower-case) as received, every value of a repeated one in order; and the
    names of those that were not sent."""
    found = HTTPHeaders()
    for name, value in headers:
        if name.lower() in names:
            found[name.lower()] = value  # HTTPHeaders keeps repeats: botocore joins them with commas
    return found, [name for name in names if name not in found]


def signed_header_names(value: str) -> list[str]:
    return [name.strip().lower() for name in value.split(";") if name.strip()]


def parse_timestamp(value: str) -> datetime | None:
    """A SigV4 time stamp (yyyyMMdd'T'HHmmss'Z') as a UTC datetime, or None."""
    try:
        return datetime.strptime(value, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        return None


def request_timestamp(headers: Mapping[str, str]) -> str | None:
    """The time stamp a header-signed request was signed at: X-Amz-Date, else the Date header (in
    SigV4's form); None when there is neither, or it cannot be read."""
    if "x-amz-date" in headers:
        return headers["x-amz-date"] if parse_timestamp(headers["x-amz-date"]) else None
    if "date" in headers:
        try:
            return parsedate_to_datetime(headers["date"]).astimezone(UTC).strftime(SIGV4_TIMESTAMP)
        except (TypeError, ValueError):
            return None
    return None


def formatted(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(SIGV4_TIMESTAMP)


# --- API Gateway: an Authorization header ----------------------------------------------------------------


def authorization_fields(authorization: str) -> dict[str, str]:
    """Credential, SignedHeaders and Signature of `AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`."""
    fields: dict[str, str] = {}
    for part in authorization[len(ALGORITHM) :].split(","):
        name, separator, value = part.strip().partition("=")
        if separator:
            fields.setdefault(name, value)
    return fields


def credential_problem(scope: Sequence[str], timestamp: str, *, region: str, service: str, signed: Sequence[str]) -> str | None:
    """What is wrong with a credential scope (key/date/region/service/terminator) and the signed
    header names, for a request signed at `timestamp` to `service` in `region`; None: nothing."""
    _, day, scope_region, scope_service, terminator = scope
    if day != timestamp[:8]:
        return (
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{day}' != '{timestamp[:8]}', "
            f"from '{timestamp}'."
        )
    if scope_region != region:
        return f"Credential should be scoped to a valid region, not '{scope_region}'."
    if scope_service != service:
        return f"Credential should be scoped to correct service: '{service}'."
    if terminator != TERMINATOR:
        return f"Credential should be scoped with a valid terminator: '{TERMINATOR}', not '{terminator}'."
    if "host" not in signed:
        return "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization."
    return None


def verify_authorization(
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    *,
    keys: Mapping[str, LocalCredentials],
    region: str,
    service: str,
    now: datetime,
) -> Verified | Refused:
    """A request signed in its Authorization header, as API Gateway's IAM authorization checks it
    (`target`: the request line's path and query, still percent-encoded; `headers` as received)."""
    by_name = first_values(headers)
    authorization = by_name.get("authorization", "")
    if not authorization.startswith(f"{ALGORITHM} "):
        return Refused(403, "", "Forbidden")  # an HTTP API's answer to an unsigned request: no error type documented
    fields = authorization_fields(authorization)
    timestamp = request_timestamp(by_name)
    problems = [
        f"Authorization header requires '{name}' parameter." for name in ("Credential", "Signature", "SignedHeaders") if name not in fields
    ]
    if timestamp is None:
        problems.append("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
    if problems:
        return Refused(403, "IncompleteSignatureException", " ".join([*problems, f"Authorization={authorization}"]))
    assert timestamp is not None
    credential = fields["Credential"]
    scope = credential.split("/")
    if len(scope) != 5:
        message = f"Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, got '{credential}'"
        return Refused(403, "IncompleteSignatureException", message)
    access_key = scope[0]
    names = signed_header_names(fields["SignedHeaders"])
    scope_problem = credential_problem(scope, timestamp, region=region, service=service, signed=names)
    if scope_problem is not None:
        return Refused(403, "InvalidSignatureException", scope_problem)
    known = keys.get(access_key)
    if known is None:
        return Refused(403, "AccessDeniedException", API_INVALID_TOKEN)
    sent_token = by_name.get("x-amz-security-token")
    if known.token is not None and (sent_token is None or not same(known.token, sent_token)):
        return Refused(403, "AccessDeniedException", API_INVALID_TOKEN)
    signed_at = parse_timestamp(timestamp)
    assert signed_at is not None
    if signed_at < now - CLOCK_SKEW:
        message = f"Signature expired: {timestamp} is now earlier than {formatted(now - CLOCK_SKEW)} ({formatted(now)} - 5 min.)"
        return Refused(403, "InvalidSignatureException", message)
    if signed_at > now + CLOCK_SKEW:
        message = f"Signature not yet current: {timestamp} is still later than {formatted(now + CLOCK_SKEW)} ({formatted(now)} + 5 min.)"
        return Refused(403, "InvalidSignatureException", message)
    body_hash = hashlib.sha256(body).hexdigest()
    if by_name.get(CONTENT_SHA256, body_hash) != body_hash:  # a body changed under a hash header left as signed
        return Refused(403, "InvalidSignatureException", API_SIGNATURE_MISMATCH)
    path, _, raw_query = target.partition("?")
    signed, _ = signed_headers(headers, names)
    computed = compute(
        known,
        method=method,
        path=path,
        query=canonical_query(raw_query),
        signed=signed,
        payload_hash=body_hash,
        timestamp=timestamp,
        region=region,
        service=service,
    )
    if not same(computed.signature, fields["Signature"]):
        return Refused(403, "InvalidSignatureException", API_SIGNATURE_MISMATCH)
    return Verified(access_key)


# --- S3: a presigned URL -------------------------------------------------------------------------------


def is_presigned(target: str) -> bool:
    """Whether the request authenticates in its query (X-Amz-Signature or X-Amz-Credential there)."""
    query = query_values(target.partition("?")[2])
    return "X-Amz-Signature" in query or "X-Amz-Credential" in query


# S3 takes only SigV4 in the Regions launched since January 2014, and for buckets created after June 24,
# 2020 anywhere (Amazon S3 API Reference, "Appendix: Authenticating requests (AWS signature version 2)",
# and "Specifying the Signature Version in request authentication"); a SigV2 request there, in its
# Authorization header or a presigned URL's query, is answered with this.
S3_SIGV2_REFUSED = Refused(
    400, "InvalidRequest", "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
)
SIGV2_QUERY_PARAMETERS = ("AWSAccessKeyId", "Signature")


def is_signature_v2(target: str, headers: Mapping[str, str]) -> bool:
    """Whether an S3 request (headers by lower-case name) is signed with SigV2: an `Authorization: AWS
    <key>:<signature>` header, or a presigned URL's AWSAccessKeyId or Signature (with Expires) in its query."""
    if headers.get("authorization", "").startswith("AWS "):
        return True
    query = query_values(target.partition("?")[2])
    return not is_presigned(target) and any(name in query for name in SIGV2_QUERY_PARAMETERS)


def verify_presigned(
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    *,
    keys: Mapping[str, LocalCredentials] | None,
    now: datetime,
) -> Verified | Refused:
    """A request to an S3 presigned URL, as S3 checks it. `keys` None: no key pair to check it
    against, so only its form, its expiry and that every signed header was sent are."""
    path, _, raw_query = target.partition("?")
    query = query_values(raw_query)

    def malformed(message: str) -> Refused:
        return Refused(400, "AuthorizationQueryParametersError", message)

    if any(name not in query for name in PRESIGN_PARAMETERS):
        return malformed(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, "
            "X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if query["X-Amz-Algorithm"] != ALGORITHM:
        return malformed(f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    scope = query["X-Amz-Credential"].split("/")
    if len(scope) != 5 or scope[4] != TERMINATOR:
        return malformed(
            "Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; "
            'expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'
        )
    access_key, _, scope_region, scope_service, _ = scope
    timestamp = query["X-Amz-Date"]
    signed_at = parse_timestamp(timestamp)
    if signed_at is None:
        return malformed("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    try:
        expires = int(query["X-Amz-Expires"])
    except ValueError:
        return malformed("X-Amz-Expires should be a number")
    if expires < 0:
        return malformed("X-Amz-Expires must be non-negative")
    if expires > PRESIGNED_MAX_EXPIRES:
        return malformed(f"X-Amz-Expires must be less than a week (in seconds) that is {PRESIGNED_MAX_EXPIRES}")
    known = keys.get(access_key) if keys is not None else None
    if keys is not None and known is None:
        return Refused(
            403,
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
            (("AWSAccessKeyId", access_key),),
        )
    if known is not None and known.token is not None and not same(known.token, query.get("X-Amz-Security-Token", "")):
        return Refused(400, "InvalidToken", "The provided token is malformed or otherwise invalid.")
    expiry = signed_at + timedelta(seconds=expires)
    if now > expiry:
        details = (
            ("X-Amz-Expires", str(expires)),
            ("Expires", expiry.strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("ServerTime", now.strftime("%Y-%m-%dT%H:%M:%SZ")),
        )
        return Refused(403, "AccessDenied", "Request has expired", details)
    names = signed_header_names(query["X-Amz-SignedHeaders"])
    unsigned = sorted({name.lower() for name, _ in headers if name.lower().startswith("x-amz-") and name.lower() not in names})
    if unsigned:
        return Refused(
            403,
            "AccessDenied",
            "There were headers present in the request which were not signed",
            (("HeadersNotSigned", ", ".join(unsigned)),),
        )
    signed, missing = signed_headers(headers, names)
    mismatch: tuple[tuple[str, str], ...] = (("AWSAccessKeyId", access_key), ("SignatureProvided", query["X-Amz-Signature"]))
    if known is None:
        return Refused(403, "SignatureDoesNotMatch", S3_SIGNATURE_MISMATCH, mismatch) if missing else Verified(access_key)
    payload_hash = signed.get(CONTENT_SHA256) or UNSIGNED_PAYLOAD
    computed = compute(
        known,
        method=method,
        path=path,
        query=canonical_query(raw_query, leave_out="X-Amz-Signature"),
        signed=signed,
        payload_hash=str(payload_hash),
        timestamp=timestamp,
        region=scope_region,
        service=scope_service,
        s3_presigned=True,
    )
    if not same(computed.signature, query["X-Amz-Signature"]):
        computed_parts = (("StringToSign", computed.string_to_sign), ("CanonicalRequest", computed.canonical_request))
        return Refused(403, "SignatureDoesNotMatch", S3_SIGNATURE_MISMATCH, (*mismatch, *computed_parts))
    return Verified(access_key)
