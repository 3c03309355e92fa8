"""The API's Lambda authorizer against a Secrets Manager secret on moto, through Powertools Parameters.

The deployed entry point, runtime.taxi_etl.authorizer_handler.handler, with the synthesized
function's environment: its settings, secret id and cache are built like at a cold start.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.aws.lambda_context import FakeLambdaContext
from devtools.taxi_world import AUTHORIZER_HANDLER, TEST_API_KEY, TaxiWorld
from runtime.taxi_etl import authorizer_handler
from tests.events.loader import load_event


@pytest.fixture
def authorizer(saga: TaxiWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[TaxiWorld]:
    for name, value in saga.environment(AUTHORIZER_HANDLER).items():
        monkeypatch.setenv(name, value)
    for cached in (authorizer_handler.settings, authorizer_handler.deps):
        cached.cache_clear()
    yield saga
    for cached in (authorizer_handler.settings, authorizer_handler.deps):
        cached.cache_clear()


class SecretReads:
    """Counts GetSecretValue calls made by the authorizer's (Powertools-built) client."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, **_: Any) -> None:
        self.count += 1


def request(key: str | None, sample: str = "taxi_etl/authorizer_request.json") -> dict[str, Any]:
    event = copy.deepcopy(load_event(sample))
    if key is None:
        event["headers"].pop("authorization")
        event.pop("identitySource")
    else:
        event["headers"]["authorization"] = key
        event["identitySource"] = [key]
    return event


def authorized(key: str | None, sample: str = "taxi_etl/authorizer_request.json") -> bool:
    response = authorizer_handler.handler(request(key, sample), FakeLambdaContext())
    assert set(response) == {"isAuthorized"}  # the simple response format, nothing else
    return bool(response["isAuthorized"])


def test_the_key_in_the_secret_is_authorized(authorizer: TaxiWorld) -> None:
    # Given the sample authorizer request, which carries the secret's key
    # When it is authorized
    # Then it is allowed
    assert authorized(TEST_API_KEY) is True


@pytest.mark.parametrize(
    "key",
    [
        None,  # no Authorization header
        "",
        "wrong-key-of-another-client-0123456789abcdef01",  # wrong, same length as the real one
        TEST_API_KEY[:-1],  # a prefix of the real key
        TEST_API_KEY + "x",  # longer than the real key
        "Bearer " + TEST_API_KEY,  # the key is sent as is, without a scheme
        TEST_API_KEY.upper(),
    ],
)
def test_anything_but_the_exact_key_is_denied(authorizer: TaxiWorld, key: str | None) -> None:
    # Given a request with a missing, wrong, or differently long key
    # When it is authorized
    # Then it is denied
    assert authorized(key) is False


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        pytest.param(TEST_API_KEY, True, id="the-key"),
        pytest.param(None, False, id="no-authorization-header"),
        pytest.param("wrong-key-of-another-client-0123456789abcdef01", False, id="wrong-key"),
    ],
)
def test_a_get_of_a_rows_state_is_decided_like_a_post(authorizer: TaxiWorld, key: str | None, allowed: bool) -> None:
    # Given the sample authorizer request of GET /trips/{StoreRequestId}, with the key, without it, or with another
    # When it is authorized
    # Then only the secret's key is allowed: reading a row's state needs the same key as sending it
    assert authorized(key, "taxi_etl/authorizer_get_request.json") is allowed


def test_the_secret_is_read_once_and_then_served_from_the_cache(authorizer: TaxiWorld) -> None:
    # Given the authorizer's first invocation (cold start)
    assert authorized(TEST_API_KEY)
    reads = SecretReads()
    authorizer_handler.deps().provider.client.meta.events.register("before-call.secrets-manager.GetSecretValue", reads)
    # When more requests with the right key follow within the cache's max age
    results = [authorized(TEST_API_KEY) for _ in range(5)]
    # Then all are allowed without another call to Secrets Manager
    assert results == [True] * 5
    assert reads.count == 0


def test_a_rotated_key_is_accepted_while_the_cache_is_warm_and_the_old_one_is_then_refused(authorizer: TaxiWorld) -> None:
    # Given a warm cache holding the current key
    assert authorized(TEST_API_KEY)
    # When the secret is rotated to a new key
    new_key = "rotated-key-0123456789abcdef0123456789abcdef"
    authorizer.secrets.put_secret_value(SecretId=authorizer.secret_arn, SecretString=new_key)
    # Then the new key is accepted at once (a mismatch re-reads the secret)
    assert authorized(new_key) is True
    # and the old key, now stale, is refused
    assert authorized(TEST_API_KEY) is False
    # and the new key keeps working from the refreshed cache
    assert authorized(new_key) is True


def test_a_stream_of_wrong_keys_reads_the_secret_at_most_once_per_refresh_floor(authorizer: TaxiWorld) -> None:
    # Given a warm cache
    assert authorized(TEST_API_KEY)
    reads = SecretReads()
    authorizer_handler.deps().provider.client.meta.events.register("before-call.secrets-manager.GetSecretValue", reads)
    # When 20 wrong keys arrive within the refresh floor (10 s in the synthesized settings)
    results = [authorized(f"guess-{attempt:04d}-0123456789abcdef0123456789abcdef") for attempt in range(20)]
    # Then all are denied, and Secrets Manager was read once, not 20 times
    assert results == [False] * 20
    assert reads.count == 1


def test_after_a_snapstart_restore_the_secret_is_read_again_on_the_next_request(authorizer: TaxiWorld) -> None:
    # Given a warm cache holding the current key, and the secret rotated since (as between a snapshot and its restore)
    assert authorized(TEST_API_KEY)
    new_key = "rotated-key-0123456789abcdef0123456789abcdef"
    authorizer.secrets.put_secret_value(SecretId=authorizer.secret_arn, SecretString=new_key)
    # (without a restore, the cached old key is still allowed until the cache's max age)
    assert authorized(TEST_API_KEY) is True
    # When the execution environment is restored (the authorizer's after-restore hook runs)
    authorizer_handler.after_restore()
    # Then the next request reads the secret again: the old key is refused, the rotated one allowed
    assert authorized(TEST_API_KEY) is False
    assert authorized(new_key) is True
