"""What every operator tool shares: where its resources are (--stack, or each resource named),
which AWS account and region it talks to (--profile, --region), and one kind of usage error.

A usage error (a wrong argument, a stack that is not the right kind, no credentials, no region)
ends the tool with one line on stderr and exit status 2, never a botocore traceback.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError, PartialCredentialsError, ProfileNotFound

USAGE_EXIT_STATUS = 2


class UsageError(Exception):
    """The command line, the stack it names, or the AWS set-up cannot be used (exit status 2)."""


@dataclass(frozen=True)
class StackKind:
    """A kind of onceflow stack and the outputs a tool reads from it, each as an option name."""

    name: str  # "EventLog", as in Onceflow-dev-EventLog
    outputs: Mapping[str, str]  # stack output key -> attribute, e.g. "LogTableName" -> "log_table"

    def option(self, attribute: str) -> str:
        return f"--{attribute.replace('_', '-')}"


def add_aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", help="the AWS region (default: AWS_REGION, AWS_DEFAULT_REGION or the profile's)")
    parser.add_argument("--profile", help="a named profile from the AWS config files (default: AWS_PROFILE or the default chain)")


def add_target(parser: argparse.ArgumentParser, kind: StackKind) -> None:
    """--stack, or every resource by name; `resolve_target` checks that one of the two was given."""
    parser.add_argument("--stack", help=f"an onceflow {kind.name} stack: resource names are read from its outputs")
    for attribute in kind.outputs.values():
        parser.add_argument(kind.option(attribute), help=f"instead of --stack: the {attribute.replace('_', ' ')}")


class AwsSession:
    """The SDK session of --profile and --region; clients are built on first use, after checking
    that a region and credentials exist, so a tool run with injected clients needs neither."""

    def __init__(self, *, region: str | None = None, profile: str | None = None) -> None:
        self._region = region
        self._profile = profile
        self._session: Any = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AwsSession:
        return cls(region=getattr(args, "region", None), profile=getattr(args, "profile", None))

    def client(self, service: str) -> Any:
        if self._session is None:
            import boto3

            try:
                session = boto3.Session(profile_name=self._profile, region_name=self._region)
            except ProfileNotFound as err:
                raise UsageError(str(err)) from err
            if not session.region_name:
                raise UsageError("no AWS region: pass --region, or set AWS_REGION or a region in the profile")
            if session.get_credentials() is None:
                raise UsageError("no AWS credentials: pass --profile, or set AWS_PROFILE or the AWS_ACCESS_KEY_ID variables")
            self._session = session
        return self._session.client(service)


def stack_outputs(cloudformation: Any, stack: str) -> dict[str, str]:
    try:
        described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except ClientError as err:
        raise UsageError(f"cannot read stack {stack}: {err.response.get('Error', {}).get('Message', err)}") from err
    return {str(o["OutputKey"]): str(o["OutputValue"]) for o in described.get("Outputs", [])}


def resources_from_stack(cloudformation: Any, stack: str, kind: StackKind) -> dict[str, str]:
    """The resource names a tool needs, by attribute, from the stack's outputs."""
    outputs = stack_outputs(cloudformation, stack)
    missing = [name for name in kind.outputs if name not in outputs]
    if missing:
        raise UsageError(f"stack {stack} has no outputs {missing}; is it an onceflow {kind.name} stack?")
    return {attribute: outputs[name] for name, attribute in kind.outputs.items()}


def resolve_target(args: argparse.Namespace, kind: StackKind, cloudformation: Any | None, aws: AwsSession) -> dict[str, str]:
    """The resources from --stack, or from each resource option; a usage error unless exactly one way is complete."""
    named = {attribute: getattr(args, attribute) for attribute in kind.outputs.values()}
    if args.stack:
        if any(named.values()):
            raise UsageError("give --stack or the resource names, not both")
        return resources_from_stack(cloudformation or aws.client("cloudformation"), args.stack, kind)
    if not all(named.values()):
        flags = " ".join(kind.option(attribute) for attribute in kind.outputs.values())
        raise UsageError(f"give --stack, or every one of {flags}")
    return {attribute: str(value) for attribute, value in named.items()}


@contextlib.contextmanager
def usage_errors(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Turn a usage error, or the SDK's missing-set-up errors, into one line and exit status 2."""
    try:
        yield
    except (UsageError, NoCredentialsError, PartialCredentialsError, NoRegionError, ProfileNotFound) as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}\n")
