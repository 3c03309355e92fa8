"""EventLog: an event-sourced log in DynamoDB with exactly-once side effects and snapshots.

API (IAM auth) -> log table (the linchpin write) -> stream -> filtered router -> SQS ->
snapshot worker (pending-snapshots table, chunks in S3) and payload finalizer (untags S3).

Usable from any stack with no arguments: `EventLog(stack, "Sheets")`. Pass an existing bucket for
payloads and snapshots, or let the construct create an encrypted, versioned, TLS-only one with its
access-log bucket. Everything it creates is exposed as a typed attribute.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_apigatewayv2_authorizers import HttpIamAuthorizer
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from onceflow.infra.common import CommonProps
from onceflow.infra.event_log.compliance import acknowledge_event_log
from onceflow.infra.event_log.props import EventLogConfig, EventLogProps
from onceflow.infra.lambda_factory import FunctionSpec, create_function
from onceflow.infra.resources import durable_table, encrypted_queue, throttled_http_api
from onceflow.runtime.event_log import contract

S3_ACCESS_LOGS_BY_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"
ROUTES = (
    ("/logs/{logId}/entries", apigw.HttpMethod.POST),
    ("/logs/{logId}/payloads", apigw.HttpMethod.POST),
    ("/logs/{logId}/payloads/complete", apigw.HttpMethod.POST),
    ("/logs/{logId}/snapshot", apigw.HttpMethod.GET),
)


class EventLog(Construct):
    """An event-sourced log with idempotent appends, exactly-once side effects and snapshots.

    Creates the log table (with its stream and segment index), the pending-snapshots table, the
    bucket (or takes yours), the snapshot, payload and stream-failure queues with their DLQs, the
    API, router, snapshot worker, payload finalizer and scheduled pending-check functions, and the
    IAM-authorized HTTP API.
    """

    settings: EventLogConfig
    log_table: dynamodb.Table
    pending_table: dynamodb.Table
    bucket: s3.IBucket
    access_log_bucket: s3.Bucket | None
    snapshot_queue: sqs.Queue
    snapshot_dead_letter_queue: sqs.Queue
    payload_queue: sqs.Queue
    payload_dead_letter_queue: sqs.Queue
    stream_failure_queue: sqs.Queue
    api_function: lambda_.Function
    # The alias the API integration invokes when settings.snap_start is on; None when it is off.
    api_alias: lambda_.Alias | None
    router_function: lambda_.Function
    worker_function: lambda_.Function
    finalizer_function: lambda_.Function
    pending_check_function: lambda_.Function
    pending_check_schedule: events.Rule
    router_event_source: sources.DynamoEventSource
    http_api: apigw.HttpApi
    api_stage: apigw.HttpStage
    api_access_logs: logs.LogGroup

    def __init__(self, scope: Construct, construct_id: str, props: EventLogProps | None = None) -> None:
        props = props if props is not None else EventLogProps()
        if not isinstance(props, EventLogProps):
            raise TypeError("EventLog needs EventLogProps")
        props.validate()
        super().__init__(scope, construct_id)
        # The access-log bucket admits S3's log delivery by bucket policy (it refuses ACLs), whatever
        # the app's cdk.json says: a construct must not depend on its user's feature flags.
        self.node.set_context(S3_ACCESS_LOGS_BY_POLICY, True)
        self.settings = settings = props.settings
        common, tables = props.common, props.tables

        self.log_table = durable_table(
            self,
            "LogTable",
            tables,
            common,
            dynamodb.Attribute(name=contract.KEY_LOG_ID, type=dynamodb.AttributeType.STRING),
            dynamodb.Attribute(name=contract.KEY_SEQ, type=dynamodb.AttributeType.NUMBER),
            stream=dynamodb.StreamViewType.NEW_IMAGE,
        )
        # Sparse: only cell events carry these keys. Lists one segment's events in cell order,
        # so a snapshot is a merge of two sorted streams and never holds the sheet in memory.
        self.log_table.add_global_secondary_index(
            index_name=contract.INDEX_SEGMENT_EVENTS,
            partition_key=dynamodb.Attribute(name=contract.KEY_SEGMENT, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=contract.KEY_CELL_ORDER, type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.INCLUDE,
            non_key_attributes=["kind", "cell", "value", "payload_key", "payload_bytes", "request_id", "segment"],
            read_capacity=tables.read_capacity,
            write_capacity=tables.write_capacity,
        )
        self.pending_table = durable_table(
            self,
            "PendingSnapshotsTable",
            tables,
            common,
            dynamodb.Attribute(name=contract.KEY_LOG_ID, type=dynamodb.AttributeType.STRING),
            dynamodb.Attribute(name=contract.KEY_SEQ, type=dynamodb.AttributeType.NUMBER),
        )
        self.access_log_bucket = None
        self.bucket = props.bucket or self._bucket(settings, common)

        self.snapshot_dead_letter_queue = encrypted_queue(self, "SnapshotDeadLetterQueue", common)
        self.snapshot_queue = encrypted_queue(
            self,
            "SnapshotQueue",
            common,
            visibility_seconds=settings.snapshot_visibility_seconds,
            dead_letter=sqs.DeadLetterQueue(queue=self.snapshot_dead_letter_queue, max_receive_count=settings.snapshot_max_receives),
        )
        self.payload_dead_letter_queue = encrypted_queue(self, "PayloadDeadLetterQueue", common)
        self.payload_queue = encrypted_queue(
            self,
            "PayloadQueue",
            common,
            visibility_seconds=settings.finalizer_visibility_seconds,
            dead_letter=sqs.DeadLetterQueue(queue=self.payload_dead_letter_queue, max_receive_count=settings.finalizer_max_receives),
        )
        self.stream_failure_queue = encrypted_queue(self, "StreamFailureQueue", common)

        self._add_api(common, settings)
        self._add_router(common, settings)
        self._add_worker(common, settings)
        self._add_finalizer(common, settings)
        self._add_pending_check(common, settings)
        if props.acknowledge_findings:
            acknowledge_event_log(self)

    # --- functions ------------------------------------------------------------------------------

    def _add_api(self, common: CommonProps, settings: EventLogConfig) -> None:
        created = create_function(
            self,
            "ApiHandler",
            FunctionSpec(
                handler=contract.HANDLER_API,
                reserved_concurrency=settings.reserved_concurrency.get("api"),
                service=contract.SERVICE_API,
                description="Event log API: idempotent appends, large payloads, latest snapshot",
                memory_mb=settings.api_memory_mb,
                snap_start=settings.snap_start,
                timeout_seconds=settings.api_timeout_seconds,
                environment={
                    contract.ENV_LOG_TABLE: self.log_table.table_name,
                    contract.ENV_BUCKET: self.bucket.bucket_name,
                    contract.ENV_SNAPSHOT_EVERY: str(settings.snapshot_every),
                    contract.ENV_MAX_VALUE_BYTES: str(settings.max_value_bytes),
                    contract.ENV_MAX_BODY_BYTES: str(settings.max_body_bytes),
                    contract.ENV_PAYLOAD_MAX_BYTES: str(settings.payload_max_bytes),
                    contract.ENV_PENDING_TAG: settings.pending_tag,
                    contract.ENV_URL_EXPIRY_SECONDS: str(settings.url_expiry_seconds),
                    contract.ENV_READ_PAGE_LIMIT: str(settings.read_page_limit),
                },
            ),
            common,
        )
        self.api_function = created.function
        self.api_alias = created.alias
        # Appends are transactions of a Put and an Update (authorized per item); reads are Get
        # and Query. Presigned uploads run as this role: PutObject with its tag, under payloads/.
        self.api_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                resources=[self.log_table.table_arn],  # the table only, not its index
            )
        )
        self.api_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:PutObjectTagging"], resources=[self.bucket.arn_for_objects(f"{contract.PAYLOADS_PREFIX}*")]
            )
        )
        self.api_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[
                    self.bucket.arn_for_objects(f"{contract.PAYLOADS_PREFIX}*"),
                    self.bucket.arn_for_objects(f"{contract.SNAPSHOTS_PREFIX}*"),
                ],
            )
        )
        # HeadObject of a payload not uploaded yet: without s3:ListBucket on the bucket S3 answers
        # 403 for a missing key, not 404 (an s3:prefix condition would not apply to HeadObject).
        self.api_function.add_to_role_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]))

        self.http_api, self.api_stage, self.api_access_logs = throttled_http_api(
            self,
            common,
            description="onceflow event log (IAM-authorized; callers sign with SigV4)",
            authorizer=HttpIamAuthorizer(),
            rate_limit=settings.api_rate_limit,
            burst_limit=settings.api_burst_limit,
        )
        # With SnapStart, through the alias (its invoke permission is the alias's): the unpublished
        # function ($LATEST) is never restored from a snapshot.
        integration = HttpLambdaIntegration("ApiIntegration", self.api_alias or self.api_function)
        for path, method in ROUTES:
            self.http_api.add_routes(path=path, methods=[method], integration=integration)

    def _add_router(self, common: CommonProps, settings: EventLogConfig) -> None:
        created = create_function(
            self,
            "RouterHandler",
            FunctionSpec(
                handler=contract.HANDLER_ROUTER,
                reserved_concurrency=settings.reserved_concurrency.get("router"),
                service=contract.SERVICE_ROUTER,
                description="Turns inserted Snapshot and LargePayload log entries into SQS side-effect messages",
                timeout_seconds=settings.router_timeout_seconds,
                environment={
                    contract.ENV_SNAPSHOT_QUEUE_URL: self.snapshot_queue.queue_url,
                    contract.ENV_PAYLOAD_QUEUE_URL: self.payload_queue.queue_url,
                },
            ),
            common,
        )
        self.router_function = created.function
        # SendMessage only: the queue URLs come from the environment (CDK's grant_send_messages adds
        # GetQueueUrl and GetQueueAttributes, which no call makes: devtools/aws/call_audit.py).
        self.snapshot_queue.grant(self.router_function, "sqs:SendMessage")
        self.payload_queue.grant(self.router_function, "sqs:SendMessage")
        window = settings.router_batching_window_seconds
        self.router_event_source = sources.DynamoEventSource(
            self.log_table,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=settings.router_batch_size,
            # Set only when overridden, so the defaults leave the mapping as the service defaults it.
            max_batching_window=Duration.seconds(window) if window else None,
            parallelization_factor=settings.router_parallelization_factor if settings.router_parallelization_factor != 1 else None,
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            retry_attempts=settings.router_retry_attempts,
            max_record_age=Duration.seconds(settings.router_max_record_age_seconds),
            on_failure=sources.SqsDlq(self.stream_failure_queue),
            # Invoked only for the entries that have a side effect; the head's and cell events'
            # stream records are dropped by Lambda before any invocation.
            filters=[
                lambda_.FilterCriteria.filter(
                    {
                        "eventName": lambda_.FilterRule.is_equal("INSERT"),
                        "dynamodb": {"NewImage": {"kind": {"S": lambda_.FilterRule.or_(*contract.SIDE_EFFECT_KINDS)}}},
                    }
                )
            ],
        )
        self.router_function.add_event_source(self.router_event_source)

    def _add_worker(self, common: CommonProps, settings: EventLogConfig) -> None:
        created = create_function(
            self,
            "SnapshotWorker",
            FunctionSpec(
                handler=contract.HANDLER_WORKER,
                reserved_concurrency=settings.reserved_concurrency.get("worker"),
                service=contract.SERVICE_WORKER,
                description="Builds snapshots in log order with claims, checkpoints and hand-offs",
                memory_mb=settings.worker_memory_mb,
                timeout_seconds=settings.worker_timeout_seconds,
                environment={
                    contract.ENV_LOG_TABLE: self.log_table.table_name,
                    contract.ENV_PENDING_TABLE: self.pending_table.table_name,
                    contract.ENV_BUCKET: self.bucket.bucket_name,
                    contract.ENV_SNAPSHOT_QUEUE_URL: self.snapshot_queue.queue_url,
                    contract.ENV_CHUNK_BYTES: str(settings.chunk_bytes),
                    contract.ENV_LEASE_SECONDS: str(settings.lease_seconds),
                    contract.ENV_HANDOFF_MARGIN_MS: str(settings.handoff_margin_seconds * 1000),
                    contract.ENV_BACKOFF_BASE_SECONDS: str(settings.backoff_base_seconds),
                    contract.ENV_BACKOFF_CAP_SECONDS: str(settings.backoff_cap_seconds),
                },
            ),
            common,
        )
        self.worker_function = created.function
        self.worker_function.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:GetItem", "dynamodb:UpdateItem"], resources=[self.log_table.table_arn])
        )
        self.worker_function.add_to_role_policy(
            iam.PolicyStatement(actions=["dynamodb:Query"], resources=[f"{self.log_table.table_arn}/index/{contract.INDEX_SEGMENT_EVENTS}"])
        )
        self.pending_table.grant(self.worker_function, "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        self.worker_function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[self.bucket.arn_for_objects(f"{contract.SNAPSHOTS_PREFIX}*")],
            )
        )
        # Lists its snapshot prefixes, and makes a GetObject of a snapshot root not written yet answer
        # 404: S3 answers 403 for a missing key without s3:ListBucket, and an s3:prefix condition on
        # the grant would not apply to GetObject (the request carries no prefix).
        self.worker_function.add_to_role_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]))
        # Re-enqueues a stuck predecessor, or its own message when a duplicate deleted it.
        self.snapshot_queue.grant(self.worker_function, "sqs:SendMessage")
        self.worker_function.add_event_source(
            sources.SqsEventSource(
                self.snapshot_queue,
                batch_size=1,  # one snapshot per invocation: the time limit and hand-off are per build
                report_batch_item_failures=True,
                max_concurrency=settings.worker_queue_concurrency,
            )
        )

    def _add_finalizer(self, common: CommonProps, settings: EventLogConfig) -> None:
        created = create_function(
            self,
            "PayloadFinalizer",
            FunctionSpec(
                handler=contract.HANDLER_FINALIZER,
                reserved_concurrency=settings.reserved_concurrency.get("finalizer"),
                service=contract.SERVICE_FINALIZER,
                description="Removes the pending tag of large payloads the log now holds",
                timeout_seconds=settings.finalizer_timeout_seconds,
                environment={contract.ENV_BUCKET: self.bucket.bucket_name, contract.ENV_PAYLOAD_QUEUE_URL: self.payload_queue.queue_url},
            ),
            common,
        )
        self.finalizer_function = created.function
        self.finalizer_function.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:DeleteObjectTagging"], resources=[self.bucket.arn_for_objects(f"{contract.PAYLOADS_PREFIX}*")])
        )
        # With a reservation, SQS hands the finalizer no more than it may run: a throttled delivery counts as a receive.
        self.finalizer_function.add_event_source(
            sources.SqsEventSource(
                self.payload_queue,
                batch_size=10,
                report_batch_item_failures=True,
                max_concurrency=settings.reserved_concurrency.get("finalizer"),
            )
        )

    def _add_pending_check(self, common: CommonProps, settings: EventLogConfig) -> None:
        environment = {
            contract.ENV_PENDING_TABLE: self.pending_table.table_name,
            contract.ENV_STUCK_AFTER_SECONDS: str(settings.stuck_after_seconds),
            contract.ENV_LEASE_SECONDS: str(settings.lease_seconds),
            contract.ENV_RESEND_STUCK_SNAPSHOTS: "true" if settings.resend_stuck_snapshots else "false",
        }
        if settings.resend_stuck_snapshots:
            environment[contract.ENV_SNAPSHOT_QUEUE_URL] = self.snapshot_queue.queue_url
            environment[contract.ENV_MAX_CLAIMS_TO_RESEND] = str(settings.max_claims_to_resend)
        created = create_function(
            self,
            "PendingCheck",
            FunctionSpec(
                handler=contract.HANDLER_PENDING_CHECK,
                reserved_concurrency=settings.reserved_concurrency.get("pending_check"),
                service=contract.SERVICE_PENDING_CHECK,
                description="Publishes the oldest pending snapshot's age and counts stuck builds",
                timeout_seconds=60,
                environment=environment,
            ),
            common,
        )
        self.pending_check_function = created.function
        # Pending rows are few (one per snapshot being built): a scan reads them all.
        self.pending_table.grant(self.pending_check_function, "dynamodb:Scan")
        if settings.resend_stuck_snapshots:
            self.snapshot_queue.grant(self.pending_check_function, "sqs:SendMessage")
        self.pending_check_schedule = events.Rule(
            self,
            "PendingCheckSchedule",
            description="Runs the stuck-pending-snapshot check",
            schedule=events.Schedule.rate(Duration.minutes(settings.pending_check_minutes)),
            targets=[targets.LambdaFunction(self.pending_check_function, retry_attempts=0)],
        )

    # --- resources ------------------------------------------------------------------------------

    def _bucket(self, settings: EventLogConfig, common: CommonProps) -> s3.Bucket:
        tag_name, _, tag_value = settings.pending_tag.partition("=")
        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption S3 server access logging writes to
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=Duration.days(90))],
            removal_policy=common.removal_policy,
        )
        return s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix="bucket/",
            lifecycle_rules=[
                # Uploaded but never completed: the log never mentions them.
                s3.LifecycleRule(
                    id="ExpirePendingPayloads",
                    prefix=contract.PAYLOADS_PREFIX,
                    tag_filters={tag_name: tag_value},
                    expiration=Duration.days(settings.pending_expiry_days),
                ),
                s3.LifecycleRule(
                    id="ExpireOldVersions",
                    noncurrent_version_expiration=Duration.days(settings.noncurrent_expiry_days),
                    expired_object_delete_marker=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
            removal_policy=common.removal_policy,
        )
