"""The stateful resources every construct makes the same way (one definition of "durable")."""

from __future__ import annotations

import json

import jsii
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_apigatewayv2 import IHttpRouteAuthorizer
from constructs import Construct

from onceflow.infra.common import CommonProps, TableOptions


def durable_table(
    scope: Construct,
    construct_id: str,
    options: TableOptions,
    common: CommonProps,
    partition_key: dynamodb.Attribute,
    sort_key: dynamodb.Attribute | None = None,
    *,
    stream: dynamodb.StreamViewType | None = None,
) -> dynamodb.Table:
    """Encrypted, point-in-time recovery, billed as `options` says (on-demand by default); deletion-protected when retained."""
    removal_policy = options.removal(common)
    return dynamodb.Table(
        scope,
        construct_id,
        partition_key=partition_key,
        sort_key=sort_key,
        billing_mode=options.billing_mode,
        read_capacity=options.read_capacity,
        write_capacity=options.write_capacity,
        encryption=dynamodb.TableEncryption.AWS_MANAGED,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
        deletion_protection=removal_policy == RemovalPolicy.RETAIN,
        removal_policy=removal_policy,
        stream=stream,
    )


def encrypted_queue(
    scope: Construct,
    construct_id: str,
    common: CommonProps,
    *,
    visibility_seconds: int | None = None,
    dead_letter: sqs.DeadLetterQueue | None = None,
) -> sqs.Queue:
    """SQS-managed encryption, TLS only, the longest retention (14 days); SQS's default visibility unless given."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(14),
        visibility_timeout=Duration.seconds(visibility_seconds) if visibility_seconds is not None else None,
        dead_letter_queue=dead_letter,
        removal_policy=common.removal_policy,
    )


def throttled_http_api(
    scope: Construct,
    common: CommonProps,
    *,
    description: str,
    authorizer: IHttpRouteAuthorizer,
    rate_limit: int,
    burst_limit: int,
    extra_log_fields: dict[str, str] | None = None,
) -> tuple[apigw.HttpApi, apigw.HttpStage, logs.LogGroup]:
    """An HTTP API whose every route needs `authorizer`, with one throttled `$default` stage writing JSON access logs."""
    access_logs = logs.LogGroup(scope, "ApiAccessLogs", retention=common.log_retention, removal_policy=common.removal_policy)
    http_api = apigw.HttpApi(scope, "HttpApi", description=description, default_authorizer=authorizer, create_default_stage=False)
    stage = apigw.HttpStage(
        scope,
        "HttpApiStage",
        http_api=http_api,
        stage_name="$default",
        auto_deploy=True,
        throttle=apigw.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
        access_log_settings=JsonAccessLogs(access_logs, extra_log_fields),
    )
    return http_api, stage, access_logs


@jsii.implements(apigw.IAccessLogSettings)
class JsonAccessLogs:
    """Structured (JSON) access logs of the API stage into `log_group`."""

    def __init__(self, log_group: logs.ILogGroup, extra_fields: dict[str, str] | None = None) -> None:
        self._log_group = log_group
        self._extra_fields = extra_fields or {}

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return apigw.LogGroupLogDestination(self._log_group)

    @property
    def format(self) -> apigw_v1.AccessLogFormat:
        fields = {
            "requestId": "$context.requestId",
            "routeKey": "$context.routeKey",
            "status": "$context.status",
            "caller": "$context.identity.caller",
            "latencyMs": "$context.responseLatency",
            "error": "$context.error.message",
            "integrationError": "$context.integrationErrorMessage",
        }
        return apigw_v1.AccessLogFormat.custom(json.dumps({**fields, **self._extra_fields}))
