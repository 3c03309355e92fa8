"""What `make diff`, `make deploy` and `make bootstrap` check before the CDK CLI runs, so that a
missing set-up ends in one line saying what to do, in seconds, instead of the CLI's generic errors
("Unable to resolve AWS account to use", printed twice) after a synth.

1. AWS credentials exist and work: STS GetCallerIdentity (which no policy can deny), with short
   timeouts and one retry, so a machine without network fails fast too. No credentials, an SSO
   session that expired or was never started, a profile that does not exist, keys that expired
   or are wrong, no region, no network: each has its own message naming the fix.
2. They are for the environment's account, when infra/config.py pins one (`EnvConfig.account`).
3. For diff and deploy: the account and region are bootstrapped for this CDK version. The
   synthesized templates assert a minimum version of the bootstrap stack (CDKToolkit) through the
   SSM parameter /cdk-bootstrap/<qualifier>/version; the check reads that parameter and compares.
   The minimum and the parameter's name come from the installed aws-cdk-lib itself: a one-resource
   stack with the app's synthesizer and cdk.json's context (its `@aws-cdk/core:bootstrapQualifier`
   included) is synthesized in a temporary folder (about a second; the whole app takes several and
   cdk-nag). tests/unit/test_preflight.py checks that the app's templates ask for the same.

   When the credentials may not read the parameter (AccessDenied), the check says so on stderr
   and lets the command go on: the recommended least-privilege set-up only lets the deployer
   assume the bootstrap roles, and the CDK CLI reads the parameter itself through the deploy role,
   failing with its own message if the version is too old. Refusing there would block a working set-up.
4. Every layer the functions use resolves in the region (for bootstrap too: a region the stacks
   cannot deploy to is not worth bootstrapping). The Powertools layer comes from the public SSM
   parameter /aws/service/powertools/python/<architecture>/<runtime>/<version>, which Powertools
   publishes only in the regions (and for the releases) it builds the layer for; elsewhere the
   change set fails at deploy. The name comes from the code that puts it in the templates
   (infra/lambda_factory.py's powertools_parameter, for the environment's CommonProps), and the
   check reads it. In the `otel` tracing mode the ADOT layer is pinned per region
   (CommonProps.adot_layer_arns): the region must have an entry. Credentials that may not read the
   parameter get a warning, as for the bootstrap version.

The region is the one the CDK CLI uses: --region, else the environment's in infra/config.py, else
AWS_REGION, else AWS_DEFAULT_REGION or the profile's. The CLI would fall back to us-east-1 without
any; the check asks for one instead, since deploying there by accident is worse than being asked.

    python -m ops.preflight --command deploy --env dev      # what `make deploy ENV=dev` runs first
    python -m ops.preflight --command bootstrap --env prod  # prints aws://<account>/<region> for `cdk bootstrap`

Exit status 0 when ready (a short summary on stderr), 2 with one line on stderr otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOError,
    TokenRetrievalError,
)
from botocore.exceptions import ConnectionError as SdkConnectionError

from ops.cli import USAGE_EXIT_STATUS, UsageError, add_aws_options

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("diff", "deploy", "bootstrap")
# A few seconds per attempt and one retry: a dead network or proxy fails in seconds, not minutes.
CLIENT_CONFIG = Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 2, "mode": "standard"})
# STS's answers to credentials it does not take (expired, revoked, mistyped, or a skewed clock).
REJECTED_CREDENTIALS = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "RequestExpired",
    "AuthFailure",
}
ACCESS_DENIED = {"AccessDenied", "AccessDeniedException"}
CREDENTIAL_SOURCES = {
    "env": "the AWS_ACCESS_KEY_ID variables",
    "shared-credentials-file": "the credentials file",
    "config-file": "the config file",
    "sso": "the SSO profile",
    "assume-role": "the assume-role profile",
    "assume-role-with-web-identity": "the web-identity token",
    "custom-process": "the profile's credential_process",
    "iam-role": "the instance role",
    "container-role": "the container role",
}


@dataclass(frozen=True)
class BootstrapRequirement:
    """What the synthesized templates ask of the environment's bootstrap stack."""

    parameter: str  # the SSM parameter holding its version, /cdk-bootstrap/<qualifier>/version
    min_version: int


@dataclass(frozen=True)
class LayerRequirement:
    """Where the layers the environment's functions use resolve, per region."""

    powertools_parameter: str  # the public SSM parameter of the Powertools layer's ARN
    adot_layer_arns: Mapping[str, str] | None = None  # the ADOT layer per region, when the functions use it


@dataclass(frozen=True)
class Target:
    """The make command being checked, and where it goes."""

    command: str  # diff, deploy or bootstrap
    env: str
    profile: str | None = None  # --profile, else AWS_PROFILE (botocore reads it)
    region: str | None = None  # --region
    account_pin: str | None = None  # EnvConfig.account
    region_pin: str | None = None  # EnvConfig.region

    @property
    def label(self) -> str:
        return f"make {self.command} ENV={self.env}"

    @property
    def profile_hint(self) -> str:
        return self.profile or os.environ.get("AWS_PROFILE") or "<profile>"


def no_credentials(target: Target) -> str:
    return (
        "no AWS credentials found. Set AWS_PROFILE to a profile of ~/.aws/config "
        f"(e.g. `AWS_PROFILE=team-dev {target.label}`; for an SSO profile run `aws sso login --profile <name>` first), "
        "or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary keys)"
    )


def explain(error: Exception, target: Target, source: str | None = None) -> str:
    """One actionable sentence for an SDK error met while checking `target`."""
    login = f"run `aws sso login --profile {target.profile_hint}`, then `{target.label}` again"
    if isinstance(error, ProfileNotFound):
        return (
            f"{error}: AWS_PROFILE (or --profile) names a profile that is in neither ~/.aws/config nor ~/.aws/credentials "
            "(nor AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE); `aws configure list-profiles` lists them, "
            "`aws configure sso` adds one"
        )
    if isinstance(error, (SSOError, TokenRetrievalError)):
        return f"the AWS SSO session of profile {target.profile_hint} has expired or was never started ({error}): {login}"
    if isinstance(error, NoCredentialsError):
        return no_credentials(target)
    if isinstance(error, (PartialCredentialsError, CredentialRetrievalError)):
        return f"the AWS credentials are incomplete or could not be fetched ({error}); fix the profile, or {no_credentials(target)}"
    if isinstance(error, NoRegionError):
        return (
            "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or `region` in the profile), "
            "or the environment's region in infra/config.py"
        )
    if isinstance(error, (SdkConnectionError, HTTPClientError)):
        return f"cannot reach AWS ({error}); check the network, a proxy (HTTPS_PROXY) or the region, then retry"
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        message = str(error.response.get("Error", {}).get("Message", error))
        if code in REJECTED_CREDENTIALS:
            where = CREDENTIAL_SOURCES.get(source or "", "the current credentials")
            return (
                f"AWS rejected the credentials from {where} ({code}: {message}). Renew them: for an SSO profile {login}; "
                "for keys, export fresh AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN; "
                "or set AWS_PROFILE to a profile whose credentials work"
            )
        return f"AWS answered {code}: {message}"
    return f"cannot use the AWS set-up ({type(error).__name__}: {error})"


def open_session(target: Target) -> tuple[Any, str | None]:
    """The SDK session and where its credentials come from; credentials are resolved here (an SSO token too)."""
    import boto3

    session = boto3.Session(profile_name=target.profile)
    credentials = session.get_credentials()
    if credentials is None:
        raise UsageError(no_credentials(target))
    credentials.get_frozen_credentials()  # an SSO profile fetches (or fails to load) its token here
    return session, credentials.method


def region_of(target: Target, session: Any) -> str:
    """The region the CDK CLI deploys to (see the module's docstring)."""
    region = target.region or target.region_pin or os.environ.get("AWS_REGION") or session.region_name
    if not region:
        raise NoRegionError()
    return str(region)


def caller_account(sts: Any, target: Target) -> tuple[str, str]:
    """The account and ARN of the credentials; a pinned account must match."""
    identity = sts.get_caller_identity()
    account, arn = str(identity["Account"]), str(identity["Arn"])
    if target.account_pin is not None and account != target.account_pin:
        raise UsageError(
            f"the credentials are for account {account} ({arn}), but ENV={target.env} deploys to account {target.account_pin} "
            f"(infra/config.py): set AWS_PROFILE to a profile of account {target.account_pin}"
        )
    return account, arn


def check_bootstrap(ssm: Any, requirement: BootstrapRequirement, target: Target, account: str, region: str) -> str:
    """A summary when the environment is bootstrapped recently enough; UsageError when it is not.
    A warning on stderr, and the command goes on, when the parameter may not be read (see the docstring)."""
    where = f"account {account}, region {region}"
    bootstrap = f"run `make bootstrap ENV={target.env}` (once per account and region), then `{target.label}` again"
    try:
        value = ssm.get_parameter(Name=requirement.parameter)["Parameter"]["Value"]
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code == "ParameterNotFound":
            raise UsageError(
                f"{where} is not bootstrapped for the CDK (no SSM parameter {requirement.parameter}; "
                f"the CDKToolkit stack writes it): {bootstrap}"
            ) from error
        if code in ACCESS_DENIED:
            print(
                f"{target.label}: warning: not allowed to read {requirement.parameter} in {where}, so the bootstrap version "
                "is not checked here; the CDK CLI checks it through the bootstrap deploy role "
                f"(if it reports the environment is not bootstrapped, run `make bootstrap ENV={target.env}`)",
                file=sys.stderr,
            )
            return f"{where}: bootstrap version not checked (access denied)"
        raise
    try:
        version = int(value)
    except ValueError as error:
        raise UsageError(f"{requirement.parameter} in {where} holds {value!r}, not a bootstrap version: {bootstrap}") from error
    if version < requirement.min_version:
        raise UsageError(
            f"{where} is bootstrapped with version {version} ({requirement.parameter}), but this CDK version needs "
            f"{requirement.min_version} or later: run `make bootstrap ENV={target.env}` to upgrade the CDKToolkit stack, "
            f"then `{target.label}` again"
        )
    return f"{where}: CDK bootstrap version {version} (needs {requirement.min_version} or later)"


def check_layers(ssm: Any, layers: LayerRequirement, target: Target, region: str) -> str:
    """A summary when every layer resolves in `region`; UsageError saying what to do when one does not.
    A warning on stderr, and the command goes on, when the Powertools parameter may not be read."""
    parameter = layers.powertools_parameter
    releases = parameter.rsplit("/", 1)[0]
    try:
        arn = str(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code == "ParameterNotFound":
            raise UsageError(
                f"the Powertools layer the functions use is not published in region {region} (no public SSM parameter {parameter}): "
                f"deploy to a region where it is, or set powertools_layer_version in infra/config.py to a release published in {region} "
                f"(`aws ssm get-parameters-by-path --path {releases} --region {region}` lists them)"
            ) from error
        if code in ACCESS_DENIED:
            print(
                f"{target.label}: warning: not allowed to read {parameter} in region {region}, so whether the Powertools layer "
                "is published there is not checked here (CloudFormation resolves it at deploy)",
                file=sys.stderr,
            )
            return f"Powertools layer not checked in {region} (access denied)"
        raise
    if layers.adot_layer_arns is not None and region not in layers.adot_layer_arns:
        raise UsageError(
            f"tracing mode otel uses the ADOT layer, pinned per region in CommonProps.adot_layer_arns (infra/common.py's "
            f"ADOT_PYTHON_LAYER_ARNS), which has none for {region}: add its ARN "
            f"(`aws lambda list-layer-versions --layer-name AWSOpenTelemetryDistroPython --region {region}` prints it), "
            "or use another tracing mode"
        )
    adot = f", ADOT layer {layers.adot_layer_arns[region].partition(':layer:')[2]}" if layers.adot_layer_arns is not None else ""
    return f"Powertools layer {arn.partition(':layer:')[2]}{adot}"


def cdk_context(env: str) -> dict[str, Any]:
    """The context `cdk -c env=<env>` synthesizes with: cdk.json's, then cdk.context.json's, then env."""
    context: dict[str, Any] = dict(json.loads((ROOT / "cdk.json").read_text()).get("context", {}))
    cached = ROOT / "cdk.context.json"
    if cached.exists():
        context.update(json.loads(cached.read_text()))
    context["env"] = env
    return context


def bootstrap_requirement(env: str) -> BootstrapRequirement:
    """What the app's synthesizer asks of the bootstrap stack, from a one-resource stack synthesized with the app's context."""
    import aws_cdk as cdk

    with tempfile.TemporaryDirectory(prefix="preflight-") as outdir:
        app = cdk.App(context=cdk_context(env), outdir=outdir)
        stack = cdk.Stack(app, "Preflight")
        cdk.CfnResource(stack, "Nothing", type="AWS::CloudFormation::WaitConditionHandle")
        artifact = app.synth().get_stack_artifact("Preflight")
        parameter, version = artifact.bootstrap_stack_version_ssm_parameter, artifact.requires_bootstrap_stack_version
    if parameter is None or version is None:
        raise UsageError("the CDK synthesizer asks for no bootstrap version; nothing to check")
    return BootstrapRequirement(parameter=parameter, min_version=int(version))


def layer_requirement(env: str) -> LayerRequirement:
    """The layers of the environment's functions, from the code that adds them to the templates."""
    from onceflow.infra.config import ConfigError, load_config
    from onceflow.infra.lambda_factory import powertools_parameter, uses_adot_layer

    try:
        common = load_config(env).common
    except ConfigError as error:
        raise UsageError(str(error)) from error
    return LayerRequirement(powertools_parameter(common), dict(common.adot_layer_arns) if uses_adot_layer(common) else None)


def pinned(env: str) -> tuple[str | None, str | None]:
    """The account and region infra/config.py gives the environment (None: the credentials decide)."""
    from onceflow.infra.config import ConfigError, load_config

    try:
        config = load_config(env)
    except ConfigError as error:
        raise UsageError(str(error)) from error
    return config.account, config.region


def preflight(
    target: Target,
    *,
    session: Any = None,
    pins: Callable[[str], tuple[str | None, str | None]] = pinned,
    requirement: BootstrapRequirement | None = None,
    layers: LayerRequirement | None = None,
) -> str:
    """The preflight of `target`: a summary, or UsageError with one actionable message. For
    `bootstrap`, the summary is the environment to bootstrap, aws://<account>/<region>.
    `session` replaces the SDK session of --profile; `pins` infra/config.py; `requirement` the probe
    synth; `layers` the environment's layers."""
    source = None
    try:
        if session is None:
            session, source = open_session(target)  # before the config: no credentials fails in well under a second
        account_pin, region_pin = pins(target.env)
        target = replace(target, account_pin=account_pin, region_pin=region_pin)
        region = region_of(target, session)
        account, arn = caller_account(session.client("sts", region_name=region, config=CLIENT_CONFIG), target)
        ssm = session.client("ssm", region_name=region, config=CLIENT_CONFIG)
        layers_found = check_layers(ssm, layers or layer_requirement(target.env), target, region)
        if target.command == "bootstrap":
            return f"aws://{account}/{region}"
        requirement = requirement or bootstrap_requirement(target.env)
        return f"{arn}; " + check_bootstrap(ssm, requirement, target, account, region) + f"; {layers_found}"
    except (BotoCoreError, ClientError) as error:
        raise UsageError(explain(error, target, source)) from error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.preflight",
        description="Check AWS credentials, the CDK bootstrap and the layers before `make diff`, `make deploy` or `make bootstrap`.",
    )
    parser.add_argument("--command", choices=COMMANDS, required=True, help="the make target about to run")
    parser.add_argument("--env", default="dev", help="the environment of infra/config.py (default: dev)")
    add_aws_options(parser)
    args = parser.parse_args(argv)
    target = Target(command=args.command, env=args.env, profile=args.profile, region=args.region)
    try:
        summary = preflight(target)
    except UsageError as error:
        print(f"{target.label}: {error}", file=sys.stderr)
        return USAGE_EXIT_STATUS
    if args.command == "bootstrap":
        print(summary)  # stdout: the Makefile passes it to `cdk bootstrap`
        print(f"{target.label}: credentials checked; bootstrapping {summary}", file=sys.stderr)
    else:
        print(f"{target.label}: preflight passed: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
