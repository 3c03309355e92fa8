"""What every operator tool shares: where its resources are (--env, --stack, or each resource named),
which AWS account and region it talks to (--profile, --region), and one kind of usage error.

--env NAME reads the resource names from cdk-outputs-NAME.json, the file `make deploy ENV=NAME`
writes (`cdk deploy --outputs-file`: a JSON object of stack name -> {output key: value}), in the
current directory or at --outputs-file PATH. The tool takes the one stack of its kind in it (the
name ending in -<kind>, e.g. -RunnerStats) and asks CloudFormation nothing. --stack NAME reads
the outputs of the deployed stack from CloudFormation. Exactly one of the three ways is given.

--env local reads the file `make serve` writes, cdk-outputs-local.json: it also names the embedded
cloud's endpoint, region and dummy key pair, and every client of the tool then goes there
(onceflow/clients/local.py: --region, --profile and the AWS_* variables still win over the file).

A usage error (a wrong argument, a stack that is not the right kind, no credentials, no region, a
local server that is not running) ends the tool with one line on stderr and exit status 2, never a
botocore traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError, PartialCredentialsError, ProfileNotFound

from onceflow.clients.local import LOCAL_ENV, LocalCloud, LocalCloudError, missing_file, running_local_cloud
from runtime.shared.aws import s3_addressing

USAGE_EXIT_STATUS = 2
OUTPUTS_FILE = "cdk-outputs-{env}.json"  # what `make deploy ENV=<env>` writes in the repository root


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
    parser.add_argument("--region", help="the AWS region (default: AWS_DEFAULT_REGION, the profile's, or AWS_REGION)")
    parser.add_argument("--profile", help="a named profile from the AWS config files (default: AWS_PROFILE or the default chain)")


def add_target(parser: argparse.ArgumentParser, kind: StackKind) -> None:
    """--env, --stack, or every resource by name; `resolve_target` checks that exactly one way was given."""
    parser.add_argument(
        "--env",
        metavar="NAME",
        help=f"a deployed environment (dev, prod): resource names are read from the {kind.name} stack in "
        f"{OUTPUTS_FILE.format(env='NAME')}, which `make deploy ENV=NAME` writes; no CloudFormation call",
    )
    parser.add_argument(
        "--outputs-file",
        metavar="PATH",
        type=Path,
        help=f"with --env: read this CDK outputs file instead of ./{OUTPUTS_FILE.format(env='NAME')}",
    )
    parser.add_argument("--stack", help=f"an onceflow {kind.name} stack: resource names are read from its outputs")
    for attribute in kind.outputs.values():
        parser.add_argument(kind.option(attribute), help=f"instead of --env or --stack: the {attribute.replace('_', ' ')}")


class AwsSession:
    """The SDK session of --profile and --region; clients are built on first use, after checking
    that a region and credentials exist, so a tool run with injected clients needs neither. With
    `endpoint_url`, or after `use_local`, every client goes to that endpoint (the embedded cloud)."""

    def __init__(self, *, region: str | None = None, profile: str | None = None, endpoint_url: str | None = None) -> None:
        self._region = region
        self._profile = profile
        self._session: Any = None
        self._local: LocalCloud | None = None
        self.endpoint_url = endpoint_url

    def use_local(self, cloud: LocalCloud) -> None:
        """Talk to `make serve`'s embedded cloud: its endpoint (unless one was given), and its region and
        key pair where the command line and the environment name none. Before the first client."""
        self._local = cloud
        self.endpoint_url = self.endpoint_url or cloud.endpoint()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AwsSession:
        return cls(region=getattr(args, "region", None), profile=getattr(args, "profile", None))

    def client(self, service: str) -> Any:
        if self._session is None:
            import boto3

            try:
                if self._local is not None:
                    session = boto3.Session(**self._local.session_options(region=self._region, profile=self._profile))
                else:
                    session = boto3.Session(profile_name=self._profile, region_name=self._region)
                if not session.region_name and os.environ.get("AWS_REGION"):
                    # botocore reads AWS_DEFAULT_REGION and the profile only; the CDK CLI and Lambda set AWS_REGION.
                    session = boto3.Session(profile_name=self._profile, region_name=os.environ["AWS_REGION"])
            except ProfileNotFound as err:
                raise UsageError(str(err)) from err
            if not session.region_name:
                raise UsageError("no AWS region: pass --region, or set AWS_DEFAULT_REGION, AWS_REGION or a region in the profile")
            if session.get_credentials() is None:
                raise UsageError("no AWS credentials: pass --profile, or set AWS_PROFILE or the AWS_ACCESS_KEY_ID variables")
            self._session = session
        if service != "s3":
            return self._session.client(service, endpoint_url=self.endpoint_url)
        from botocore.config import Config

        if self.endpoint_url is None:
            # The bucket's regional virtual-hosted endpoint, as the functions address it (runtime/shared/aws.py).
            return self._session.client(service, config=Config(signature_version="s3v4", s3=s3_addressing()))
        # Path-style: the embedded cloud is one host, not a bucket per subdomain.
        config = Config(signature_version="s3v4", s3={"addressing_style": "path"})
        return self._session.client(service, endpoint_url=self.endpoint_url, config=config)


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


def outputs_file(env: str, path: Path | None = None) -> Path:
    """Where --env reads: --outputs-file, else cdk-outputs-<env>.json in the current directory."""
    return path if path is not None else Path(OUTPUTS_FILE.format(env=env))


def how_to_write(env: str) -> str:
    """What writes the outputs file of `env`."""
    return "start `make serve` in the repository root" if env == LOCAL_ENV else f"run `make deploy ENV={env}` in the repository root"


def read_outputs_file(path: Path, env: str) -> dict[str, Any]:
    """A CDK outputs file, parsed (stack name -> outputs), or a usage error saying how to write it."""
    deploy = how_to_write(env)
    try:
        text = path.read_bytes()
    except FileNotFoundError as err:
        if env == LOCAL_ENV:
            raise UsageError(missing_file(path)) from err
        raise UsageError(f"no outputs file {path.absolute()}: {deploy} (it writes the file), or pass --outputs-file or --stack") from err
    except OSError as err:
        raise UsageError(f"cannot read outputs file {path}: {err.strerror or err}; {deploy}, or pass --stack") from err
    try:
        document = json.loads(text)
    except ValueError as err:  # JSONDecodeError, or bytes that are not UTF-8 (UnicodeDecodeError)
        raise UsageError(f"outputs file {path} is not valid JSON ({err}); {deploy} to write it again, or pass --stack") from err
    if not isinstance(document, dict) or not all(isinstance(outputs, dict) for outputs in document.values()):
        raise UsageError(
            f"outputs file {path} is not a CDK outputs file (a JSON object of stack name -> outputs); {deploy}, or pass --stack"
        )
    return document


def local_cloud_of(path: Path, env: str) -> LocalCloud | None:
    """The embedded cloud an outputs file of `make serve` names, checked to be answering (None: a deployed environment's)."""
    document = read_outputs_file(path, env)
    try:
        return running_local_cloud(document, path)
    except LocalCloudError as err:
        raise UsageError(str(err)) from err


def resources_from_outputs_file(path: Path, env: str, kind: StackKind) -> dict[str, str]:
    """The resource names a tool needs, by attribute, from the one stack of its kind in a CDK outputs file."""
    deploy = how_to_write(env)
    document = read_outputs_file(path, env)
    suffix = f"-{kind.name}"
    matching = sorted(str(stack) for stack in document if str(stack).endswith(suffix))
    if not matching:
        found = ", ".join(sorted(document)) or "none"
        raise UsageError(f"outputs file {path} has no stack ending in {suffix} (it has: {found}); {deploy}, or pass --stack")
    if len(matching) > 1:
        several = ", ".join(matching)
        raise UsageError(f"outputs file {path} has {len(matching)} stacks ending in {suffix} ({several}); pass --stack to choose one")
    stack = matching[0]
    outputs = document[stack]
    missing = [name for name in kind.outputs if name not in outputs]
    if missing:
        raise UsageError(
            f"stack {stack} in outputs file {path} has no outputs {missing}; {deploy} to bring the file up to date, or pass --stack"
        )
    return {attribute: str(outputs[name]) for name, attribute in kind.outputs.items()}


def target_flags(args: argparse.Namespace) -> str:
    """How the command line named its target, to repeat in a command the tool prints ("" when by resource names)."""
    if getattr(args, "env", None):
        path = getattr(args, "outputs_file", None)
        return f"--env {args.env}" + (f" --outputs-file {path}" if path is not None else "")
    if getattr(args, "stack", None):
        return f"--stack {args.stack}"
    return ""


def resolve_target(args: argparse.Namespace, kind: StackKind, cloudformation: Any | None, aws: AwsSession) -> dict[str, str]:
    """The resources from --env, --stack, or each resource option; a usage error unless exactly one way is given and complete.
    An outputs file of `make serve` also points `aws` at its embedded cloud."""
    named = {attribute: getattr(args, attribute) for attribute in kind.outputs.values()}
    ways = [way for way, given in (("--env", args.env), ("--stack", args.stack), ("the resource names", any(named.values()))) if given]
    if len(ways) > 1:
        raise UsageError(f"give {ways[0]} or {ways[1]}, not both" if len(ways) == 2 else "give one of --env, --stack or the resource names")
    if args.outputs_file is not None and not args.env:
        raise UsageError(f"--outputs-file goes with --env (it replaces ./{OUTPUTS_FILE.format(env='NAME')})")
    if args.env:
        path = outputs_file(args.env, args.outputs_file)
        local = local_cloud_of(path, args.env)
        if local is not None:
            aws.use_local(local)
        return resources_from_outputs_file(path, args.env, kind)
    if args.stack:
        return resources_from_stack(cloudformation or aws.client("cloudformation"), args.stack, kind)
    if not all(named.values()):
        flags = " ".join(kind.option(attribute) for attribute in kind.outputs.values())
        raise UsageError(f"give --stack, or every one of {flags}, or --env to read them from {OUTPUTS_FILE.format(env='<env>')}")
    return {attribute: str(value) for attribute, value in named.items()}


@contextlib.contextmanager
def usage_errors(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Turn a usage error, or the SDK's missing-set-up errors, into one line and exit status 2."""
    try:
        yield
    except (UsageError, NoCredentialsError, PartialCredentialsError, NoRegionError, ProfileNotFound) as err:
        parser.exit(USAGE_EXIT_STATUS, f"{parser.prog}: error: {err}\n")
