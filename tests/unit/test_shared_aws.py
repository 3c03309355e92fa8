"""runtime/shared/aws.py: the one BatchGetItem policy and the lazily built clients. No network:
the DynamoDB client is a scripted fake that answers BatchGetItem as DynamoDB does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
