"""cdk-nag 3 (policy-validation plugin) packs and the per-resource acknowledgement helper.

Every acknowledgement names one resource and says why the finding is true but acceptable for
*that* resource. Nothing is suppressed stack-wide. A new finding fails synth (and the tests).
Each pipeline's own acknowledgements live beside its construct (infra/<pipeline>/compliance.py),
which adds them when it is built.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Stack, Validations
from aws_cdk.aws_lambda import IFunction
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct


def add_compliance_checks(app: App) -> None:
    """Adds the AwsSolutions and Serverless cdk-nag packs to the app: synth then fails on any finding
    not acknowledged on its resource, and writes the findings to validation-report.json."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app), ServerlessChecks(app))


def acknowledge(resource: IConstruct, rule: str, reason: str) -> None:
    """Acknowledges one cdk-nag finding on one resource, with the reason it is acceptable there.

    rule like 'AwsSolutions::AwsSolutions-SQS3' or 'Serverless::Serverless-LambdaDLQ'."""
    Validations.of(resource).acknowledge(Acknowledgment(id=rule, reason=reason))


def logical_id(construct: IConstruct) -> str:
    """The logical id of a construct's CloudFormation resource, as nag findings name it."""
    stack = Stack.of(construct)
    return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))  # type: ignore[arg-type]


def policy_of(function: IFunction) -> IConstruct:
    """The CloudFormation policy of a function's role, which carries the grants its construct added."""
    return function.role.node.find_child("DefaultPolicy").node.default_child  # type: ignore[union-attr,return-value]
