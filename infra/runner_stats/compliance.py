"""The runner-stats pipeline's cdk-nag acknowledgements, each for one resource with its reason."""

from __future__ import annotations

from typing import Protocol

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from onceflow.infra.compliance import acknowledge


class RunnerStatsResources(Protocol):
    """What these acknowledgements name: RunnerStatsPipeline's resources (a protocol, so this module
    does not import the construct that calls it)."""

    @property
    def failure_queue(self) -> sqs.Queue: ...
    @property
    def function(self) -> lambda_.Function: ...


def acknowledge_runner_stats(pipeline: RunnerStatsResources) -> None:
    """RunnerStatsPipeline's cdk-nag acknowledgements, each on one of its resources with the reason it holds
    there (the pipeline adds them itself unless built with acknowledge_findings=False)."""
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
