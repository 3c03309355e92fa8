"""The event-log stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from infra.compliance import acknowledge_event_log
from infra.config import EnvConfig
from infra.constructs.event_log import EventLog, EventLogProps


class EventLogStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs: Any) -> None:
        super().__init__(
            scope, construct_id, description="onceflow event log: API -> DynamoDB log -> stream -> SQS -> snapshot worker", **kwargs
        )
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)
        self.event_log = EventLog(self, "EventLog", EventLogProps(config=config))
        acknowledge_event_log(self.event_log)
        CfnOutput(self, "ApiUrl", value=self.event_log.http_api.api_endpoint)
        CfnOutput(self, "LogTableName", value=self.event_log.log_table.table_name)
        CfnOutput(self, "BucketName", value=self.event_log.bucket.bucket_name)
        # What the operator tools read (python -m ops.event_log_reprocess --stack <name>).
        CfnOutput(self, "PendingTableName", value=self.event_log.pending_table.table_name)
        CfnOutput(self, "SnapshotQueueUrl", value=self.event_log.snapshot_queue.queue_url)
        CfnOutput(self, "PayloadQueueUrl", value=self.event_log.payload_queue.queue_url)
