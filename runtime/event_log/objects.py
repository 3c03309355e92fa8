"""Ports for the payload/snapshot bucket and the side-effect queues, and their AWS adapters."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import ClientError

from runtime.event_log.errors import ObjectMissing
from runtime.event_log.messages import SideEffectMessage, message_body
from runtime.shared.aws import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

_MISSING_OBJECT = {"404", "NoSuchKey", "NotFound"}
_DELETE_BATCH = 1000  # keys per DeleteObjects request, S3's limit
_GONE_MESSAGE = {"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.NonExistentQueue", "InvalidParameterValue"}


class ObjectStore(Protocol):
    def put(self, key: str, body: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def delete(self, key: str) -> None: ...
    def delete_many(self, keys: Sequence[str]) -> None: ...
    def keys(self, prefix: str) -> Iterator[str]: ...


class PayloadObjects(Protocol):
    def upload_url(self, key: str, tagging: str, expires_seconds: int) -> str: ...
    def download_url(self, key: str, expires_seconds: int) -> str: ...
    def size(self, key: str) -> int: ...
    def tags(self, key: str) -> dict[str, str]: ...
    def remove_tags(self, key: str) -> None: ...


class MessageQueue(Protocol):
    def send(self, queue_url: str, messages: Sequence[SideEffectMessage], delay_seconds: int = 0) -> list[str]: ...
    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool: ...


class S3Objects:
    """The bucket of one log deployment: large payloads under payloads/, snapshots under snapshots/."""

    def __init__(self, bucket: str, *, client: S3Client) -> None:
        self._bucket = bucket
        self._client = client

    @property
    def client(self) -> S3Client:
        return self._client

    def put(self, key: str, body: bytes) -> None:
        self.client.put_object(Bucket=self._bucket, Key=key, Body=body)

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as err:
            if error_code(err) in _MISSING_OBJECT:
                raise ObjectMissing(f"s3://{self._bucket}/{key} does not exist") from err
            raise

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self._bucket, Key=key)

    def delete_many(self, keys: Sequence[str]) -> None:
        """Delete `keys` (absent ones too), up to 1,000 per request; raises if S3 refused any."""
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start : start + _DELETE_BATCH]
            response = self.client.delete_objects(Bucket=self._bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            errors = response.get("Errors", [])
            if errors:
                raise RuntimeError(
                    f"s3://{self._bucket}: {len(errors)} objects not deleted, e.g. {errors[0].get('Key')}: {errors[0].get('Code')}"
                )

    def keys(self, prefix: str) -> Iterator[str]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            for entry in page.get("Contents", []):
                yield entry["Key"]

    def upload_url(self, key: str, tagging: str, expires_seconds: int) -> str:
        # Both headers are signed, so an upload without them is refused. The tag: every uploaded
        # object starts out tagged, and the lifecycle rule expires it unless it is completed.
        # If-None-Match: the PUT only creates; once the object exists (uploaded, then completed),
        # no PUT, however late, replaces its bytes or tags it pending again.
        return self.client.generate_presigned_url(
            "put_object", Params={"Bucket": self._bucket, "Key": key, "Tagging": tagging, "IfNoneMatch": "*"}, ExpiresIn=expires_seconds
        )

    def download_url(self, key: str, expires_seconds: int) -> str:
        return self.client.generate_presigned_url("get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=expires_seconds)

    def size(self, key: str) -> int:
        try:
            return int(self.client.head_object(Bucket=self._bucket, Key=key)["ContentLength"])
        except ClientError as err:
            if error_code(err) in _MISSING_OBJECT:
                raise ObjectMissing(f"s3://{self._bucket}/{key} does not exist") from err
            raise

    def tags(self, key: str) -> dict[str, str]:
        try:
            tag_set = self.client.get_object_tagging(Bucket=self._bucket, Key=key)["TagSet"]
        except ClientError as err:
            if error_code(err) in _MISSING_OBJECT:
                raise ObjectMissing(f"s3://{self._bucket}/{key} does not exist") from err
            raise
        return {tag["Key"]: tag["Value"] for tag in tag_set}

    def remove_tags(self, key: str) -> None:
        """Idempotent: removing the tags of an untagged object changes nothing."""
        try:
            self.client.delete_object_tagging(Bucket=self._bucket, Key=key)
        except ClientError as err:
            if error_code(err) in _MISSING_OBJECT:
                raise ObjectMissing(f"s3://{self._bucket}/{key} does not exist") from err
            raise


class SqsQueue:
    def __init__(self, *, client: SQSClient) -> None:
        self._client = client

    @property
    def client(self) -> SQSClient:
        return self._client

    def send(self, queue_url: str, messages: Sequence[SideEffectMessage], delay_seconds: int = 0) -> list[str]:
        """Send in batches of ten; returns the request ids of the messages SQS did not take."""
        failed: list[str] = []
        for start in range(0, len(messages), 10):
            batch = messages[start : start + 10]
            response = self.client.send_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {
                        "Id": str(index),
                        "MessageBody": message_body(message),
                        "DelaySeconds": delay_seconds,
                        "MessageAttributes": {
                            "RequestId": {"DataType": "String", "StringValue": message.request_id},
                            "Effect": {"DataType": "String", "StringValue": message.effect.value},
                        },
                    }
                    for index, message in enumerate(batch)
                ],
            )
            failed.extend(batch[int(entry["Id"])].request_id for entry in response.get("Failed", []))
        return failed

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> bool:
        """False when the message is gone (deleted through a duplicate's receipt, or expired)."""
        try:
            self.client.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds)
        except ClientError as err:
            if error_code(err) in _GONE_MESSAGE:
                return False
            raise
        return True
