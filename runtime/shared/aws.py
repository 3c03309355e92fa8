"""AWS helpers every pipeline shares: the clients a pipeline is built with, error codes,
BatchGetItem with its one retry policy, and DescribeTable's approximate item count."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from runtime.shared.attributes import from_attributes
from runtime.shared.concurrency import map_bounded

if TYPE_CHECKING:
    from botocore.config import _S3Dict
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

BATCH_GET_LIMIT = 100  # DynamoDB's BatchGetItem limit on keys per call
BATCH_GET_ROUNDS = 5  # calls per chunk while DynamoDB leaves keys unprocessed
BATCH_GET_BACKOFF_SECONDS = 0.05  # doubled after each round, at most BATCH_GET_BACKOFF_CAP_SECONDS
BATCH_GET_BACKOFF_CAP_SECONDS = 1.0


# botocore's own default is 10 connections per client; a handler that runs calls on more threads
# than that would queue them behind the pool, or open and drop connections.
DEFAULT_POOL_CONNECTIONS = 10
# Standard mode: retries throttles and 5xx with exponential backoff and jitter, 3 attempts in all,
# the same in every function (the legacy default differs per service).
RETRY_MODE: Final = "standard"
RETRY_MAX_ATTEMPTS: Final = 3


def s3_addressing() -> _S3Dict:
    """botocore's `s3` setting of every S3 client the project builds for AWS: each request and presigned
    URL goes to the bucket's regional virtual-hosted endpoint, <bucket>.s3.<region>.amazonaws.com.

    botocore's default presigns at the legacy global endpoint <bucket>.s3.amazonaws.com (in us-east-1
    its requests go there too). S3 answers it for a new bucket with 307 Temporary Redirect until DNS
    has propagated, and with 400 in Regions launched after March 20, 2019 (Amazon S3 User Guide,
    "Virtual hosting of buckets"); the client of a presigned URL follows no redirect.
    """
    return {"addressing_style": "virtual", "us_east_1_regional_endpoint": "regional"}


def client_config(service: str, *, pool_connections: int = DEFAULT_POOL_CONNECTIONS, validate_parameters: bool = True) -> Any:
    """The botocore Config every function's clients are built with (and the embedded cloud's, to measure them).

    `validate_parameters=False` skips botocore's client-side check of each request against the
    service model (about a seventh of its CPU per call, `make bench --only latency`). Only for a
    pipeline that builds every request from its own typed models: DynamoDB still validates each
    request and answers ValidationException, so nothing invalid is written either way.
    """
    from botocore.config import Config

    return Config(
        max_pool_connections=pool_connections,
        retries={"mode": RETRY_MODE, "max_attempts": RETRY_MAX_ATTEMPTS},
        # SigV4 for presigned URLs: the event log's pending tag is a signed header of an upload URL.
        signature_version="s3v4" if service == "s3" else None,
        s3=s3_addressing() if service == "s3" else None,
        parameter_validation=validate_parameters,
    )


class Clients:
    """The SDK clients a pipeline is built with (runtime/<pipeline>/wiring.py).

    Each is built on first use (at the first invocation, never at import time) and then kept for
    the execution environment; tests and the embedded cloud inject their own by service name.
    `pool_connections` sizes each client's connection pool to the handler's I/O concurrency;
    `validate_parameters` is botocore's client-side request validation (see client_config).
    """

    def __init__(self, pool_connections: int = DEFAULT_POOL_CONNECTIONS, *, validate_parameters: bool = True, **injected: Any) -> None:
        self._clients: dict[str, Any] = dict(injected)
        self._pool_connections = pool_connections
        self._validate_parameters = validate_parameters

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            import boto3

            config = client_config(service, pool_connections=self._pool_connections, validate_parameters=self._validate_parameters)
            self._clients[service] = boto3.client(service, config=config)  # type: ignore[call-overload]
        return self._clients[service]

    @property
    def dynamodb(self) -> DynamoDBClient:
        return self._client("dynamodb")  # type: ignore[no-any-return]

    @property
    def s3(self) -> S3Client:
        return self._client("s3")  # type: ignore[no-any-return]

    @property
    def sqs(self) -> SQSClient:
        return self._client("sqs")  # type: ignore[no-any-return]

    @property
    def stepfunctions(self) -> SFNClient:
        return self._client("stepfunctions")  # type: ignore[no-any-return]

    @property
    def secretsmanager(self) -> Any:
        return self._client("secretsmanager")


def error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


class KeysUnprocessed(RuntimeError):
    """BatchGetItem still left keys unprocessed after every round (the SDK had retried each call)."""


def batch_get_all(
    client: DynamoDBClient,
    keys_by_table: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    consistent: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    concurrency: int = 1,
) -> dict[str, list[dict[str, Any]]]:
    """Every item of these keys (in DynamoDB's attribute form) that exists, per table, deserialized.

    Calls carry at most BATCH_GET_LIMIT keys; up to `concurrency` chunks are read at once. Keys
    DynamoDB leaves unprocessed are asked again, after a doubling backoff, for up to
    BATCH_GET_ROUNDS calls per chunk; then KeysUnprocessed.
    """
    pending = [(table, dict(key)) for table, keys in keys_by_table.items() for key in keys]
    chunks = [pending[start : start + BATCH_GET_LIMIT] for start in range(0, len(pending), BATCH_GET_LIMIT)]

    def read_chunk(chunk: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
        request: dict[str, Any] = {}
        for table, key in chunk:
            request.setdefault(table, {"Keys": [], "ConsistentRead": consistent})["Keys"].append(key)
        items: list[tuple[str, dict[str, Any]]] = []
        for round_number in range(BATCH_GET_ROUNDS):
            response = client.batch_get_item(RequestItems=request)
            for table, answered in response.get("Responses", {}).items():
                items.extend((table, from_attributes(item)) for item in answered)
            request = dict(response.get("UnprocessedKeys") or {})
            if not request:
                return items
            if round_number + 1 < BATCH_GET_ROUNDS:
                sleep(min(BATCH_GET_BACKOFF_SECONDS * 2**round_number, BATCH_GET_BACKOFF_CAP_SECONDS))
        left = sum(len(entry["Keys"]) for entry in request.values())
        raise KeysUnprocessed(f"BatchGetItem left {left} keys unprocessed after {BATCH_GET_ROUNDS} rounds")

    found: dict[str, list[dict[str, Any]]] = {table: [] for table in keys_by_table}
    for items in map_bounded(read_chunk, chunks, concurrency):
        for table, item in items:
            found[table].append(item)
    return found


def approximate_item_count(client: DynamoDBClient, table_name: str) -> int:
    """DescribeTable's ItemCount, which DynamoDB refreshes about every 6 hours: a progress total, never a check."""
    return int(client.describe_table(TableName=table_name)["Table"].get("ItemCount", 0))
