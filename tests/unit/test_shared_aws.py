"""runtime/shared/aws.py: the one BatchGetItem policy, the lazily built clients, and S3 at the
bucket's regional endpoint. No network: the DynamoDB client is a scripted fake that answers
BatchGetItem as DynamoDB does, and S3's requests are answered by a before-send handler."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from runtime.shared.aws import (
    BATCH_GET_LIMIT,
    BATCH_GET_ROUNDS,
    Clients,
    KeysUnprocessed,
    approximate_item_count,
    batch_get_all,
)


def key(n: int) -> dict[str, Any]:
    return {"id": {"S": f"k{n}"}}


class ScriptedBatchGets:
    """Stores items by id; each call leaves the keys `leave(call_number, keys)` returns unprocessed."""

    def __init__(self, stored: dict[str, set[str]], leave: Iterator[int] | None = None) -> None:
        self.stored = stored
        self.leave = leave
        self.requests: list[dict[str, Any]] = []

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803 (botocore's name)
        self.requests.append(RequestItems)
        left = next(self.leave, 0) if self.leave else 0
        responses: dict[str, list[dict[str, Any]]] = {}
        unprocessed: dict[str, Any] = {}
        for table, entry in RequestItems.items():
            for index, asked in enumerate(entry["Keys"]):
                if left and index < left:
                    unprocessed.setdefault(table, {"Keys": [], "ConsistentRead": entry["ConsistentRead"]})["Keys"].append(asked)
                    continue
                if asked["id"]["S"] in self.stored.get(table, set()):
                    responses.setdefault(table, []).append({**asked, "table": {"S": table}})
        return {"Responses": responses, "UnprocessedKeys": unprocessed}

    def describe_table(self, TableName: str) -> dict[str, Any]:  # noqa: N803
        return {"Table": {"TableName": TableName, "ItemCount": len(self.stored.get(TableName, set()))}}


def test_keys_over_the_limit_go_in_chunks_across_tables_and_missing_keys_are_absent() -> None:
    # Given 250 keys over two tables, of which the even ones exist
    client = ScriptedBatchGets({"a": {f"k{n}" for n in range(0, 200, 2)}, "b": {"k0"}})
    # When they are all read
    found = batch_get_all(client, {"a": [key(n) for n in range(200)], "b": [key(n) for n in range(50)]})  # type: ignore[arg-type]
    # Then no call carried more than the limit, every table was asked consistently
    assert [sum(len(entry["Keys"]) for entry in request.values()) for request in client.requests] == [100, 100, 50]
    assert all(entry["ConsistentRead"] for request in client.requests for entry in request.values())
    # and exactly the existing items came back, deserialized, under their table
    assert sorted(item["id"] for item in found["a"]) == sorted(f"k{n}" for n in range(0, 200, 2))
    assert found["b"] == [{"id": "k0", "table": "b"}]
    assert len(client.requests) == -(-250 // BATCH_GET_LIMIT)


def test_unprocessed_keys_are_asked_again_with_a_doubling_backoff() -> None:
    # Given DynamoDB leaves 3 keys, then 1, then none unprocessed
    client = ScriptedBatchGets({"a": {"k0", "k1", "k2", "k3"}}, leave=iter([3, 1, 0]))
    waits: list[float] = []
    # When the keys are read
    found = batch_get_all(client, {"a": [key(n) for n in range(4)]}, sleep=waits.append)  # type: ignore[arg-type]
    # Then each unprocessed key was asked again until all were read, waiting 50 ms then 100 ms
    assert [len(request["a"]["Keys"]) for request in client.requests] == [4, 3, 1]
    assert sorted(item["id"] for item in found["a"]) == ["k0", "k1", "k2", "k3"]
    assert waits == [0.05, 0.1]


def test_keys_still_unprocessed_after_every_round_raise_instead_of_reading_as_missing() -> None:
    # Given DynamoDB never processes the first key
    client = ScriptedBatchGets({"a": {"k0", "k1"}}, leave=iter([1] * 100))
    waits: list[float] = []
    # When the keys are read
    # Then the read fails loudly: a key left unread must never look like a missing item
    with pytest.raises(KeysUnprocessed, match="1 keys unprocessed"):
        batch_get_all(client, {"a": [key(0), key(1)]}, sleep=waits.append)  # type: ignore[arg-type]
    assert len(client.requests) == BATCH_GET_ROUNDS
    assert len(waits) == BATCH_GET_ROUNDS - 1
    assert max(waits) <= 1.0


def test_approximate_item_count_reads_describe_table() -> None:
    # Given a table of 3 items
    client = ScriptedBatchGets({"a": {"k0", "k1", "k2"}})
    # Then its approximate count is DescribeTable's ItemCount
    assert approximate_item_count(client, "a") == 3  # type: ignore[arg-type]


def test_injected_clients_are_used_and_none_is_built_at_construction() -> None:
    # Given clients with an injected DynamoDB client
    injected = object()
    clients = Clients(dynamodb=injected)
    # Then the injected one is used, and nothing else was built
    assert clients.dynamodb is injected
    assert set(clients._clients) == {"dynamodb"}


# --- S3 at the bucket's regional endpoint ------------------------------------------------------------

BUCKET = "onceflow-payloads"
# eu-west-1: opened before March 20, 2019, where S3's legacy global endpoint answers a new bucket with
# 307 redirects; ap-east-1: opened after it, where the global endpoint does not serve the bucket at all;
# us-east-1: where botocore's default sends even ordinary requests to the global endpoint.
REGIONS = ["eu-west-1", "ap-east-1", "us-east-1"]


class EmptyBody:
    """The raw body of a canned response (botocore reads it as a stream)."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b""


def s3_hosts(s3: Any) -> dict[str, str]:
    """The host of each way a function reaches S3: the event log's presigned upload and download URLs
    (runtime/event_log/objects.py) and an ordinary request (HeadObject), captured by a before-send
    handler that answers it, so nothing goes to the network."""
    from botocore.awsrequest import AWSResponse

    from runtime.event_log.objects import S3Objects

    sent: list[str] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.url)
        return AWSResponse(request.url, 200, {"Content-Length": "11"}, EmptyBody())

    s3.meta.events.register("before-send.s3", answer)
    objects = S3Objects(BUCKET, client=s3)
    upload = objects.upload_url("payloads/log-1/r-1", "onceflow-pending=true", 900)
    download = objects.download_url("snapshots/log-1/root.json", 900)
    assert objects.size("payloads/log-1/r-1") == 11  # the canned answer was parsed: the request was made
    return {"upload": urlsplit(upload).netloc, "download": urlsplit(download).netloc, "request": urlsplit(sent[0]).netloc}


def as_a_function_in(region: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment Lambda gives a function in `region`, with no endpoint override."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", region)
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)


@pytest.mark.parametrize("region", REGIONS)
def test_the_functions_s3_client_uses_the_buckets_regional_virtual_hosted_endpoint(region: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the S3 client a function builds (Clients, client_config) in the region, with no endpoint override
    as_a_function_in(region, monkeypatch)
    s3 = Clients().s3
    # When it presigns an upload and a download as the event log does, and makes a request
    hosts = s3_hosts(s3)
    # Then every one names the bucket's regional virtual-hosted endpoint
    assert hosts == dict.fromkeys(["upload", "download", "request"], f"{BUCKET}.s3.{region}.amazonaws.com")


@pytest.mark.parametrize("region", REGIONS)
def test_the_functions_former_s3_config_presigned_at_the_global_endpoint(region: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the S3 client as the functions built it before: SigV4, no addressing setting
    from botocore.config import Config

    as_a_function_in(region, monkeypatch)
    former = boto3.client("s3", config=Config(signature_version="s3v4"))
    # When it presigns the same URLs
    hosts = s3_hosts(former)
    # Then they named S3's legacy global endpoint, which the test above now refuses
    assert hosts["upload"] == hosts["download"] == f"{BUCKET}.s3.amazonaws.com"
    # (an ordinary request already went to the regional endpoint outside us-east-1)
    assert hosts["request"] == (f"{BUCKET}.s3.amazonaws.com" if region == "us-east-1" else f"{BUCKET}.s3.{region}.amazonaws.com")
