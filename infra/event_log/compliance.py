"""The event log's cdk-nag acknowledgements, each for one resource with its reason."""

from __future__ import annotations

from typing import Protocol

from aws_cdk import Token
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_lambda import EventSourceMapping
from aws_cdk.aws_s3 import IBucket

from onceflow.infra.compliance import acknowledge, logical_id, policy_of
from onceflow.runtime.event_log import contract


class EventLogResources(Protocol):
    """What these acknowledgements name: EventLog's resources (a protocol, so this module does not
    import the construct that calls it)."""

    @property
    def bucket(self) -> s3.IBucket: ...
    @property
    def access_log_bucket(self) -> s3.Bucket | None: ...
    @property
    def snapshot_dead_letter_queue(self) -> sqs.Queue: ...
    @property
    def payload_dead_letter_queue(self) -> sqs.Queue: ...
    @property
    def stream_failure_queue(self) -> sqs.Queue: ...
    @property
    def api_function(self) -> lambda_.Function: ...
    @property
    def router_function(self) -> lambda_.Function: ...
    @property
    def worker_function(self) -> lambda_.Function: ...
    @property
    def finalizer_function(self) -> lambda_.Function: ...
    @property
    def pending_check_function(self) -> lambda_.Function: ...
    @property
    def pending_check_schedule(self) -> events.Rule: ...


def _wildcard_finding(bucket: IBucket, prefix: str) -> str:
    """The IAM5 finding id of an object wildcard under `prefix` of a bucket this stack created."""
    return f"AwsSolutions::AwsSolutions-IAM5[Resource::<{logical_id(bucket)}.Arn>/{prefix}*]"


def acknowledge_event_log(event_log: EventLogResources) -> None:
    """EventLog's cdk-nag acknowledgements, each on one of its resources with the reason it holds there
    (EventLog adds them itself unless built with acknowledge_findings=False)."""
    for queue in (event_log.snapshot_dead_letter_queue, event_log.payload_dead_letter_queue):
        acknowledge(
            queue.node.default_child,  # type: ignore[arg-type]
            "Serverless::Serverless-SQSRedrivePolicy",
            "This queue is itself a dead-letter queue; a redrive policy on it would only move the same failed messages once more.",
        )
    for rule in ("AwsSolutions::AwsSolutions-SQS3", "Serverless::Serverless-SQSRedrivePolicy"):
        acknowledge(
            event_log.stream_failure_queue.node.default_child,  # type: ignore[arg-type]
            rule,
            "This queue is itself the on-failure destination of the log stream's event source mapping; "
            "a dead-letter queue behind it would only move the same records once more.",
        )
    dead_letter_reasons = {
        event_log.api_function: "Invoked synchronously by API Gateway only; a failure is returned to the caller, who retries "
        "with the same request id, so there is no asynchronous event to keep.",
        event_log.router_function: "Invoked only by the DynamoDB stream event source mapping, never asynchronously; failed "
        "batches go to the mapping's on-failure SQS destination instead of a function DLQ.",
        event_log.worker_function: "Invoked only by its SQS event source mapping, never asynchronously; failed messages go to "
        "the snapshot queue's dead-letter queue through its redrive policy.",
        event_log.finalizer_function: "Invoked only by its SQS event source mapping, never asynchronously; failed messages go "
        "to the payload queue's dead-letter queue through its redrive policy.",
        event_log.pending_check_function: "Invoked on a schedule with an empty event; a failed run has nothing to keep, the next "
        "run repeats the whole check, and the pending-age alarm treats a missing report as breaching.",
    }
    for function, reason in dead_letter_reasons.items():
        acknowledge(function.node.default_child, "Serverless::Serverless-LambdaDLQ", reason)  # type: ignore[arg-type]
    for function, queue_name in ((event_log.worker_function, "snapshot"), (event_log.finalizer_function, "payload")):
        for mapping in function.node.children:
            if isinstance(mapping, EventSourceMapping):
                acknowledge(
                    mapping.node.default_child,  # type: ignore[arg-type]
                    "Serverless::Serverless-LambdaEventSourceMappingDestination",
                    f"An SQS event source mapping has no on-failure destination; a message that keeps failing "
                    f"moves to the {queue_name} queue's dead-letter queue through the queue's redrive policy.",
                )
    acknowledge(
        event_log.pending_check_schedule.node.default_child,  # type: ignore[arg-type]
        "Serverless::Serverless-EventBusDLQ",
        "The scheduled event carries no data: a delivery that fails is replaced by the next scheduled run, and the "
        "pending-age alarm fires if runs stop reporting.",
    )
    if event_log.access_log_bucket is None:
        return  # an imported bucket: its owner acknowledges with acknowledge_imported_bucket
    for (attribute, prefix), reason in _BUCKET_WILDCARD_REASONS.items():
        acknowledge(policy_of(getattr(event_log, attribute)), _wildcard_finding(event_log.bucket, prefix), reason)


_BUCKET_WILDCARD_REASONS = {
    ("api_function", contract.PAYLOADS_PREFIX): "Presigned uploads and completion checks act on objects named "
    "payloads/<log>/<hash of the request id>, created at run time; the prefix is as narrow as a static policy gets.",
    ("api_function", contract.SNAPSHOTS_PREFIX): "Readers get presigned downloads of snapshot chunks whose keys are hashes "
    "computed at build time; read-only and limited to the snapshots/ prefix.",
    ("worker_function", contract.SNAPSHOTS_PREFIX): "The worker writes, reads and deletes chunk objects whose keys are hashes "
    "computed at build time; limited to the snapshots/ prefix of this bucket.",
    ("finalizer_function", contract.PAYLOADS_PREFIX): "Removes the pending tag of payload objects named at run time; "
    "s3:DeleteObjectTagging only, limited to the payloads/ prefix of this bucket.",
}


def acknowledge_imported_bucket(event_log: EventLogResources, owner_note: str) -> None:
    """For a stack that gave EventLog its own bucket (imported by name): acknowledge the object
    wildcards under payloads/ and snapshots/ of that bucket, with why they are needed and the
    owner's note on why the bucket may hold them (e.g. the prefixes are reserved for onceflow)."""
    if event_log.access_log_bucket is not None:
        raise ValueError("the EventLog created its bucket; acknowledge_event_log covers it")
    bucket_name = event_log.bucket.bucket_name
    if Token.is_unresolved(bucket_name):
        raise ValueError("import the bucket by a literal name (s3.Bucket.from_bucket_name) to acknowledge it")
    for (attribute, prefix), reason in _BUCKET_WILDCARD_REASONS.items():
        finding = f"AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket_name}/{prefix}*]"
        acknowledge(policy_of(getattr(event_log, attribute)), finding, f"{reason} {owner_note}")
