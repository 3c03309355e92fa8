"""cdk-nag 3 (policy-validation plugin) packs and per-resource acknowledgements.

Every acknowledgement names one resource and says why the finding is true but acceptable for
*that* resource. Nothing is suppressed stack-wide. A new finding fails synth (and the tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, App, Stack, Token, Validations
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.aws_lambda import EventSourceMapping, IFunction
from aws_cdk.aws_s3 import IBucket
from aws_cdk.aws_secretsmanager import Secret
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct

if TYPE_CHECKING:
    from infra.constructs.event_log import EventLog
    from infra.constructs.runner_stats import RunnerStatsPipeline
    from infra.constructs.taxi_etl import TaxiEtlSaga


def add_compliance_checks(app: App) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))


def acknowledge(resource: IConstruct, rule: str, reason: str) -> None:
    """rule like 'AwsSolutions::AwsSolutions-SQS3' or 'Serverless::Serverless-LambdaDLQ'."""
    Validations.of(resource).acknowledge(Acknowledgment(id=rule, reason=reason))


def acknowledge_runner_stats(pipeline: RunnerStatsPipeline) -> None:
    for rule in ("AwsSolutions::AwsSolutions-SQS3", "Serverless::Serverless-SQSRedrivePolicy"):
        acknowledge(
            pipeline.failure_queue.node.default_child,  # type: ignore[arg-type]
            rule,
            "This queue is itself the on-failure destination of the Kinesis event source mapping; "
            "a dead-letter queue behind it would only move the same records once more.",
        )
    acknowledge(
        pipeline.function.node.default_child,  # type: ignore[arg-type]
        "Serverless::Serverless-LambdaDLQ",
        "Invoked only by the Kinesis event source mapping, never asynchronously; failed batches go to "
        "the mapping's on-failure SQS destination instead of a function DLQ.",
    )


def _wildcard_finding(bucket: IBucket, prefix: str) -> str:
    """The IAM5 finding id of an object wildcard under `prefix` of a bucket this stack created."""
    stack = Stack.of(bucket)
    logical_id = stack.resolve(stack.get_logical_id(bucket.node.default_child))  # type: ignore[arg-type]
    return f"AwsSolutions::AwsSolutions-IAM5[Resource::<{logical_id}.Arn>/{prefix}*]"


def _policy_of(function: IFunction) -> IConstruct:
    return function.role.node.find_child("DefaultPolicy").node.default_child  # type: ignore[union-attr,return-value]


def acknowledge_event_log(event_log: EventLog) -> None:
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
        acknowledge(_policy_of(getattr(event_log, attribute)), _wildcard_finding(event_log.bucket, prefix), reason)


_BUCKET_WILDCARD_REASONS = {
    ("api_function", "payloads/"): "Presigned uploads and completion checks act on objects named "
    "payloads/<log>/<hash of the request id>, created at run time; the prefix is as narrow as a static policy gets.",
    ("api_function", "snapshots/"): "Readers get presigned downloads of snapshot chunks whose keys are hashes "
    "computed at build time; read-only and limited to the snapshots/ prefix.",
    ("worker_function", "snapshots/"): "The worker writes, reads and deletes chunk objects whose keys are hashes "
    "computed at build time; limited to the snapshots/ prefix of this bucket.",
    ("finalizer_function", "payloads/"): "Removes the pending tag of payload objects named at run time; "
    "s3:DeleteObjectTagging only, limited to the payloads/ prefix of this bucket.",
}


def acknowledge_imported_bucket(event_log: EventLog, owner_note: str) -> None:
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
        acknowledge(_policy_of(getattr(event_log, attribute)), finding, f"{reason} {owner_note}")


def _logical_id(construct: IConstruct) -> str:
    stack = Stack.of(construct)
    return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))  # type: ignore[arg-type]


def acknowledge_taxi_etl(saga: TaxiEtlSaga) -> None:
    dead_letter_reasons = {
        saga.validate_function: "Invoked synchronously by the state machine only; a failure returns to its Retry and Catch, "
        "which flag the rows, so there is no asynchronous event to keep.",
        saga.transform_function: "Invoked synchronously by the state machine only; a failure returns to its Retry and Catch, "
        "which flag the rows, so there is no asynchronous event to keep.",
        saga.store_function: "Invoked synchronously by the state machine only; a failure returns to its Retry and Catch, "
        "which flag the rows not stored, so there is no asynchronous event to keep.",
        saga.flag_function: "Invoked synchronously by the state machine's flag steps only; a failure fails the execution, "
        "whose history keeps the input for a redrive.",
        saga.api_function: "Invoked synchronously by API Gateway only; a failure is returned to the caller, who retries with "
        "the same line or Idempotency-Key and so reaches the same execution.",
        saga.authorizer_function: "Invoked synchronously by API Gateway as the route authorizer; a failure denies the request.",
        saga.row_state_function: "Invoked synchronously by API Gateway only, and only reads: a failure is returned to the caller, "
        "who asks again; there is no event to keep.",
    }
    for function, reason in dead_letter_reasons.items():
        acknowledge(function.node.default_child, "Serverless::Serverless-LambdaDLQ", reason)  # type: ignore[arg-type]
    if saga.execution_log_level != sfn.LogLevel.ALL:
        acknowledge(
            saga.state_machine.node.default_child,  # type: ignore[arg-type]
            "AwsSolutions::AwsSolutions-SF1",
            f"Logs {saga.execution_log_level.value} events by configuration (taxi_etl.execution_log_level): failed executions "
            "are logged, successful ones are kept in the execution history for 90 days, and no row content reaches the logs; "
            "ALL with execution data adds about 60 % to the batch route's cost per row (README, taxi cost table).",
        )
    state_machine_policy = saga.state_machine.role.node.find_child("DefaultPolicy").node.default_child
    for function in (saga.validate_function, saga.transform_function, saga.store_function, saga.flag_function):
        acknowledge(
            state_machine_policy,  # type: ignore[arg-type]
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<{_logical_id(function)}.Arn>:*]",
            "lambda:InvokeFunction on this one function and its versions (CDK's grant for a Lambda task); no other function.",
        )
    acknowledge(
        state_machine_policy,  # type: ignore[arg-type]
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "Only actions without resource-level permissions use '*': the CloudWatch Logs delivery actions that execution "
        "logging needs (logs:CreateLogDelivery and friends) and X-Ray's PutTraceSegments/PutTelemetryRecords.",
    )
    state_machine_id = _logical_id(saga.state_machine)
    executions = (
        "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
        f'{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"{state_machine_id}"}}]}}]}}:*'
    )
    acknowledge(
        _policy_of(saga.api_function),
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{executions}]",
        "states:DescribeExecution on the executions of this one state machine, whose names are StoreRequestIds known only at "
        "run time; read-only, used to tell a repeated request from a reused Idempotency-Key.",
    )
    if isinstance(saga.api_key_secret, Secret):
        acknowledge(
            saga.api_key_secret.node.default_child,  # type: ignore[arg-type]
            "AwsSolutions::AwsSolutions-SMG4",
            "A shared API key that clients hold: rotating it needs the clients to change keys too, so it is rotated by the "
            "operator (README: rotating the API key) rather than by a rotation Lambda on a schedule.",
        )
