"""The local SigV4 verifier (devtools/aws/sigv4.py): API Gateway's IAM check of a signed request and
S3's check of a presigned URL, on requests signed by botocore (and by the event-log client) and then
changed, aged or stripped; and how the local servers answer a refusal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import boto3
import pytest
from botocore.auth import HmacV1Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from devtools.aws.moto_server import authentication_refusal, s3_error
from devtools.aws.sigv4 import (
    API_INVALID_TOKEN,
    API_SIGNATURE_MISMATCH,
    LocalCredentials,
    Refused,
    Verified,
    canonical_query,
    key_ring,
    verify_authorization,
    verify_presigned,
)
from devtools.local.cloud import iam_authorizer
from devtools.local.http_api import Denied, HttpRequest
from onceflow.clients.event_log import HttpRequest as ClientRequest
from onceflow.clients.event_log import SigV4Signer

REGION = "us-east-1"
SERVICE = "execute-api"
API = "http://127.0.0.1:8411"
S3_ENDPOINT = "http://127.0.0.1:8410"
LOCAL = LocalCredentials("local-key", "local-secret")
KEYS = key_ring(LOCAL)
S3_SIGV2_MESSAGE = "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
BODY = json.dumps({"request_id": "r-0001", "position": 1, "event": {"kind": "SetCell", "cell": "A1", "value": "1"}}).encode()

Headers = list[tuple[str, str]]


def sign(
    method: str = "POST",
    url: str = f"{API}/logs/sheet-1/entries",
    body: bytes = BODY,
    *,
    key: str = LOCAL.access_key,
    secret: str = LOCAL.secret_key,
    token: str | None = None,
    service: str = SERVICE,
    region: str = REGION,
    headers: dict[str, str] | None = None,
) -> tuple[str, Headers]:
    """The request line's target and the headers of a request signed as a botocore client signs it."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {"content-type": "application/json"})
    SigV4Auth(Credentials(key, secret, token), service, region).add_auth(request)
    parts = urlsplit(url)
    sent = [("Host", parts.netloc), *request.headers.items()]
    return parts.path + (f"?{parts.query}" if parts.query else ""), sent


def verify(
    target: str,
    headers: Headers,
    body: bytes = BODY,
    method: str = "POST",
    *,
    keys: dict[str, LocalCredentials] = KEYS,
    later: timedelta = timedelta(0),
) -> Verified | Refused:
    return verify_authorization(method, target, headers, body, keys=keys, region=REGION, service=SERVICE, now=datetime.now(UTC) + later)


def replaced(headers: Headers, name: str, value: str) -> Headers:
    return [(key, value if key.lower() == name.lower() else old) for key, old in headers]


def refusal(verdict: Verified | Refused) -> tuple[int, str, str]:
    assert isinstance(verdict, Refused), verdict
    return verdict.status, verdict.code, verdict.message


MISMATCH = (403, "InvalidSignatureException", API_SIGNATURE_MISMATCH)


# --- API Gateway: the Authorization header ---------------------------------------------------------


def test_a_request_signed_with_the_local_key_pair_is_verified() -> None:
    # Given a request botocore signed with the local key pair, When it is verified as it arrived
    target, headers = sign()
    # Then it passes, as the local key's
    assert verify(target, headers) == Verified(LOCAL.access_key)


def test_the_event_log_clients_signature_is_verified_with_its_path_and_query_encoded() -> None:
    # Given the event-log client's signer, on a log id and a query that need percent-encoding
    signer = SigV4Signer(Credentials(LOCAL.access_key, LOCAL.secret_key), REGION)
    url = f"{API}/logs/a%2Fb%20c/snapshot?after=x%3Dy%26z&limit=10"
    signed = signer.sign(ClientRequest("GET", url, {}, b""))
    parts = urlsplit(url)
    # When the server verifies the request it sends
    verdict = verify(f"{parts.path}?{parts.query}", list(signed.headers.items()), b"", "GET")
    # Then it passes
    assert verdict == Verified(LOCAL.access_key)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("forged signature", MISMATCH),
        ("wrong secret", MISMATCH),
        ("unknown key", (403, "AccessDeniedException", API_INVALID_TOKEN)),
        ("tampered body", MISMATCH),
        ("tampered signed header", MISMATCH),
        ("tampered path", MISMATCH),
        ("tampered query", MISMATCH),
        ("other method", MISMATCH),
        ("signed header not sent", MISMATCH),
    ],
)
def test_a_changed_or_misattributed_request_is_refused_as_api_gateway_refuses_it(change: str, expected: tuple[int, str, str]) -> None:
    # Given a correctly signed request (with a query), and one thing about it that differs
    url = f"{API}/logs/sheet-1/snapshot?after=3"
    target, headers = sign(url=url, key="someone-else" if change == "unknown key" else LOCAL.access_key)
    body, method = BODY, "POST"
    if change == "forged signature":
        authorization = dict((name.lower(), value) for name, value in headers)["authorization"]
        headers = replaced(headers, "authorization", authorization.rsplit("Signature=", 1)[0] + "Signature=" + "0" * 64)
    elif change == "wrong secret":
        target, headers = sign(url=url, secret="not-the-secret")
    elif change == "tampered body":
        body = BODY.replace(b'"1"', b'"2"')
    elif change == "tampered signed header":
        headers = replaced(headers, "content-type", "text/plain")
    elif change == "tampered path":
        target = target.replace("sheet-1", "sheet-2")
    elif change == "tampered query":
        target = target.replace("after=3", "after=4")
    elif change == "other method":
        method = "PUT"
    elif change == "signed header not sent":
        headers = [(name, value) for name, value in headers if name.lower() != "content-type"]
    # When it is verified, Then it is refused with API Gateway's 403
    assert refusal(verify(target, headers, body, method)) == expected


@pytest.mark.parametrize(
    ("later", "word"), [(timedelta(minutes=5, seconds=2), "expired"), (-timedelta(minutes=5, seconds=2), "not yet current")]
)
def test_a_signature_more_than_five_minutes_off_is_refused(later: timedelta, word: str) -> None:
    # Given a correct signature, When it arrives over five minutes after (or before) its time stamp
    target, headers = sign()
    status, code, message = refusal(verify(target, headers, later=later))
    # Then it is refused as API Gateway refuses it
    assert (status, code) == (403, "InvalidSignatureException")
    assert message.startswith(f"Signature {word}: ")
    # and just under five minutes it passes
    assert verify(target, headers, later=timedelta(minutes=4, seconds=50)) == Verified(LOCAL.access_key)


@pytest.mark.parametrize(
    "headers",
    [[("Content-Type", "application/json")], [("Authorization", "Bearer x")], [("Authorization", "AWS4-HMAC-SHA256")]],
    ids=["no authorization", "another scheme", "no fields"],
)
def test_an_unsigned_or_incomplete_authorization_is_refused(headers: Headers) -> None:
    # When a request without a SigV4 Authorization header, or with an empty one, is verified
    status, code, message = refusal(verify("/logs/sheet-1/entries", headers))
    # Then an unsigned one is the HTTP API's plain Forbidden, an incomplete one says what is missing
    if code:
        assert (status, code) == (403, "IncompleteSignatureException")
        assert "requires 'Credential' parameter" in message and "'X-Amz-Date' or a 'Date' header" in message
    else:
        assert (status, message) == (403, "Forbidden")


@pytest.mark.parametrize(
    ("service", "region", "fragment"),
    [("s3", REGION, "correct service: 'execute-api'"), (SERVICE, "eu-west-1", "valid region, not 'eu-west-1'")],
)
def test_a_credential_scoped_to_another_service_or_region_is_refused(service: str, region: str, fragment: str) -> None:
    # Given a request signed for another service or region
    target, headers = sign(service=service, region=region)
    # When it is verified, Then the scope is what is refused
    status, code, message = refusal(verify(target, headers))
    assert (status, code) == (403, "InvalidSignatureException")
    assert fragment in message


def test_a_body_hash_header_that_does_not_match_the_body_is_refused() -> None:
    # Given a request that signed its body's hash in x-amz-content-sha256
    request_headers = {"content-type": "application/json", "x-amz-content-sha256": "0" * 64}
    target, headers = sign(headers=request_headers)
    # When it is verified with the body sent, Then the hash it declares is not the body's: refused
    assert refusal(verify(target, headers)) == MISMATCH


def test_a_session_token_must_be_the_servers_when_the_server_has_one() -> None:
    # Given a server whose credentials carry a session token
    keys = key_ring(LocalCredentials(LOCAL.access_key, LOCAL.secret_key, token="the-token"))
    right, wrong, none = (sign(token=token) for token in ("the-token", "another-token", None))
    # When requests with its token, another and none are verified
    # Then only its own passes; the others are the invalid security token
    assert verify(*right, keys=keys) == Verified(LOCAL.access_key)
    assert refusal(verify(*wrong, keys=keys)) == (403, "AccessDeniedException", API_INVALID_TOKEN)
    assert refusal(verify(*none, keys=keys)) == (403, "AccessDeniedException", API_INVALID_TOKEN)
    # and a server without one ignores a token sent (the local key pair has none)
    assert verify(*wrong) == Verified(LOCAL.access_key)


def test_a_date_header_stands_in_for_x_amz_date() -> None:
    # Given a request botocore signed with a Date header (which it then signs instead of X-Amz-Date)
    target, headers = sign(headers={"content-type": "application/json", "Date": "Mon, 01 Jan 2024 00:00:00 GMT"})
    assert "x-amz-date" not in {name.lower() for name, _ in headers}
    # When it is verified, Then it passes
    assert verify(target, headers) == Verified(LOCAL.access_key)


def test_the_canonical_query_is_decoded_re_encoded_and_sorted() -> None:
    # When raw queries that encode the same parameters differently are made canonical
    # Then they are one string, each name and value encoded once, sorted by name then value
    assert canonical_query("b=2&a=x:y&a=%20") == canonical_query("a=%20&a=x%3Ay&b=2") == "a=%20&a=x%3Ay&b=2"
    assert canonical_query("X-Amz-Signature=abc&k", leave_out="X-Amz-Signature") == "k="


def test_the_iam_authorizer_answers_api_gateways_403_or_the_callers_identity() -> None:
    # Given the event-log API's authorizer on the local key pair
    authorize = iam_authorizer(KEYS)
    target, headers = sign()
    good = HttpRequest("POST", target, headers, BODY)
    forged = HttpRequest("POST", target, headers, BODY + b" ")
    unsigned = HttpRequest("POST", target, [], BODY)
    # When it authorizes a good, a changed and an unsigned request
    # Then the good one goes on with the caller's IAM identity
    identity: Any = authorize({}, good)
    assert identity["iam"]["accessKey"] == LOCAL.access_key
    assert identity["iam"]["userArn"].endswith(f":user/{LOCAL.access_key}")
    # and the others get API Gateway's 403, with its error type when it has one
    refused = authorize({}, forged)
    assert refused == Denied(403, API_SIGNATURE_MISMATCH, "InvalidSignatureException")
    assert isinstance(refused, Denied) and ("x-amzn-errortype", "InvalidSignatureException") in refused.response().headers
    assert authorize({}, unsigned) == Denied(403, "Forbidden")


# --- S3: presigned URLs ----------------------------------------------------------------------------


def presigned_put(*, secret: str = LOCAL.secret_key, expires: int = 60) -> tuple[str, Headers]:
    """An upload URL as the event log's API makes it (create only, tagged pending), and the headers it signs."""
    s3 = boto3.client(
        "s3",
        endpoint_url=S3_ENDPOINT,
        region_name=REGION,
        aws_access_key_id=LOCAL.access_key,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )
    url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": "payloads", "Key": "p/r 1", "Tagging": "pending=1", "IfNoneMatch": "*"}, ExpiresIn=expires
    )
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}", [("Host", parts.netloc), ("If-None-Match", "*"), ("x-amz-tagging", "pending=1")]


def check(target: str, headers: Headers, *, keys: dict[str, LocalCredentials] | None = KEYS, later: timedelta = timedelta(0)) -> Any:
    return verify_presigned("PUT", target, headers, keys=keys, now=datetime.now(UTC) + later)


def test_a_presigned_put_with_its_signed_headers_is_verified() -> None:
    # Given an upload URL and the headers it signed, When they are sent (with other, unsigned, headers too)
    target, headers = presigned_put()
    sent = [*headers, ("Content-Type", "application/octet-stream"), ("Content-Length", "3")]
    # Then the request passes
    assert check(target, sent) == Verified(LOCAL.access_key)


def test_a_presigned_put_without_its_signed_if_none_match_does_not_match() -> None:
    # Given an upload URL that signs If-None-Match: *
    target, headers = presigned_put()
    without = [(name, value) for name, value in headers if name != "If-None-Match"]
    # When it is used without that header (a PUT that would replace the object)
    verdict = check(target, without)
    # Then S3's SignatureDoesNotMatch refuses it, with the canonical request it computed (no If-None-Match in it)
    assert (verdict.status, verdict.code) == (403, "SignatureDoesNotMatch")
    details = dict(verdict.details)
    assert "if-none-match:" not in details["CanonicalRequest"] and details["StringToSign"].startswith("AWS4-HMAC-SHA256\n")
    # and without the key pairs the missing header alone refuses it
    assert check(target, without, keys=None).code == "SignatureDoesNotMatch"
    assert check(target, headers, keys=None) == Verified(LOCAL.access_key)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ("expired", 403, "AccessDenied"),
        ("wrong secret", 403, "SignatureDoesNotMatch"),
        ("unknown key", 403, "InvalidAccessKeyId"),
        ("other key", 403, "SignatureDoesNotMatch"),
        ("longer expiry", 403, "SignatureDoesNotMatch"),
        ("unsigned x-amz header", 403, "AccessDenied"),
        ("no signature", 400, "AuthorizationQueryParametersError"),
        ("expiry over a week", 400, "AuthorizationQueryParametersError"),
    ],
)
def test_a_presigned_url_used_otherwise_than_signed_is_refused_as_s3_refuses_it(change: str, status: int, code: str) -> None:
    # Given an upload URL, and one thing about its use that differs
    target, headers = presigned_put(secret="not-the-secret" if change == "wrong secret" else LOCAL.secret_key)
    keys, later = KEYS, timedelta(0)
    if change == "expired":
        later = timedelta(seconds=61)
    elif change == "unknown key":
        keys = key_ring(LocalCredentials("someone-else", "x"))
    elif change == "other key":
        target = target.replace("p/r%201", "p/r%202")
    elif change == "longer expiry":
        target = target.replace("X-Amz-Expires=60", "X-Amz-Expires=600")
    elif change == "unsigned x-amz header":
        headers = [*headers, ("x-amz-meta-note", "added")]
    elif change == "no signature":
        target = target.split("&X-Amz-Signature=")[0]
    elif change == "expiry over a week":
        target = target.replace("X-Amz-Expires=60", "X-Amz-Expires=604801")
    # When it is used, Then S3's refusal
    verdict = check(target, headers, keys=keys, later=later)
    assert isinstance(verdict, Refused)
    assert (verdict.status, verdict.code) == (status, code)
    if change == "expired":
        assert verdict.message == "Request has expired"


def test_the_moto_server_checks_s3s_presigned_and_unsigned_requests_and_a_refusal_is_s3s_xml() -> None:
    # Given an upload URL used without its signed If-None-Match, a header-signed request and an unsigned one
    target, headers = presigned_put()
    without = [(name, value) for name, value in headers if name != "If-None-Match"]
    # When the moto server looks at them
    refused = authentication_refusal("PUT", target, without, KEYS)
    # Then the presigned one is refused, the header-signed one goes on to moto (which takes any key pair)
    assert authentication_refusal("PUT", target, [*without, ("Authorization", "AWS4-HMAC-SHA256 ...")], KEYS) is None
    assert authentication_refusal("PUT", target, headers, KEYS) is None
    # and the unsigned one is S3's answer for a bucket that blocks public access (moto used to store it), but
    # for a CORS preflight
    assert authentication_refusal("PUT", "/payloads/p", without, KEYS) == Refused(403, "AccessDenied", "Access Denied")
    assert authentication_refusal("OPTIONS", "/payloads/p", [("Origin", "http://localhost")], KEYS) is None
    assert refused is not None
    error = ElementTree.fromstring(s3_error(refused, "REQ1"))
    assert (error.tag, error.findtext("Code"), error.findtext("RequestId")) == ("Error", "SignatureDoesNotMatch", "REQ1")
    assert error.findtext("AWSAccessKeyId") == LOCAL.access_key


def sigv2_s3(secret: str = LOCAL.secret_key) -> Any:
    """An S3 client that signs with SigV2 (botocore's `s3` signature version), on the local endpoint."""
    return boto3.client(
        "s3",
        endpoint_url=S3_ENDPOINT,
        region_name=REGION,
        aws_access_key_id=LOCAL.access_key,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, signature_version="s3"),
    )


def test_sigv2_is_refused_as_in_a_sigv4_only_region_whatever_its_secret() -> None:
    # Given a SigV2 presigned PUT (AWSAccessKeyId, Signature, Expires), with the right secret and a wrong one,
    # and a request signed with SigV2 in its Authorization header (AWS <key>:<signature>)
    urls = [
        urlsplit(sigv2_s3(secret).generate_presigned_url("put_object", Params={"Bucket": "payloads", "Key": "p/r"}))
        for secret in (LOCAL.secret_key, "not-the-secret")
    ]
    assert all({"AWSAccessKeyId", "Signature", "Expires"} <= set(parse_qs(url.query)) for url in urls)
    header_signed = AWSRequest(method="PUT", url=f"{S3_ENDPOINT}/payloads/p/r", data=b"bytes")
    HmacV1Auth(Credentials(LOCAL.access_key, LOCAL.secret_key)).add_auth(header_signed)
    assert header_signed.headers["Authorization"].startswith(f"AWS {LOCAL.access_key}:")
    # When the moto server looks at them
    verdicts = [authentication_refusal("PUT", f"{url.path}?{url.query}", [("Host", url.netloc)], KEYS) for url in urls]
    verdicts.append(authentication_refusal("PUT", "/payloads/p/r", list(header_signed.headers.items()), KEYS))
    # Then each is S3's 400 InvalidRequest naming the one mechanism it takes (before: the presigned ones went to moto)
    assert verdicts == [Refused(400, "InvalidRequest", S3_SIGV2_MESSAGE)] * 3


def test_requests_to_other_services_are_left_to_moto() -> None:
    # Given a DynamoDB request signed in its Authorization header with a key the server does not know
    request = AWSRequest(method="POST", url=f"{S3_ENDPOINT}/", data=b"{}", headers={"X-Amz-Target": "DynamoDB_20120810.ListTables"})
    SigV4Auth(Credentials("ak", "sk"), "dynamodb", REGION).add_auth(request)
    # Then the moto server does not check it (moto's own executor calls Lambda with such keys)
    assert authentication_refusal("POST", "/", list(request.headers.items()), KEYS) is None
