"""The ingest bucket of the bulk route as a port, with its S3 adapter (injected client).

The files to load are object versions under contract.INGEST_PREFIX, read by version (a later upload to the same
key is another load) as one stream (the plan) or one byte range each (the chunks). A load's own objects, its
manifest, its chunks' summaries and its report, are JSON documents under contract.LOADS_PREFIX<LoadId>/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from botocore.exceptions import ClientError

from runtime.shared.aws import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# What S3 answers for a key or a version that is not there (HeadObject has no body, so only the status code; a
# delete marker's version answers 405), and for a version id that is no version of the bucket's. A caller that may
# not s3:ListBucket the bucket gets 403 for a missing key instead of 404 (S3 hides whether it exists): the bulk
# functions may read exactly the keys they ask for (their roles grant s3:GetObject on them, which the embedded
# cloud's IAM audit checks call by call), so a 403 here is a missing key, not a missing grant.
MISSING_CODES: Final = frozenset({"404", "NoSuchKey", "NoSuchVersion", "405", "MethodNotAllowed", "403", "AccessDenied"})
BAD_VERSION_CODES: Final = frozenset({"400", "InvalidArgument"})
UNVERSIONED: Final = "null"  # the VersionId of an object stored while the bucket's versioning was off or suspended
READ_BYTES: Final = 1 << 20  # the plan's stream is read a MiB at a time


class ObjectGone(LookupError):
    """The object version is not in the bucket (never was, or deleted, or expired by the lifecycle)."""


class LoadBucket(Protocol):
    @property
    def name(self) -> str: ...

    def version_of(self, key: str, version_id: str | None = None) -> str:
        """The version id of the key's current version (or of `version_id`, checked): UNVERSIONED when the object
        has none. Raises ObjectGone when there is no such object or version."""

    def stream(self, key: str, version_id: str) -> Iterator[bytes]:
        """The version's bytes, in pieces of at most READ_BYTES, read once. Raises ObjectGone."""

    def read_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        """Bytes `start..end` (inclusive) of the version. Raises ObjectGone."""

    def exists(self, key: str) -> bool:
        """Whether a (current) object is under `key`."""

    def put_json(self, key: str, document: Any) -> None:
        """Write `document` as compact JSON under `key`."""

    def get_json(self, key: str) -> Any | None:
        """The JSON document under `key`; None when there is none."""

    def list_keys(self, prefix: str) -> Iterator[str]:
        """Every key under `prefix`, in key order (paginated)."""


class S3LoadBucket:
    def __init__(self, bucket: str, client: S3Client) -> None:
        self._bucket = bucket
        self._client = client

    @property
    def name(self) -> str:
        return self._bucket

    def version_of(self, key: str, version_id: str | None = None) -> str:
        arguments: dict[str, Any] = {"Bucket": self._bucket, "Key": key}
        if version_id is not None:
            arguments["VersionId"] = version_id
        try:
            head = self._client.head_object(**arguments)
        except ClientError as err:
            raise _gone_or_raise(err, key, version_id) from err
        return str(head.get("VersionId") or UNVERSIONED)

    def stream(self, key: str, version_id: str) -> Iterator[bytes]:
        try:
            body = self._client.get_object(Bucket=self._bucket, Key=key, VersionId=version_id)["Body"]
        except ClientError as err:
            raise _gone_or_raise(err, key, version_id) from err
        try:
            yield from body.iter_chunks(READ_BYTES)
        finally:
            body.close()

    def read_range(self, key: str, version_id: str, start: int, end: int) -> bytes:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key, VersionId=version_id, Range=f"bytes={start}-{end}")
        except ClientError as err:
            raise _gone_or_raise(err, key, version_id) from err
        return response["Body"].read()

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as err:
            if error_code(err) in MISSING_CODES:
                return False
            raise
        return True

    def put_json(self, key: str, document: Any) -> None:
        self._client.put_object(Bucket=self._bucket, Key=key, Body=json_bytes(document), ContentType="application/json")

    def get_json(self, key: str) -> Any | None:
        try:
            body = self._client.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as err:
            if error_code(err) in MISSING_CODES:
                return None
            raise
        return json.loads(body)

    def list_keys(self, prefix: str) -> Iterator[str]:
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            for entry in page.get("Contents", ()):
                yield str(entry["Key"])


def json_bytes(document: Any) -> bytes:
    """A load's object as stored: compact JSON, keys sorted, ASCII (tests/golden/taxi_etl/bulk holds one of each kind)."""
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def _gone_or_raise(err: ClientError, key: str, version_id: str | None) -> Exception:
    code = error_code(err)
    if code in MISSING_CODES or (version_id is not None and code in BAD_VERSION_CODES):
        return ObjectGone(f"s3 object {key!r}{f' version {version_id!r}' if version_id else ''} is not in the bucket")
    return err
