"""cdk-nag 3 (policy-validation plugin) packs and per-resource acknowledgements.

Every acknowledgement names one resource and says why the finding is true but acceptable for
*that* resource. Nothing is suppressed stack-wide. A new finding fails synth (and the tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, App, Validations
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct

if TYPE_CHECKING:
    from infra.constructs.runner_stats import RunnerStatsPipeline


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
