"""RunnerStatsPipeline: Kinesis -> Lambda -> DynamoDB with exactly-once effects.

Usable from any stack with no arguments: `RunnerStatsPipeline(stack, "Runs")`. Pass an existing
stream to consume it, or let the construct create an encrypted one. Everything it creates is
exposed as a typed attribute.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from onceflow.infra.lambda_factory import FunctionSpec, create_function
from onceflow.infra.resources import durable_table, encrypted_queue
from onceflow.infra.runner_stats.compliance import acknowledge_runner_stats
from onceflow.infra.runner_stats.props import RunnerStatsConfig, RunnerStatsPipelineProps
from onceflow.runtime.runner_stats import contract


class RunnerStatsPipeline(Construct):
    """Device messages from Kinesis folded into per-run statistics, exactly once per message.

    Creates (or takes) the stream, the run-stats table (totals and dedupe record in one item),
    the tendency, messages-archive and rejects tables, the on-failure queue, and the function
    with its event source mapping (bisect on error, bounded retries and record age, reported
    batch item failures).

    Producer contract: devices put each record with partition key = user id. Lambda keeps order
    only per partition key, so with a parallelization factor above 1 a user's records stay in
    order on one of the shard's concurrent batch chains (see `RunnerStatsConfig`, and
    tests/faults/runner_stats/test_runner_stats_parallelization.py).
    """

    settings: RunnerStatsConfig
    stream: kinesis.IStream
    run_stats_table: dynamodb.Table
    tendency_table: dynamodb.Table
    messages_table: dynamodb.Table
    rejects_table: dynamodb.Table
    failure_queue: sqs.Queue
    function: lambda_.Function
    event_source: sources.KinesisEventSource

    def __init__(self, scope: Construct, construct_id: str, props: RunnerStatsPipelineProps | None = None) -> None:
        props = props if props is not None else RunnerStatsPipelineProps()
        if not isinstance(props, RunnerStatsPipelineProps):
            raise TypeError("RunnerStatsPipeline needs RunnerStatsPipelineProps")
        props.validate()
        super().__init__(scope, construct_id)
        self.settings = settings = props.settings
        common, tables = props.common, props.tables

        self.stream = props.stream or kinesis.Stream(
            self,
            "Stream",
            stream_mode=settings.stream_mode,
            shard_count=settings.shard_count if settings.stream_mode == kinesis.StreamMode.PROVISIONED else None,
            retention_period=Duration.hours(settings.stream_retention_hours),
            encryption=kinesis.StreamEncryption.MANAGED,
            removal_policy=common.removal_policy,
        )
        self.run_stats_table = durable_table(
            self,
            "RunStatsTable",
            tables,
            common,
            dynamodb.Attribute(name=contract.KEY_USER_ID, type=dynamodb.AttributeType.NUMBER),
            dynamodb.Attribute(name=contract.KEY_RUN_ID, type=dynamodb.AttributeType.NUMBER),
        )
        self.tendency_table = durable_table(
            self, "TendencyTable", tables, common, dynamodb.Attribute(name=contract.KEY_USER_ID, type=dynamodb.AttributeType.NUMBER)
        )
        self.messages_table = durable_table(
            self,
            "MessagesTable",
            tables,
            common,
            dynamodb.Attribute(name=contract.KEY_RUN_KEY, type=dynamodb.AttributeType.STRING),
            dynamodb.Attribute(name=contract.KEY_CHUNK, type=dynamodb.AttributeType.NUMBER),
        )
        self.rejects_table = durable_table(
            self, "RejectsTable", tables, common, dynamodb.Attribute(name=contract.KEY_RECORD_ID, type=dynamodb.AttributeType.STRING)
        )
        self.failure_queue = encrypted_queue(self, "FailureQueue", common)

        created = create_function(
            self,
            "Handler",
            FunctionSpec(
                handler=contract.HANDLER,
                service=contract.SERVICE,
                description="Folds device messages from Kinesis into exactly-once run statistics",
                memory_mb=settings.memory_mb,
                timeout_seconds=settings.timeout_seconds,
                reserved_concurrency=settings.reserved_concurrency,
                environment={
                    contract.ENV_RUN_STATS_TABLE: self.run_stats_table.table_name,
                    contract.ENV_TENDENCY_TABLE: self.tendency_table.table_name,
                    contract.ENV_MESSAGES_TABLE: self.messages_table.table_name,
                    contract.ENV_REJECTS_TABLE: self.rejects_table.table_name,
                    contract.ENV_GAP_MAX_LAG: str(settings.gap_max_lag),
                    contract.ENV_GAP_MAX_OPEN: str(settings.gap_max_open),
                    contract.ENV_ARCHIVE_CHUNK_SIZE: str(settings.archive_chunk_size),
                    contract.ENV_COMMIT_ATTEMPTS: str(settings.commit_attempts),
                    contract.ENV_MAX_MESSAGE_BYTES: str(settings.max_message_bytes),
                    contract.ENV_REJECT_PAYLOAD_MAX_BYTES: str(settings.reject_payload_max_bytes),
                    contract.ENV_TIMESTAMP_MAX_AGE_SECONDS: str(settings.timestamp_max_age_seconds),
                    contract.ENV_TIMESTAMP_MAX_AHEAD_SECONDS: str(settings.timestamp_max_ahead_seconds),
                    contract.ENV_IO_CONCURRENCY: str(settings.io_concurrency),
                },
            ),
            common,
        )
        self.function = created.function
        # Exactly the actions the handler uses, on exactly its tables (TransactWriteItems is
        # authorized per item as PutItem); devtools/aws/call_audit.py checks them against its calls.
        self.run_stats_table.grant(self.function, "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem")
        self.tendency_table.grant(self.function, "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem")
        # Query: the archive read of a range forgotten beyond the closed gaps the context keeps.
        self.messages_table.grant(self.function, "dynamodb:PutItem", "dynamodb:Query")
        self.rejects_table.grant(self.function, "dynamodb:PutItem")

        self.event_source = sources.KinesisEventSource(
            self.stream,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=settings.batch_size,
            max_batching_window=Duration.seconds(settings.batching_window_seconds),
            parallelization_factor=settings.parallelization_factor,
            bisect_batch_on_error=True,
            report_batch_item_failures=True,
            retry_attempts=settings.retry_attempts,
            max_record_age=Duration.seconds(settings.max_record_age_seconds),
            on_failure=sources.SqsDlq(self.failure_queue),
        )
        self.function.add_event_source(self.event_source)
        if props.acknowledge_findings:
            acknowledge_runner_stats(self)
