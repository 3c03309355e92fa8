"""Properties of the synthesized event-log stack, for every environment.

The templates come from the session fixtures `dev_templates` / `prod_templates` (tests/conftest.py):
`app.build_app` with cdk.json's context and cdk-nag on, i.e. what `cdk synth -c env=...` produces.
Expected permissions, environment names, routes and filters are written out literally here (not
derived from infra/event_log/construct.py), so a construct edit that changes them shows up as a
failing test, not as a silent drift. Sizes and limits are read from the environment's config.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Match, Template

from devtools.aws.template_resources import resources_of_type
from onceflow.infra.config import ConfigError, EnvConfig, load_config
from onceflow.infra.event_log.construct import EventLog
from runtime.event_log.api_wiring import ApiSettings
from runtime.event_log.finalizer_wiring import FinalizerSettings
from runtime.event_log.pending_check_wiring import PendingCheckSettings
from runtime.event_log.router_wiring import RouterSettings
from runtime.event_log.worker_wiring import WorkerSettings
from runtime.shared.contract import TRACING_MODE_VARIABLE
from tests.infra.template_queries import (
    Grants,
    RecordingEnvironment,
    arn,
    as_list,
    function,
    key,
    log_group_of,
    ref,
    resolved_environment,
    resource,
    role_of,
    sdk_layer_ref,
    unconditional,
)

ENVS = ("dev", "prod")

# What the brief fixes per environment (independent of infra/config.py on purpose).
EXPECTED = {
    "dev": {"removal": "Delete", "protected": False, "log_retention_days": 7},
    "prod": {"removal": "Retain", "protected": True, "log_retention_days": 90},
}

API = "runtime.event_log.api_handler.handler"
ROUTER = "runtime.event_log.router_handler.handler"
WORKER = "runtime.event_log.worker_handler.handler"
FINALIZER = "runtime.event_log.finalizer_handler.handler"
PENDING_CHECK = "runtime.event_log.pending_check_handler.handler"
HANDLERS = (API, ROUTER, WORKER, FINALIZER, PENDING_CHECK)
SERVICE_NAMES = {
    API: "event-log-api",
    ROUTER: "event-log-router",
    WORKER: "event-log-snapshots",
    FINALIZER: "event-log-payloads",
    PENDING_CHECK: "event-log-pending-check",
}
SETTINGS_CLASSES: dict[str, Any] = {
    API: ApiSettings,
    ROUTER: RouterSettings,
    WORKER: WorkerSettings,
    FINALIZER: FinalizerSettings,
    PENDING_CHECK: PendingCheckSettings,
}

# Exactly the variables each handler's settings class reads (runtime/event_log/<function>_wiring.py).
ENVIRONMENT_NAMES = {
    API: {
        "LOG_TABLE",
        "BUCKET",
        "SNAPSHOT_EVERY",
        "MAX_VALUE_BYTES",
        "MAX_BODY_BYTES",
        "PAYLOAD_MAX_BYTES",
        "PENDING_TAG",
        "URL_EXPIRY_SECONDS",
        "READ_PAGE_LIMIT",
    },
    ROUTER: {"SNAPSHOT_QUEUE_URL", "PAYLOAD_QUEUE_URL"},
    WORKER: {
        "LOG_TABLE",
        "PENDING_TABLE",
        "BUCKET",
        "SNAPSHOT_QUEUE_URL",
        "CHUNK_BYTES",
        "LEASE_SECONDS",
        "HANDOFF_MARGIN_MS",
        "BACKOFF_BASE_SECONDS",
        "BACKOFF_CAP_SECONDS",
    },
    FINALIZER: {"BUCKET", "PAYLOAD_QUEUE_URL"},
    # SNAPSHOT_QUEUE_URL and the resend cap only when config.event_log.resend_stuck_snapshots is on (on in both environments)
    PENDING_CHECK: {
        "PENDING_TABLE",
        "STUCK_AFTER_SECONDS",
        "LEASE_SECONDS",
        "RESEND_STUCK_SNAPSHOTS",
        "SNAPSHOT_QUEUE_URL",
        "MAX_CLAIMS_TO_RESEND",
    },
}
FACTORY_ENV_NAMES = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL", TRACING_MODE_VARIABLE}

# Logical ids: stable on purpose (a changed logical id replaces the resource, i.e. loses the data).
LOG_TABLE = "EventLogLogTable825C2E4F"
PENDING_TABLE = "EventLogPendingSnapshotsTableF14172F7"
BUCKET = "EventLogBucket7DE35D8B"
ACCESS_LOG_BUCKET = "EventLogAccessLogBucketD0FAA2FD"
SNAPSHOT_QUEUE = "EventLogSnapshotQueue3BCA2897"
SNAPSHOT_DLQ = "EventLogSnapshotDeadLetterQueue755EF947"
PAYLOAD_QUEUE = "EventLogPayloadQueueD0528EB6"
PAYLOAD_DLQ = "EventLogPayloadDeadLetterQueueA4620FE4"
STREAM_FAILURE_QUEUE = "EventLogStreamFailureQueue2D32FEEA"
API_ACCESS_LOGS = "EventLogApiAccessLogsFEB0772A"
TABLES = {LOG_TABLE, PENDING_TABLE}
BUCKETS = {BUCKET, ACCESS_LOG_BUCKET}
QUEUES = {SNAPSHOT_QUEUE, SNAPSHOT_DLQ, PAYLOAD_QUEUE, PAYLOAD_DLQ, STREAM_FAILURE_QUEUE}

SEGMENT_INDEX = "SegmentEvents"
# The router's one filter, with the kinds sorted.
ROUTER_FILTER = {"eventName": ["INSERT"], "dynamodb": {"NewImage": {"kind": {"S": ["LargePayload", "Snapshot"]}}}}
ROUTES = {"POST /logs/{logId}/entries", "POST /logs/{logId}/payloads", "POST /logs/{logId}/payloads/complete", "GET /logs/{logId}/snapshot"}
STREAM_RETENTION_SECONDS = 24 * 3600  # a DynamoDB stream keeps records 24 h
MAX_RETRY_ATTEMPTS = 10_000  # the stream event source's upper bound; -1 would mean "forever"
MAX_RECEIVE_COUNT = 1000  # SQS's upper bound for a redrive policy
POWERTOOLS_PARAMETER = "/aws/service/powertools/python/arm64/python3.13/3.37.0"

XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
SQS_SEND = {"sqs:SendMessage"}  # the code's sends, to queue URLs from the environment
SQS_DESTINATION = {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}  # CDK's SqsDlq grant
SQS_CONSUME = {"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
STREAM_READ = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture
def template_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig) -> dict[str, Any]:
    return env_templates[f"{config.stack_prefix}-EventLog"]


def objects_under(bucket_id: str, prefix: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [arn(bucket_id), f"/{prefix}*"]]}


def statements_of(template_json: dict[str, Any], handler: str) -> list[dict[str, Any]]:
    """The statements of the one inline policy attached to the function's role."""
    role_id = role_of(template_json, handler)
    policies = [p for p in resources_of_type(template_json, "AWS::IAM::Policy").values() if ref(role_id) in p["Properties"]["Roles"]]
    assert len(policies) == 1, f"expected one inline policy on the role of {handler}, found {len(policies)}"
    assert policies[0]["Properties"]["Roles"] == [ref(role_id)], "a policy shared between roles"
    return list(policies[0]["Properties"]["PolicyDocument"]["Statement"])


def granted(template_json: dict[str, Any], handler: str) -> Grants:
    """(resource, condition) -> every action the function's role is allowed on it, over all statements."""
    grants: Grants = {}
    for statement in statements_of(template_json, handler):
        assert statement["Effect"] == "Allow", statement
        assert not {"NotAction", "NotResource", "NotPrincipal", "Principal"} & set(statement), statement
        condition = key(statement["Condition"]) if "Condition" in statement else None
        for res in as_list(statement["Resource"]):
            grants.setdefault((key(res), condition), set()).update(as_list(statement["Action"]))
    return grants


def expected_grants(template_json: dict[str, Any], handler: str) -> Grants:
    """What each function may do, written out per resource (X-Ray's "*" is checked on its own)."""
    own_logs = (arn(log_group_of(template_json, handler)), LOG_ACTIONS)
    if handler == API:
        return unconditional(
            own_logs,
            # appends are a transaction of a Put and an Update; reads are Get and Query; no index
            (arn(LOG_TABLE), {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"}),
            # presigned tagged uploads and completion checks under payloads/, downloads of chunks
            (objects_under(BUCKET, "payloads/"), {"s3:PutObject", "s3:PutObjectTagging", "s3:GetObject"}),
            (objects_under(BUCKET, "snapshots/"), {"s3:GetObject"}),
            # a HeadObject of a payload not uploaded yet answers 404, not 403
            (arn(BUCKET), {"s3:ListBucket"}),
        )
    if handler == ROUTER:
        return unconditional(
            own_logs,
            (arn(SNAPSHOT_QUEUE), SQS_SEND),
            (arn(PAYLOAD_QUEUE), SQS_SEND),
            # The stream mapping's on-failure destination: Lambda sends the failed batch's metadata
            # there with the function's execution role, so the role needs SendMessage on it.
            (arn(STREAM_FAILURE_QUEUE), SQS_DESTINATION),
            ({"Fn::GetAtt": [LOG_TABLE, "StreamArn"]}, STREAM_READ),
        )
    if handler == WORKER:
        return unconditional(
            own_logs,
            (arn(LOG_TABLE), {"dynamodb:GetItem", "dynamodb:UpdateItem"}),
            ({"Fn::Join": ["", [arn(LOG_TABLE), f"/index/{SEGMENT_INDEX}"]]}, {"dynamodb:Query"}),
            (arn(PENDING_TABLE), {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}),
            (objects_under(BUCKET, "snapshots/"), {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}),
            # lists its prefixes; a GetObject of a root not written yet answers 404, not 403 (an
            # s3:prefix condition would not apply to GetObject)
            (arn(BUCKET), {"s3:ListBucket"}),
            # re-enqueues (send) and consumes (its event source) the snapshot queue
            (arn(SNAPSHOT_QUEUE), SQS_SEND | SQS_CONSUME),
        )
    if handler == PENDING_CHECK:
        # reads the pending rows, and re-sends the build message of stuck ones (resend_stuck_snapshots)
        return unconditional(own_logs, (arn(PENDING_TABLE), {"dynamodb:Scan"}), (arn(SNAPSHOT_QUEUE), SQS_SEND))
    assert handler == FINALIZER
    return unconditional(
        own_logs,
        (objects_under(BUCKET, "payloads/"), {"s3:DeleteObjectTagging"}),
        (arn(PAYLOAD_QUEUE), SQS_CONSUME),
    )


def mapping_of(template_json: dict[str, Any], handler: str) -> dict[str, Any]:
    function_id, _ = function(template_json, handler)
    mappings = [
        m["Properties"]
        for m in resources_of_type(template_json, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == ref(function_id)
    ]
    assert len(mappings) == 1, f"expected one event source mapping for {handler}, found {len(mappings)}"
    return dict(mappings[0])


# --- 1. the router's stream event source mapping ----------------------------------------------


def test_router_mapping_reads_the_log_stream_and_keeps_only_inserted_side_effect_entries(
    template: Template, template_json: dict[str, Any], config: EnvConfig
) -> None:
    # Given the router and the log table's stream
    router_id, _ = function(template_json, ROUTER)
    settings = config.event_log
    # When we look at the router's event source mapping
    mapping = mapping_of(template_json, ROUTER)
    # Then it reads the log table's stream from the oldest record, bisects failing batches,
    # reports item failures and sends exhausted batches to the stream failure queue
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": ref(router_id),
            "EventSourceArn": {"Fn::GetAtt": [LOG_TABLE, "StreamArn"]},
            "StartingPosition": "TRIM_HORIZON",
            "BatchSize": settings.router_batch_size,
            "BisectBatchOnFunctionError": True,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "MaximumRetryAttempts": settings.router_retry_attempts,
            "MaximumRecordAgeInSeconds": settings.router_max_record_age_seconds,
            "DestinationConfig": {"OnFailure": {"Destination": arn(STREAM_FAILURE_QUEUE)}},
        },
    )
    # and its one filter is exactly: an INSERT whose new image's kind is Snapshot or LargePayload
    filters = mapping["FilterCriteria"]["Filters"]
    assert len(filters) == 1, filters
    pattern = json.loads(filters[0]["Pattern"])
    kinds = pattern["dynamodb"]["NewImage"]["kind"]["S"]
    assert len(kinds) == len(set(kinds)), kinds
    pattern["dynamodb"]["NewImage"]["kind"]["S"] = sorted(kinds)  # the order of the alternatives does not matter
    assert pattern == ROUTER_FILTER


def test_router_retries_and_record_age_are_bounded_by_the_stream_retention(template_json: dict[str, Any]) -> None:
    # Given the router's mapping
    mapping = mapping_of(template_json, ROUTER)
    # When we read its retry and age limits
    retries, max_age = mapping["MaximumRetryAttempts"], mapping["MaximumRecordAgeInSeconds"]
    # Then neither is infinite (-1), and records are given up on before the stream drops them (24 h)
    assert 0 <= retries <= MAX_RETRY_ATTEMPTS
    assert 60 <= max_age <= STREAM_RETENTION_SECONDS


def test_the_template_has_exactly_the_three_event_source_mappings(template: Template, template_json: dict[str, Any]) -> None:
    # Given the stack
    # When we count event source mappings
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 3)
    # Then the router, the worker and the finalizer each have one; the API has none
    for handler in (ROUTER, WORKER, FINALIZER):
        mapping_of(template_json, handler)
    api_id, _ = function(template_json, API)
    assert all(
        m["Properties"]["FunctionName"] != ref(api_id) for m in resources_of_type(template_json, "AWS::Lambda::EventSourceMapping").values()
    )


# --- 2. the snapshot queue, leases and dead-letter queues -------------------------------------


def test_snapshot_queue_visibility_is_six_worker_timeouts_and_the_lease_lies_between(template_json: dict[str, Any]) -> None:
    # Given the snapshot queue and the worker, as synthesized
    queue = resource(template_json, SNAPSHOT_QUEUE, "AWS::SQS::Queue")["Properties"]
    _, worker = function(template_json, WORKER)
    # When we read the queue's visibility timeout, the worker's timeout and its lease
    visibility = queue["VisibilityTimeout"]
    timeout = worker["Properties"]["Timeout"]
    lease = int(worker["Properties"]["Environment"]["Variables"]["LEASE_SECONDS"])
    # Then the visibility is at least six worker timeouts (AWS's advice for SQS event sources), and
    # a lease outlives the worker holding it but expires before the message becomes visible again
    assert visibility >= 6 * timeout
    assert timeout < lease < visibility


def test_payload_queue_visibility_is_six_finalizer_timeouts(template_json: dict[str, Any]) -> None:
    # Given the payload queue and the finalizer
    queue = resource(template_json, PAYLOAD_QUEUE, "AWS::SQS::Queue")["Properties"]
    _, finalizer = function(template_json, FINALIZER)
    # When we compare the queue's visibility timeout with the finalizer's timeout
    # Then it is at least six of them
    assert queue["VisibilityTimeout"] >= 6 * finalizer["Properties"]["Timeout"]


@pytest.mark.parametrize(
    ("queue_id", "dead_letter_id", "setting"),
    [
        pytest.param(SNAPSHOT_QUEUE, SNAPSHOT_DLQ, "snapshot_max_receives", id="snapshot"),
        pytest.param(PAYLOAD_QUEUE, PAYLOAD_DLQ, "finalizer_max_receives", id="payload"),
    ],
)
def test_side_effect_queue_redrives_to_its_own_dead_letter_queue(
    template_json: dict[str, Any], config: EnvConfig, queue_id: str, dead_letter_id: str, setting: str
) -> None:
    # Given a side-effect queue and the dead-letter queue meant for it
    queue = resource(template_json, queue_id, "AWS::SQS::Queue")["Properties"]
    dead_letter = resource(template_json, dead_letter_id, "AWS::SQS::Queue")["Properties"]
    # When we read its redrive policy
    redrive = queue["RedrivePolicy"]
    # Then it moves a message to that dead-letter queue after the configured, bounded number of receives
    assert redrive == {"deadLetterTargetArn": arn(dead_letter_id), "maxReceiveCount": getattr(config.event_log, setting)}
    assert 1 <= redrive["maxReceiveCount"] <= MAX_RECEIVE_COUNT
    # and the dead-letter queue is the end of the line
    assert "RedrivePolicy" not in dead_letter


def test_no_two_queues_share_a_dead_letter_queue_and_nothing_else_redrives(template_json: dict[str, Any]) -> None:
    # Given every queue of the stack
    queues = resources_of_type(template_json, "AWS::SQS::Queue")
    assert set(queues) == QUEUES
    # When we collect the redrive targets
    targets = {
        lid: q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] for lid, q in queues.items() if "RedrivePolicy" in q["Properties"]
    }
    # Then only the two side-effect queues redrive, each to its own dead-letter queue
    assert targets == {SNAPSHOT_QUEUE: arn(SNAPSHOT_DLQ), PAYLOAD_QUEUE: arn(PAYLOAD_DLQ)}


def test_worker_and_finalizer_consume_their_queues_with_partial_batch_responses(template: Template, template_json: dict[str, Any]) -> None:
    # Given the SQS consumers
    worker_id, _ = function(template_json, WORKER)
    finalizer_id, _ = function(template_json, FINALIZER)
    # When we look at their mappings
    # Then the worker takes one snapshot message per invocation from the snapshot queue, reporting
    # item failures, with a bounded concurrency (SQS mappings allow 2..1000)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": ref(worker_id),
            "EventSourceArn": arn(SNAPSHOT_QUEUE),
            "BatchSize": 1,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )
    concurrency = mapping_of(template_json, WORKER)["ScalingConfig"]["MaximumConcurrency"]
    assert 2 <= concurrency <= 1000
    # and the finalizer reads the payload queue, reporting item failures
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionName": ref(finalizer_id), "EventSourceArn": arn(PAYLOAD_QUEUE), "FunctionResponseTypes": ["ReportBatchItemFailures"]},
    )


# --- 3. encryption, TLS and the bucket ---------------------------------------------------------


def test_every_table_is_encrypted_on_demand_with_point_in_time_recovery(template: Template, template_json: dict[str, Any]) -> None:
    # Given the log table and the pending-snapshots table
    assert set(resources_of_type(template_json, "AWS::DynamoDB::Table")) == TABLES
    # When we look at encryption, billing and backups
    # Then every table has server-side encryption, on-demand billing and point-in-time recovery
    template.all_resources_properties(
        "AWS::DynamoDB::Table",
        {
            "SSESpecification": {"SSEEnabled": True},
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )


def test_log_table_streams_new_images_and_indexes_segment_events(template_json: dict[str, Any]) -> None:
    # Given the two tables
    log_table = resource(template_json, LOG_TABLE, "AWS::DynamoDB::Table")["Properties"]
    pending = resource(template_json, PENDING_TABLE, "AWS::DynamoDB::Table")["Properties"]
    # When we look at their keys, streams and indexes
    # Then the log table is keyed (log_id, seq), streams NEW_IMAGE and has the SegmentEvents index
    # keyed (segment_key HASH, cell_order RANGE)
    assert log_table["KeySchema"] == [{"AttributeName": "log_id", "KeyType": "HASH"}, {"AttributeName": "seq", "KeyType": "RANGE"}]
    assert log_table["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    (index,) = log_table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == SEGMENT_INDEX
    assert index["KeySchema"] == [{"AttributeName": "segment_key", "KeyType": "HASH"}, {"AttributeName": "cell_order", "KeyType": "RANGE"}]
    types = {a["AttributeName"]: a["AttributeType"] for a in log_table["AttributeDefinitions"]}
    assert types == {"log_id": "S", "seq": "N", "segment_key": "S", "cell_order": "S"}
    # and the pending-snapshots table has neither a stream nor an index
    assert pending["KeySchema"] == log_table["KeySchema"]
    assert "StreamSpecification" not in pending and "GlobalSecondaryIndexes" not in pending


def test_every_queue_is_encrypted_and_refuses_plain_http(template: Template, template_json: dict[str, Any]) -> None:
    # Given the five queues
    assert set(resources_of_type(template_json, "AWS::SQS::Queue")) == QUEUES
    template.all_resources_properties("AWS::SQS::Queue", {"SqsManagedSseEnabled": True})
    # When we look for each queue's policy
    for queue_id in QUEUES:
        # Then a policy on that queue denies every request that does not use TLS
        template.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [ref(queue_id)],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            {
                                "Effect": "Deny",
                                "Action": "sqs:*",
                                "Principal": {"AWS": "*"},
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                "Resource": arn(queue_id),
                            }
                        ]
                    )
                },
            },
        )


def test_every_bucket_is_encrypted_private_and_tls_only(template: Template, template_json: dict[str, Any]) -> None:
    # Given the payload/snapshot bucket and its access-log bucket
    assert set(resources_of_type(template_json, "AWS::S3::Bucket")) == BUCKETS
    # When we look at their encryption and public access
    # Then both are encrypted and block every kind of public access
    template.all_resources_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": Match.any_value()}}]
            },
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
        },
    )
    for bucket in resources_of_type(template_json, "AWS::S3::Bucket").values():
        (rule,) = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms", "aws:kms:dsse"}
    # and each bucket's policy denies every request that does not use TLS, on the bucket and its objects
    for bucket_id in BUCKETS:
        template.has_resource_properties(
            "AWS::S3::BucketPolicy",
            {
                "Bucket": ref(bucket_id),
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Principal": {"AWS": "*"},
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                "Resource": [arn(bucket_id), {"Fn::Join": ["", [arn(bucket_id), "/*"]]}],
                            }
                        ]
                    )
                },
            },
        )


def test_bucket_is_versioned_and_logs_access_to_the_access_log_bucket(template: Template, template_json: dict[str, Any]) -> None:
    # Given the payload/snapshot bucket
    bucket = resource(template_json, BUCKET, "AWS::S3::Bucket")["Properties"]
    # When we look at versioning and server access logging
    # Then it is versioned and its access logs go to the access-log bucket
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["LoggingConfiguration"]["DestinationBucketName"] == ref(ACCESS_LOG_BUCKET)
    # and the access-log bucket lets S3's logging service write for this bucket only
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": ref(ACCESS_LOG_BUCKET),
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Allow",
                                "Action": "s3:PutObject",
                                "Principal": {"Service": "logging.s3.amazonaws.com"},
                                "Condition": Match.object_like({"ArnLike": {"aws:SourceArn": arn(BUCKET)}}),
                            }
                        )
                    ]
                )
            },
        },
    )


def test_bucket_expires_abandoned_uploads_and_old_versions(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the bucket's lifecycle rules and the configured pending tag
    rules = resource(template_json, BUCKET, "AWS::S3::Bucket")["Properties"]["LifecycleConfiguration"]["Rules"]
    settings = config.event_log
    tag_name, _, tag_value = settings.pending_tag.partition("=")
    assert (tag_name, tag_value) == ("onceflow-pending", "true")
    # When we pick the rule for tagged uploads and the rule for old versions
    pending = [r for r in rules if "TagFilters" in r]
    noncurrent = [r for r in rules if "NoncurrentVersionExpiration" in r]
    # Then objects under payloads/ still carrying the pending tag expire after the configured days
    assert len(pending) == 1, rules
    assert pending[0]["Id"]
    assert {k: v for k, v in pending[0].items() if k != "Id"} == {
        "Status": "Enabled",
        "Prefix": "payloads/",
        "TagFilters": [{"Key": tag_name, "Value": tag_value}],
        "ExpirationInDays": settings.pending_expiry_days,
    }
    # and overwritten versions expire after the configured days
    assert len(noncurrent) == 1, rules
    assert noncurrent[0]["Status"] == "Enabled"
    assert noncurrent[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": settings.noncurrent_expiry_days}
    # and no rule expires current objects other than the tagged pending uploads
    assert [r for r in rules if "ExpirationInDays" in r or "ExpirationDate" in r] == pending


# --- 4. IAM least privilege, per function ------------------------------------------------------


def test_every_role_is_lambdas_own_without_managed_or_embedded_policies(template_json: dict[str, Any]) -> None:
    # Given the five functions, each with its own role
    roles = {role_of(template_json, handler) for handler in HANDLERS}
    assert len(roles) == len(HANDLERS)
    # When we look at the stack's roles and policies
    assert set(resources_of_type(template_json, "AWS::IAM::Role")) == roles
    assert len(resources_of_type(template_json, "AWS::IAM::Policy")) == len(HANDLERS)
    # Then only Lambda may assume each role, and each carries no managed or embedded policies
    for role_id in roles:
        role = resource(template_json, role_id, "AWS::IAM::Role")["Properties"]
        assert "ManagedPolicyArns" not in role and "Policies" not in role
        assert role["AssumeRolePolicyDocument"]["Statement"] == [
            {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
        ]


@pytest.mark.parametrize("handler", HANDLERS)
def test_each_function_has_exactly_its_actions_on_its_own_resources(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's inline policy, resource by resource (the "*" statement is tested below)
    grants = {target: actions for target, actions in granted(template_json, handler).items() if target[0] != key("*")}
    # When we compare it with what the function needs
    expected = expected_grants(template_json, handler)
    # Then every resource it names is one it needs, with exactly the actions it needs there
    assert set(grants) == set(expected), f"{handler}: unexpected {set(grants) - set(expected)}, missing {set(expected) - set(grants)}"
    for target, actions in expected.items():
        assert grants[target] == actions, f"{handler} on {target}: extra {grants[target] - actions}, missing {actions - grants[target]}"


@pytest.mark.parametrize("handler", HANDLERS)
def test_only_the_xray_statement_uses_a_wildcard_resource(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's statements
    statements = statements_of(template_json, handler)
    # When we pick those naming the resource "*"
    wildcard = [s for s in statements if "*" in as_list(s["Resource"])]
    # Then there is one, holding only actions that support no resource-level permissions: X-Ray's,
    # and dynamodb:ListStreams for the stream consumer (the cdk-nag IAM5[Resource::*]
    # acknowledgement on every role relies on this)
    allowed = XRAY_ACTIONS | ({"dynamodb:ListStreams"} if handler == ROUTER else set())
    assert len(wildcard) == 1, wildcard
    assert as_list(wildcard[0]["Resource"]) == ["*"]
    assert set(as_list(wildcard[0]["Action"])) == allowed, f"{handler}: unexpected actions on '*': {wildcard[0]['Action']}"


@pytest.mark.parametrize("handler", HANDLERS)
def test_no_wildcard_actions(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's statements
    # When we look at every action
    actions = {action for statement in statements_of(template_json, handler) for action in as_list(statement["Action"])}
    # Then none is a wildcard (no dynamodb:*, s3:*, sqs:*, s3:Get*, ...)
    assert not [action for action in actions if "*" in action], actions


def test_no_function_touches_another_functions_resources(template_json: dict[str, Any]) -> None:
    # Given every stateful resource and the functions allowed to use it (written out)
    owners = {
        LOG_TABLE: {API, ROUTER, WORKER},  # the router only through the table's stream
        PENDING_TABLE: {WORKER, PENDING_CHECK},
        BUCKET: {API, WORKER, FINALIZER},
        ACCESS_LOG_BUCKET: set(),
        SNAPSHOT_QUEUE: {ROUTER, WORKER, PENDING_CHECK},
        PAYLOAD_QUEUE: {ROUTER, FINALIZER},
        STREAM_FAILURE_QUEUE: {ROUTER},
        SNAPSHOT_DLQ: set(),
        PAYLOAD_DLQ: set(),
    }
    # When we look for each resource's logical id in each function's policy
    for handler in HANDLERS:
        policy = json.dumps(statements_of(template_json, handler))
        for logical_id, allowed in owners.items():
            # Then only its owners mention it
            assert (f'"{logical_id}"' in policy) == (handler in allowed), f"{handler} and {logical_id}"


# --- 5. environments and the runtime's settings ------------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_environment_names_are_exactly_what_the_settings_class_reads(
    template_json: dict[str, Any], config: EnvConfig, handler: str
) -> None:
    # Given the function's environment
    _, fn = function(template_json, handler)
    variables: dict[str, Any] = fn["Properties"]["Environment"]["Variables"]
    # When we split it into the factory's Powertools names and the function's own
    # Then the Powertools names are set, and the rest are exactly the names its settings class reads
    assert variables["POWERTOOLS_SERVICE_NAME"] == SERVICE_NAMES[handler]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "onceflow"
    assert variables[TRACING_MODE_VARIABLE] == "active"
    assert variables["POWERTOOLS_LOG_LEVEL"] == config.log_level
    assert set(variables) - FACTORY_ENV_NAMES == ENVIRONMENT_NAMES[handler]


@pytest.mark.parametrize("handler", HANDLERS)
def test_settings_class_reads_exactly_the_expected_names(handler: str) -> None:
    # Given an environment with every variable any event-log handler uses, set to valid values
    values = {name: "x" for names in ENVIRONMENT_NAMES.values() for name in names}
    numbers = {"SNAPSHOT_EVERY", "MAX_VALUE_BYTES", "MAX_BODY_BYTES", "PAYLOAD_MAX_BYTES", "URL_EXPIRY_SECONDS", "READ_PAGE_LIMIT"}
    numbers |= {"CHUNK_BYTES", "LEASE_SECONDS", "HANDOFF_MARGIN_MS", "BACKOFF_BASE_SECONDS", "BACKOFF_CAP_SECONDS"}
    numbers |= {"STUCK_AFTER_SECONDS", "MAX_CLAIMS_TO_RESEND"}
    values |= {name: "1000" for name in numbers} | {"MAX_BODY_BYTES": "16384", "PENDING_TAG": "onceflow-pending=true"}
    values |= {"RESEND_STUCK_SNAPSHOTS": "true"}
    environment = RecordingEnvironment(values)
    # When the handler's settings class reads it
    SETTINGS_CLASSES[handler].from_env(environment)
    # Then it asked for exactly the names the infra sets for that function (nothing more, nothing less)
    assert environment.read == ENVIRONMENT_NAMES[handler]


@pytest.mark.parametrize("handler", HANDLERS)
def test_settings_class_parses_the_synthesized_environment(template_json: dict[str, Any], handler: str) -> None:
    # Given the function's environment, with Refs replaced by dummy strings
    environment = resolved_environment(template_json, handler)
    # When its settings class reads it, as the handler does at cold start
    # Then it accepts it
    assert SETTINGS_CLASSES[handler].from_env(environment) is not None


def test_synthesized_settings_carry_the_configured_values(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the parsed settings of every function
    settings = config.event_log
    api = ApiSettings.from_env(resolved_environment(template_json, API))
    worker = WorkerSettings.from_env(resolved_environment(template_json, WORKER))
    # When we compare them with the config
    # Then the API and the worker run with the environment's values
    assert api.options.snapshot_every == settings.snapshot_every
    assert api.options.payload_max_bytes == settings.payload_max_bytes
    assert api.options.pending_tag == settings.pending_tag
    assert api.options.url_expiry_seconds == settings.url_expiry_seconds
    assert (api.max_value_bytes, api.max_body_bytes, api.read_page_limit) == (
        settings.max_value_bytes,
        settings.max_body_bytes,
        settings.read_page_limit,
    )
    assert worker.options.chunk_bytes == settings.chunk_bytes
    assert worker.options.lease_seconds == settings.lease_seconds
    assert worker.options.handoff_margin_ms == settings.handoff_margin_seconds * 1000
    assert worker.options.backoff_base_seconds == settings.backoff_base_seconds
    assert worker.options.backoff_cap_seconds == settings.backoff_cap_seconds


def test_resource_variables_point_at_the_right_resources(template_json: dict[str, Any]) -> None:
    # Given the functions' environments
    def variables(handler: str) -> dict[str, Any]:
        return dict(function(template_json, handler)[1]["Properties"]["Environment"]["Variables"])

    # When we read the variables naming tables, the bucket and queues
    # Then each is the Ref (name or URL) of the resource it is named after
    expected = {
        API: {"LOG_TABLE": ref(LOG_TABLE), "BUCKET": ref(BUCKET)},
        ROUTER: {"SNAPSHOT_QUEUE_URL": ref(SNAPSHOT_QUEUE), "PAYLOAD_QUEUE_URL": ref(PAYLOAD_QUEUE)},
        WORKER: {
            "LOG_TABLE": ref(LOG_TABLE),
            "PENDING_TABLE": ref(PENDING_TABLE),
            "BUCKET": ref(BUCKET),
            "SNAPSHOT_QUEUE_URL": ref(SNAPSHOT_QUEUE),
        },
        FINALIZER: {"BUCKET": ref(BUCKET), "PAYLOAD_QUEUE_URL": ref(PAYLOAD_QUEUE)},
    }
    for handler, refs in expected.items():
        actual = {name: value for name, value in variables(handler).items() if not isinstance(value, str)}
        assert actual == refs, handler


# --- 6. the HTTP API -----------------------------------------------------------------------------


def test_every_route_exists_and_requires_iam_authorization(template: Template, template_json: dict[str, Any]) -> None:
    # Given the API's routes
    routes = resources_of_type(template_json, "AWS::ApiGatewayV2::Route")
    # When we read their keys and authorization
    # Then the four routes exist (no others, no catch-all) and each requires SigV4 (AWS_IAM)
    assert {route["Properties"]["RouteKey"] for route in routes.values()} == ROUTES
    assert len(routes) == len(ROUTES)
    template.all_resources_properties("AWS::ApiGatewayV2::Route", {"AuthorizationType": "AWS_IAM"})
    # and each integrates with the API function
    api_id, _ = function(template_json, API)
    for integration in resources_of_type(template_json, "AWS::ApiGatewayV2::Integration").values():
        assert integration["Properties"]["IntegrationType"] == "AWS_PROXY"
        assert integration["Properties"]["IntegrationUri"] == arn(api_id)


def test_only_this_api_may_invoke_the_api_function_and_only_the_schedule_the_check(
    template_json: dict[str, Any], config: EnvConfig
) -> None:
    # Given the Lambda permissions, the one HTTP API and the one schedule
    (http_api_id,) = resources_of_type(template_json, "AWS::ApiGatewayV2::Api")
    ((rule_id, rule),) = resources_of_type(template_json, "AWS::Events::Rule").items()
    api_id, _ = function(template_json, API)
    check_id, _ = function(template_json, PENDING_CHECK)
    permissions = resources_of_type(template_json, "AWS::Lambda::Permission")
    # When we read who may invoke what
    by_principal: dict[str, list[dict[str, Any]]] = {}
    for permission in permissions.values():
        by_principal.setdefault(permission["Properties"]["Principal"], []).append(permission["Properties"])
    # Then API Gateway may invoke only the API function, and only from this API
    assert set(by_principal) == {"apigateway.amazonaws.com", "events.amazonaws.com"}
    for props in by_principal["apigateway.amazonaws.com"]:
        assert (props["FunctionName"], props["Action"]) == (arn(api_id), "lambda:InvokeFunction")
        assert ref(http_api_id) in props["SourceArn"]["Fn::Join"][1]
    # and EventBridge only the pending check, only from its rule, which runs at the configured rate
    ((events,),) = [by_principal["events.amazonaws.com"]]
    assert (events["FunctionName"], events["Action"], events["SourceArn"]) == (arn(check_id), "lambda:InvokeFunction", arn(rule_id))
    minutes = config.event_log.pending_check_minutes
    assert rule["Properties"]["ScheduleExpression"] == f"rate({minutes} minute{'s' if minutes > 1 else ''})"
    assert [target["Arn"] for target in rule["Properties"]["Targets"]] == [arn(check_id)]


def test_default_stage_throttles_and_writes_json_access_logs(template: Template, template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the API's one stage
    template.resource_count_is("AWS::ApiGatewayV2::Stage", 1)
    (stage,) = resources_of_type(template_json, "AWS::ApiGatewayV2::Stage").values()
    props = stage["Properties"]
    # When we read its throttling and access logs
    # Then it is the auto-deployed $default stage, throttled as configured
    assert props["StageName"] == "$default" and props["AutoDeploy"] is True
    assert props["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": config.event_log.api_rate_limit,
        "ThrottlingBurstLimit": config.event_log.api_burst_limit,
    }
    # and it writes JSON access logs to the API's own log group (not a function's)
    access = props["AccessLogSettings"]
    assert access["DestinationArn"] == arn(API_ACCESS_LOGS)
    resource(template_json, API_ACCESS_LOGS, "AWS::Logs::LogGroup")
    assert API_ACCESS_LOGS not in {log_group_of(template_json, handler) for handler in HANDLERS}
    fields = json.loads(access["Format"])
    assert isinstance(fields, dict)
    assert fields["requestId"] == "$context.requestId"
    assert {"routeKey", "status", "caller"} <= set(fields)


# --- 7. retention of stateful resources ---------------------------------------------------------


@pytest.mark.parametrize("resource_type", ["AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::SQS::Queue", "AWS::Logs::LogGroup"])
def test_stateful_resources_are_retained_only_in_prod(
    template: Template, template_json: dict[str, Any], env_name: str, resource_type: str
) -> None:
    # Given the environment's retention expectation (prod keeps data, dev is disposable)
    policy = EXPECTED[env_name]["removal"]
    assert resources_of_type(template_json, resource_type)
    # When we look at the deletion and replacement policies
    # Then prod retains every one of them and dev deletes them
    template.all_resources(resource_type, {"DeletionPolicy": policy, "UpdateReplacePolicy": policy})


def test_tables_are_deletion_protected_only_in_prod(template: Template, env_name: str) -> None:
    # Given the environment
    protected = EXPECTED[env_name]["protected"]
    # When we look at the tables' deletion protection
    # Then prod protects both tables and dev protects neither
    template.all_resources_properties("AWS::DynamoDB::Table", {"DeletionProtectionEnabled": protected})


# --- 8. every function comes from the Lambda factory -------------------------------------------


@pytest.mark.parametrize("handler", HANDLERS)
def test_function_has_the_factory_shape(template_json: dict[str, Any], env_name: str, handler: str) -> None:
    # Given one of the functions
    _, fn = function(template_json, handler)
    props = fn["Properties"]
    # When we look at its runtime, tracing, logging and layer
    # Then it is Python 3.13 on arm64 with active tracing and JSON logs into its own log group
    assert props["Runtime"] == "python3.13"
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    assert props["LoggingConfig"]["LogFormat"] == "JSON"
    log_group_id = log_group_of(template_json, handler)
    log_group = resource(template_json, log_group_id, "AWS::Logs::LogGroup")
    assert log_group["Properties"]["RetentionInDays"] == EXPECTED[env_name]["log_retention_days"]
    # and uses the AWS-managed Powertools layer, resolved from SSM at deploy time, then the stack's SDK layer
    powertools, sdk = props["Layers"]
    assert sdk == sdk_layer_ref(template_json)
    assert template_json["Parameters"][powertools["Ref"]] == {"Type": "AWS::SSM::Parameter::Value<String>", "Default": POWERTOOLS_PARAMETER}
    # and its role may write only to that log group
    logs = [s for s in statements_of(template_json, handler) if any(a.startswith("logs:") for a in as_list(s["Action"]))]
    assert logs == [{"Action": sorted(LOG_ACTIONS), "Effect": "Allow", "Resource": arn(log_group_id)}]


def test_functions_are_sized_from_the_config_and_have_their_own_log_groups(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the five functions
    assert len(resources_of_type(template_json, "AWS::Lambda::Function")) == len(HANDLERS)
    settings = config.event_log
    # When we read their timeouts, memory and log groups
    sizes = {
        handler: (
            function(template_json, handler)[1]["Properties"]["Timeout"],
            function(template_json, handler)[1]["Properties"]["MemorySize"],
        )
        for handler in HANDLERS
    }
    # Then they follow the config
    assert sizes[API] == (settings.api_timeout_seconds, settings.api_memory_mb)
    assert sizes[ROUTER][0] == settings.router_timeout_seconds
    assert sizes[WORKER] == (settings.worker_timeout_seconds, settings.worker_memory_mb)
    assert sizes[FINALIZER][0] == settings.finalizer_timeout_seconds
    assert sizes[PENDING_CHECK][0] == 60
    # and no two functions share a log group; the sixth log group is the API's access log
    log_groups = {log_group_of(template_json, handler) for handler in HANDLERS}
    assert len(log_groups) == len(HANDLERS)
    assert set(resources_of_type(template_json, "AWS::Logs::LogGroup")) == log_groups | {API_ACCESS_LOGS}


# --- the construct on its own (no cdk-nag, no app) --------------------------------------------


def test_construct_rejects_an_invalid_config_before_building_anything(tmp_path: Path) -> None:
    # Given a config whose lease would expire while its worker may still run
    dev = load_config("dev")
    invalid = replace(dev, event_log=replace(dev.event_log, lease_seconds=dev.event_log.worker_timeout_seconds))
    stack = Stack(App(outdir=str(tmp_path)), "Invalid")
    # When the event log is built with it
    with pytest.raises(ConfigError, match="lease_seconds"):
        EventLog(stack, "EventLog", invalid.event_log_props())
    # Then nothing was added to the stack
    assert stack.node.try_find_child("EventLog") is None


def test_construct_requires_its_props_type(tmp_path: Path) -> None:
    # Given a stack
    stack = Stack(App(outdir=str(tmp_path)), "Untyped")
    # When the event log is given a bare config instead of its props
    # Then it refuses
    with pytest.raises(TypeError, match="EventLogProps"):
        EventLog(stack, "EventLog", load_config("dev"))  # type: ignore[arg-type]


def test_the_router_filter_names_exactly_the_runtime_side_effect_kinds() -> None:
    # Given the kinds the runtime gives a side effect, and the infra's filter (infra never imports runtime)
    from runtime.event_log.contract import SIDE_EFFECT_KINDS as FILTERED
    from runtime.event_log.entries import SIDE_EFFECT_KINDS

    # When they are compared
    # Then they are the same kinds, so no side-effect entry is filtered out and nothing else gets in
    assert (
        sorted(kind.value for kind in SIDE_EFFECT_KINDS) == sorted(FILTERED) == sorted(ROUTER_FILTER["dynamodb"]["NewImage"]["kind"]["S"])
    )


def test_every_snapshot_outcome_has_its_metric_in_the_contract() -> None:
    # Given the worker's outcomes (runtime) and the contract's outcome metrics
    from runtime.event_log.contract import METRIC_SNAPSHOT_OUTCOMES
    from runtime.event_log.snapshots import Outcome

    # Then each outcome has exactly one metric name, and no metric names an outcome that does not exist
    assert set(METRIC_SNAPSHOT_OUTCOMES) == {outcome.value for outcome in Outcome}
    assert len(set(METRIC_SNAPSHOT_OUTCOMES.values())) == len(Outcome)


def test_the_pending_check_resend_cap_is_two_queues_worth_of_receives(template_json: dict[str, Any], config: EnvConfig) -> None:
    # Given the pending check's environment and the snapshot queue's redrive policy
    _, fn = function(template_json, PENDING_CHECK)
    queues = [r for r in template_json["Resources"].values() if r["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in r["Properties"]]
    receives = {queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] for queue in queues}
    # Then the cap is twice the snapshot queue's maxReceiveCount (the one configured value, passed, not copied)
    assert config.event_log.snapshot_max_receives in receives
    assert fn["Properties"]["Environment"]["Variables"]["MAX_CLAIMS_TO_RESEND"] == str(2 * config.event_log.snapshot_max_receives)
