"""The taxi ETL saga's cdk-nag acknowledgements, each for one resource with its reason."""

from __future__ import annotations

from typing import Protocol

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.aws_secretsmanager import Secret

from onceflow.infra.compliance import acknowledge, logical_id, policy_of
from onceflow.runtime.taxi_etl import contract


class TaxiEtlResources(Protocol):
    """What these acknowledgements name: TaxiEtlSaga's resources (a protocol, so this module does not
    import the construct that calls it)."""

    @property
    def validate_function(self) -> lambda_.Function: ...
    @property
    def transform_function(self) -> lambda_.Function: ...
    @property
    def store_function(self) -> lambda_.Function: ...
    @property
    def flag_function(self) -> lambda_.Function: ...
    @property
    def api_function(self) -> lambda_.Function: ...
    @property
    def authorizer_function(self) -> lambda_.Function: ...
    @property
    def row_state_function(self) -> lambda_.Function: ...
    @property
    def state_machine(self) -> sfn.StateMachine: ...
    @property
    def execution_log_level(self) -> sfn.LogLevel: ...
    @property
    def api_key_secret(self) -> secretsmanager.ISecret: ...
    @property
    def ingest_bucket(self) -> s3.Bucket: ...
    @property
    def load_starter_dead_letter_queue(self) -> sqs.Queue: ...
    @property
    def bulk_plan_function(self) -> lambda_.Function: ...
    @property
    def bulk_chunk_function(self) -> lambda_.Function: ...
    @property
    def bulk_report_function(self) -> lambda_.Function: ...
    @property
    def loads_api_function(self) -> lambda_.Function: ...
    @property
    def load_starter_function(self) -> lambda_.Function: ...
    @property
    def bulk_state_machine(self) -> sfn.StateMachine: ...


def acknowledge_taxi_etl(saga: TaxiEtlResources) -> None:
    """TaxiEtlSaga's cdk-nag acknowledgements, each on one of its resources with the reason it holds there
    (the saga adds them itself unless built with acknowledge_findings=False)."""
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
            "ALL with execution data adds about 60 % to the batch route's cost per row (docs/taxi-etl.md, cost table).",
        )
        acknowledge(
            saga.bulk_state_machine.node.default_child,  # type: ignore[arg-type]
            "AwsSolutions::AwsSolutions-SF1",
            f"Logs {saga.execution_log_level.value} events by configuration (taxi_etl.execution_log_level), as the per-batch "
            "state machine does: failed loads are logged, every load's report is kept under loads/ of the ingest bucket, and "
            "no row content reaches the logs.",
        )
    state_machine_policy = saga.state_machine.role.node.find_child("DefaultPolicy").node.default_child
    for function in (saga.validate_function, saga.transform_function, saga.store_function, saga.flag_function):
        acknowledge(
            state_machine_policy,  # type: ignore[arg-type]
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<{logical_id(function)}.Arn>:*]",
            "lambda:InvokeFunction on this one function and its versions (CDK's grant for a Lambda task); no other function.",
        )
    acknowledge(
        state_machine_policy,  # type: ignore[arg-type]
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "Only actions without resource-level permissions use '*': the CloudWatch Logs delivery actions that execution "
        "logging needs (logs:CreateLogDelivery and friends) and X-Ray's PutTraceSegments/PutTelemetryRecords.",
    )
    state_machine_id = logical_id(saga.state_machine)
    executions = (
        "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
        f'{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"{state_machine_id}"}}]}}]}}:*'
    )
    acknowledge(
        policy_of(saga.api_function),
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{executions}]",
        "states:DescribeExecution on the executions of this one state machine, whose names are StoreRequestIds known only at "
        "run time; read-only, used to tell a repeated request from a reused Idempotency-Key.",
    )
    acknowledge_bulk_route(saga)
    if isinstance(saga.api_key_secret, Secret):
        acknowledge(
            saga.api_key_secret.node.default_child,  # type: ignore[arg-type]
            "AwsSolutions::AwsSolutions-SMG4",
            "A shared API key that clients hold: rotating it needs the clients to change keys too, so it is rotated by the "
            "operator (docs/taxi-etl.md: rotating the key) rather than by a rotation Lambda on a schedule.",
        )


def _executions(state_machine: sfn.StateMachine, suffix: str = "") -> str:
    """How cdk-nag prints the ARN pattern of a state machine's executions (CDK's grant_execution)."""
    return (
        "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
        f'{{"Fn::Select":[6,{{"Fn::Split":[":",{{"Ref":"{logical_id(state_machine)}"}}]}}]}}{suffix}:*'
    )


def acknowledge_bulk_route(saga: TaxiEtlResources) -> None:
    """The bulk route's acknowledgements: its prefix-scoped S3 grants, its state machine's invocations and
    Distributed Map policy, its functions' and queue's failure paths, and CDK's bucket notifications handler."""
    bucket = logical_id(saga.ingest_bucket)
    prefix_reasons = {
        contract.INGEST_PREFIX: "the files to load under incoming/ of the ingest bucket, named by their uploader at run time; "
        "read only (GetObjectVersion of the load's exact version; the loads API's HeadObject also GetObject), the prefix "
        "is as narrow as a static policy gets.",
        contract.LOADS_PREFIX: "a load's manifest, chunk summaries and report under loads/<LoadId>/ of the ingest bucket, "
        "named by the load id at run time; the prefix is as narrow as a static policy gets.",
    }
    prefix_users = {  # the functions granted object actions under each prefix
        contract.INGEST_PREFIX: (saga.bulk_plan_function, saga.bulk_chunk_function, saga.loads_api_function),
        contract.LOADS_PREFIX: (saga.bulk_plan_function, saga.bulk_chunk_function, saga.bulk_report_function, saga.loads_api_function),
    }
    for prefix, functions in prefix_users.items():
        for function in functions:
            acknowledge(policy_of(function), f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{prefix}*]", prefix_reasons[prefix])
    machine = saga.bulk_state_machine
    machine_policy = machine.role.node.find_child("DefaultPolicy").node.default_child
    acknowledge(
        machine_policy,  # type: ignore[arg-type]
        f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket}.Arn>/{contract.LOADS_PREFIX}*]",
        "The Distributed Map's ItemReader reads the load's manifest (loads/<LoadId>/manifest.json, named at run time); "
        "s3:GetObject only, under loads/ of the ingest bucket.",
    )
    for function in (saga.bulk_plan_function, saga.bulk_chunk_function, saga.bulk_report_function):
        acknowledge(
            machine_policy,  # type: ignore[arg-type]
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<{logical_id(function)}.Arn>:*]",
            "lambda:InvokeFunction on this one function and its versions (CDK's grant for a Lambda task); no other function.",
        )
    acknowledge(
        machine_policy,  # type: ignore[arg-type]
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "Only actions without resource-level permissions use '*': the CloudWatch Logs delivery actions that execution "
        "logging needs (logs:CreateLogDelivery and friends) and X-Ray's PutTraceSegments/PutTelemetryRecords.",
    )
    map_policy = machine.node.find_child("DistributedMapPolicy").node.default_child
    acknowledge(
        map_policy,  # type: ignore[arg-type]
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{_executions(machine)}]",
        "The Distributed Map runs each chunk as a child execution of this one state machine (named at run time): "
        "states:DescribeExecution and StopExecution on its executions only (CDK's policy for a Distributed Map).",
    )
    acknowledge(
        map_policy,  # type: ignore[arg-type]
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{_executions(machine, '/Chunks')}]",
        "states:RedriveExecution on the map runs of this one state machine's Chunks label (CDK's policy for a "
        "labelled Distributed Map); the runs are named at run time.",
    )
    for function in (saga.loads_api_function, saga.load_starter_function):
        acknowledge(
            policy_of(function),
            f"AwsSolutions::AwsSolutions-IAM5[Resource::{_executions(machine)}]",
            "states:DescribeExecution on the executions of the bulk state machine only, whose names are load ids known at run "
            "time; read-only, used to join a load already started or to start the next generation after a failed one.",
        )
    map_runs = _executions(machine, "/Chunks").replace(":execution:", ":mapRun:")
    acknowledge(
        policy_of(saga.loads_api_function),
        f"AwsSolutions::AwsSolutions-IAM5[Resource::{map_runs}]",
        "states:DescribeMapRun on the map runs of the bulk state machine's Chunks map only (named at run time), for a "
        "running load's progress; read-only.",
    )
    dead_letter_reasons = {
        saga.bulk_plan_function: "Invoked synchronously by the bulk state machine only; a failure returns to its Retry and "
        "Catch, which report the load failed, so there is no asynchronous event to keep.",
        saga.bulk_chunk_function: "Invoked synchronously by the bulk state machine's Distributed Map only; a failure returns "
        "to its Retry, then fails the map run, and the load's report lists the chunk as missing for a re-run.",
        saga.bulk_report_function: "Invoked synchronously by the bulk state machine only; a failure returns to its Retry, "
        "then fails the execution, whose history keeps the input.",
        saga.loads_api_function: "Invoked synchronously by API Gateway only; a failure is returned to the caller, who retries "
        "POST /loads with the same key and so reaches the same load.",
        saga.load_starter_function: "Invoked only by its SQS event source mapping, never asynchronously; failed messages go "
        "to the load starter queue's dead-letter queue through its redrive policy.",
    }
    for function, reason in dead_letter_reasons.items():
        acknowledge(function.node.default_child, "Serverless::Serverless-LambdaDLQ", reason)  # type: ignore[arg-type]
    for child in saga.load_starter_function.node.children:
        if isinstance(child, lambda_.EventSourceMapping):
            acknowledge(
                child.node.default_child,  # type: ignore[arg-type]
                "Serverless::Serverless-LambdaEventSourceMappingDestination",
                "An SQS event source mapping has no on-failure destination; a message that keeps failing moves to the "
                "load starter queue's dead-letter queue through the queue's redrive policy.",
            )
    acknowledge(
        saga.load_starter_dead_letter_queue.node.default_child,  # type: ignore[arg-type]
        "Serverless::Serverless-SQSRedrivePolicy",
        "This queue is itself a dead-letter queue; a redrive policy on it would only move the same failed messages once more.",
    )
    # CDK's stack-wide handler that puts the bucket's notification configuration (Custom::S3BucketNotifications).
    stack = Stack.of(saga.ingest_bucket)
    for child in stack.node.children:
        if child.node.id.startswith("BucketNotificationsHandler"):
            acknowledge(
                child.node.find_child("Role").node.default_child,  # type: ignore[arg-type]
                "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
                "CDK's own handler for S3 bucket notifications (a deploy-time custom resource, run only by CloudFormation): "
                "its role and policy are CDK's; it writes only its own logs and puts the ingest bucket's notification configuration.",
            )
