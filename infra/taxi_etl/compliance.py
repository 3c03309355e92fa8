"""The taxi ETL saga's cdk-nag acknowledgements, each for one resource with its reason."""

from __future__ import annotations

from typing import Protocol

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.aws_secretsmanager import Secret

from onceflow.infra.compliance import acknowledge, logical_id, policy_of


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
    if isinstance(saga.api_key_secret, Secret):
        acknowledge(
            saga.api_key_secret.node.default_child,  # type: ignore[arg-type]
            "AwsSolutions::AwsSolutions-SMG4",
            "A shared API key that clients hold: rotating it needs the clients to change keys too, so it is rotated by the "
            "operator (docs/taxi-etl.md: rotating the key) rather than by a rotation Lambda on a schedule.",
        )
