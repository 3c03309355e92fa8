"""The runner-stats stack of one environment."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from infra.compliance import acknowledge_runner_stats
from infra.config import EnvConfig
from infra.constructs.runner_stats import RunnerStatsPipeline, RunnerStatsPipelineProps


class RunnerStatsStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, description="onceflow runner stats: Kinesis -> Lambda -> DynamoDB", **kwargs)
        for key, value in config.tags.items():
            Tags.of(self).add(key, value)
        self.pipeline = RunnerStatsPipeline(self, "RunnerStats", RunnerStatsPipelineProps(config=config))
        acknowledge_runner_stats(self.pipeline)
        CfnOutput(self, "StreamName", value=self.pipeline.stream.stream_name)
        CfnOutput(self, "RunStatsTableName", value=self.pipeline.run_stats_table.table_name)
