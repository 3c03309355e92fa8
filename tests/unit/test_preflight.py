"""The deploy preflight (ops/preflight.py): before `make diff`, `make deploy` and `make bootstrap` call
the CDK CLI, a missing or broken AWS set-up ends in one line naming the fix, in seconds.

The SDK runs for real: credentials from real (temporary) config files, an SSO session from a real
token cache, STS and SSM on the embedded cloud (moto), and botocore's Stubber for the answers moto
does not give (expired keys, access denied). moto has none of AWS's public /aws/service/powertools
parameters (and refuses to store one): `powertools_published` answers them, for us-east-1 only."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    SSOTokenLoadError,
    TokenRetrievalError,
    UnauthorizedSSOTokenError,
)
from botocore.stub import Stubber

from devtools.aws.template_resources import Template, resources_of_type
from ops.cli import USAGE_EXIT_STATUS, UsageError
from ops.preflight import (
    BootstrapRequirement,
    LayerRequirement,
    Target,
    bootstrap_requirement,
    explain,
    layer_requirement,
    main,
    preflight,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = Target(command="deploy", env="dev")
REQUIREMENT = BootstrapRequirement(parameter="/cdk-bootstrap/hnb659fds/version", min_version=6)
MOTO_ACCOUNT = "123456789012"  # the account moto's STS answers with
POWERTOOLS = "/aws/service/powertools/python/arm64/python3.13/3.37.0"
LAYERS = LayerRequirement(powertools_parameter=POWERTOOLS)
ADOT_ARN = "arn:aws:lambda:us-east-1:615299751070:layer:AWSOpenTelemetryDistroPython:25"
POWERTOOLS_REGIONS = {"us-east-1"}  # where `powertools_published` publishes the layer
NO_CREDENTIALS = "no AWS credentials found"
CREDENTIAL_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
)


def no_pins(env: str) -> tuple[str | None, str | None]:
    """infra/config.py as shipped: no environment names its account or region."""
    return None, None


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credential variables, empty config files, no instance metadata; HOME (the SSO token cache) is tmp_path."""
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def published_layer_arn(region: str) -> str:
    return f"arn:aws:lambda:{region}:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:30"


@pytest.fixture
def powertools_published() -> Iterator[None]:
    """Every SDK session made from now on answers GetParameter of a /aws/service/powertools/ name in
    POWERTOOLS_REGIONS as AWS does (the layer's ARN), before the call reaches moto; elsewhere moto
    answers ParameterNotFound, as AWS does in a region Powertools does not publish in."""
    import botocore.handlers

    def answer(params: dict[str, Any], request_signer: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        name = json.loads(params["body"])["Name"]
        region = request_signer.region_name
        if not name.startswith("/aws/service/powertools/") or region not in POWERTOOLS_REGIONS:
            return None
        parameter = {"Name": name, "Type": "String", "Value": published_layer_arn(region), "Version": 1, "DataType": "text"}
        return AWSResponse(f"https://ssm.{region}.amazonaws.com/", 200, {}, None), {"Parameter": parameter}

    # In the list itself: moto, imported later, appends its own handler to it (a copy would lose it when restored).
    handler = ("before-call.ssm.GetParameter", answer)
    botocore.handlers.BUILTIN_HANDLERS.append(handler)
    try:
        yield
    finally:
        botocore.handlers.BUILTIN_HANDLERS.remove(handler)


@pytest.fixture
def embedded(powertools_published: None) -> Iterator[Any]:
    """The embedded cloud, and a session whose credentials are conftest's test keys; the Powertools layer is published in us-east-1."""
    from devtools.aws.moto_patches import embedded_aws

    with embedded_aws():
        yield boto3.Session(region_name="us-east-1")


def run_main(argv: list[str], capsys: Any) -> tuple[int, list[str]]:
    status = main(argv)
    return status, capsys.readouterr().err.strip().splitlines()


class StubbedSession:
    """A session whose clients are the given (stubbed) ones."""

    def __init__(self, **clients: Any) -> None:
        self.clients = clients
        self.region_name = "us-east-1"

    def client(self, service: str, **_: Any) -> Any:
        return self.clients[service]


# --- credentials ---------------------------------------------------------------------------------


def test_no_credentials_is_one_line_naming_aws_profile_sso_login_and_the_keys(no_credentials: Path, capsys: Any) -> None:
    # Given no credential variables, empty config files and no instance metadata
    # When the deploy preflight runs
    status, err = run_main(["--command", "deploy", "--env", "dev"], capsys)
    # Then it fails with exit 2 and one line naming every way to give credentials
    assert status == USAGE_EXIT_STATUS
    assert len(err) == 1
    assert err[0].startswith(f"make deploy ENV=dev: {NO_CREDENTIALS}")
    assert "AWS_PROFILE" in err[0] and "aws sso login" in err[0] and "AWS_ACCESS_KEY_ID" in err[0]


SSO_CONFIG = """\
[profile team-dev]
sso_session = corp
sso_account_id = 111122223333
sso_role_name = Deployer
region = eu-west-1

[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = eu-west-1
sso_registration_scopes = sso:account:access
"""


@pytest.mark.parametrize("token", ["expired", "never logged in"])
def test_an_expired_or_missing_sso_session_says_aws_sso_login(
    token: str, no_credentials: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given an SSO profile (as `aws configure sso` writes it) whose token has expired, or was never fetched
    (no_credentials / "config").write_text(SSO_CONFIG)
    monkeypatch.setenv("AWS_PROFILE", "team-dev")
    if token == "expired":
        cache = no_credentials / ".aws" / "sso" / "cache"
        cache.mkdir(parents=True)
        expired = {
            "startUrl": "https://corp.awsapps.com/start",
            "region": "eu-west-1",
            "accessToken": "t",
            "expiresAt": "2020-01-01T00:00:00Z",
        }
        (cache / f"{hashlib.sha1(b'corp').hexdigest()}.json").write_text(json.dumps(expired))
    # When the deploy preflight runs
    status, err = run_main(["--command", "deploy", "--env", "dev"], capsys)
    # Then one line says the SSO session has expired and how to log in again with that profile
    assert status == USAGE_EXIT_STATUS
    assert len(err) == 1
    assert "SSO session of profile team-dev has expired or was never started" in err[0]
    assert "run `aws sso login --profile team-dev`, then `make deploy ENV=dev` again" in err[0]


@pytest.mark.parametrize(
    "error",
    [
        SSOTokenLoadError(error_msg="Token for corp does not exist"),
        UnauthorizedSSOTokenError(),
        TokenRetrievalError(provider="sso", error_msg="Token has expired and refresh failed"),
    ],
)
def test_every_sso_token_error_says_aws_sso_login(error: Exception) -> None:
    # Given an SSO token error the SDK raises (UnauthorizedSSOTokenError: a legacy profile's token the portal refuses)
    # When it is explained
    message = explain(error, Target(command="diff", env="prod", profile="team-prod"))
    # Then the fix is to log in with the profile
    assert "run `aws sso login --profile team-prod`, then `make diff ENV=prod` again" in message


def test_a_profile_that_does_not_exist_is_named(no_credentials: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given AWS_PROFILE naming a profile that no config file has
    monkeypatch.setenv("AWS_PROFILE", "team-typo")
    # When the bootstrap preflight runs
    status, err = run_main(["--command", "bootstrap", "--env", "dev"], capsys)
    # Then one line names the profile and where profiles are listed
    assert status == USAGE_EXIT_STATUS
    assert len(err) == 1
    assert "The config profile (team-typo) could not be found" in err[0]
    assert "aws configure list-profiles" in err[0]


def test_expired_keys_say_where_they_come_from_and_how_to_renew() -> None:
    # Given STS refusing the session's keys as expired
    sts = boto3.client("sts", region_name="us-east-1")
    with Stubber(sts) as stub:
        stub.add_client_error("get_caller_identity", "ExpiredToken", "The security token included in the request is expired", 403)
        # When the deploy preflight runs with those keys from the environment variables
        with pytest.raises(UsageError) as refused:
            preflight(DEPLOY, session=StubbedSession(sts=sts), pins=no_pins, requirement=REQUIREMENT)
    # Then the message names the code, the source and the ways to renew
    message = str(refused.value)
    assert "ExpiredToken" in message and "aws sso login" in message and "AWS_ACCESS_KEY_ID" in message


def test_no_region_is_asked_for(no_credentials: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given keys in the environment, but no region in it, in the (empty) profile or in infra/config.py's dev
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    # When the deploy preflight runs
    status, err = run_main(["--command", "deploy", "--env", "dev"], capsys)
    # Then one line asks for AWS_REGION, before any call
    # (the first aws_cdk import of a run may add Node's own warnings: on PATH without .venv/bin, an older Node)
    assert status == USAGE_EXIT_STATUS
    assert [line for line in err if line.startswith("make ")] == [
        "make deploy ENV=dev: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or `region` in the profile), "
        "or the environment's region in infra/config.py"
    ]


@pytest.mark.parametrize(
    "error",
    [EndpointConnectionError(endpoint_url="https://sts.eu-west-1.amazonaws.com/"), ConnectTimeoutError(endpoint_url="https://sts.x/")],
)
def test_no_network_is_named(error: Exception) -> None:
    # Given the SDK failing to reach the endpoint, When it is explained, Then the network is named
    assert explain(error, DEPLOY).startswith("cannot reach AWS")


def test_credentials_for_another_account_than_the_configs_are_refused(embedded: Any) -> None:
    # Given an environment pinned to account 111122223333 and credentials of moto's account
    # When the deploy preflight runs
    with pytest.raises(UsageError) as refused:
        preflight(DEPLOY, session=embedded, pins=lambda env: ("111122223333", None), requirement=REQUIREMENT)
    # Then it names both accounts
    assert f"the credentials are for account {MOTO_ACCOUNT}" in str(refused.value)
    assert "deploys to account 111122223333" in str(refused.value)


# --- bootstrap -----------------------------------------------------------------------------------


def put_bootstrap_version(value: str) -> None:
    boto3.client("ssm", region_name="us-east-1").put_parameter(Name=REQUIREMENT.parameter, Value=value, Type="String")


def test_a_bootstrapped_environment_passes(embedded: Any) -> None:
    # Given an account and region bootstrapped with version 30
    put_bootstrap_version("30")
    # When the deploy preflight runs
    summary = preflight(DEPLOY, session=embedded, pins=no_pins, requirement=REQUIREMENT)
    # Then it passes and says what it found
    assert f"account {MOTO_ACCOUNT}, region us-east-1: CDK bootstrap version 30 (needs 6 or later)" in summary


def test_a_region_not_bootstrapped_says_make_bootstrap(embedded: Any) -> None:
    # Given an account and region never bootstrapped (no version parameter)
    # When the diff preflight runs
    with pytest.raises(UsageError) as refused:
        preflight(Target(command="diff", env="dev"), session=embedded, pins=no_pins, requirement=REQUIREMENT)
    # Then it says so and names the make target
    assert f"account {MOTO_ACCOUNT}, region us-east-1 is not bootstrapped" in str(refused.value)
    assert "run `make bootstrap ENV=dev`" in str(refused.value)


def test_an_old_bootstrap_version_says_make_bootstrap(embedded: Any) -> None:
    # Given a bootstrap stack of version 5, older than the templates ask for
    put_bootstrap_version("5")
    # When the deploy preflight runs
    with pytest.raises(UsageError) as refused:
        preflight(DEPLOY, session=embedded, pins=no_pins, requirement=REQUIREMENT)
    # Then it names both versions and the make target
    assert "bootstrapped with version 5" in str(refused.value) and "needs 6 or later" in str(refused.value)
    assert "run `make bootstrap ENV=dev`" in str(refused.value)


def test_a_version_parameter_that_may_not_be_read_warns_and_goes_on(capsys: Any) -> None:
    # Given credentials that may call STS but not read the bootstrap version parameter
    sts = boto3.client("sts", region_name="us-east-1")
    ssm = boto3.client("ssm", region_name="us-east-1")
    with Stubber(sts) as sts_stub, Stubber(ssm) as ssm_stub:
        sts_stub.add_response("get_caller_identity", {"Account": MOTO_ACCOUNT, "Arn": f"arn:aws:iam::{MOTO_ACCOUNT}:user/deployer"})
        ssm_stub.add_response("get_parameter", {"Parameter": {"Name": POWERTOOLS, "Value": published_layer_arn("us-east-1")}})
        ssm_stub.add_client_error("get_parameter", "AccessDeniedException", "not authorized to perform: ssm:GetParameter", 400)
        # When the deploy preflight runs
        summary = preflight(DEPLOY, session=StubbedSession(sts=sts, ssm=ssm), pins=no_pins, requirement=REQUIREMENT, layers=LAYERS)
    # Then it goes on (the CDK CLI checks through its deploy role) and warns once on stderr
    assert "bootstrap version not checked (access denied)" in summary
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "make deploy ENV=dev: warning: not allowed to read" in warning[0]


def test_bootstrap_checks_credentials_and_prints_the_environment(embedded: Any) -> None:
    # Given credentials and no bootstrap yet
    # When the bootstrap preflight runs
    summary = preflight(Target(command="bootstrap", env="dev"), session=embedded, pins=no_pins)
    # Then it names the environment `cdk bootstrap` takes, without asking for a bootstrap version
    assert summary == f"aws://{MOTO_ACCOUNT}/us-east-1"


def test_the_synthesizer_probe_asks_what_the_apps_templates_assert(dev_templates: dict[str, Template]) -> None:
    # Given the requirement the preflight reads from a one-resource stack with the app's context
    requirement = bootstrap_requirement("dev")
    # When each stack of the synthesized app is read: its BootstrapVersion parameter, and the versions its rule refuses
    for name, template in dev_templates.items():
        parameter = template["Parameters"]["BootstrapVersion"]["Default"]
        (assertion,) = template["Rules"]["CheckBootstrapVersion"]["Assertions"]
        refused = [int(v) for v in assertion["Assert"]["Fn::Not"][0]["Fn::Contains"][0]]
        # Then the preflight reads the same parameter and asks for the first version the rule accepts
        assert (parameter, max(refused) + 1) == (requirement.parameter, requirement.min_version), name


def test_main_passes_a_bootstrapped_environment(embedded: Any, capsys: Any) -> None:
    # Given a bootstrapped account and region on the embedded cloud
    put_bootstrap_version("30")
    # When the whole preflight runs (infra/config.py's dev, the synthesizer probe)
    status, err = run_main(["--command", "deploy", "--env", "dev"], capsys)
    # Then it passes with one summary line
    assert status == 0
    assert err[-1].startswith("make deploy ENV=dev: preflight passed:")


# --- layers --------------------------------------------------------------------------------------


def layer_check(target: Target, layers: LayerRequirement, *ssm_answers: dict[str, Any] | str) -> str:
    """The preflight of `target` with stubbed STS and SSM: SSM answers each GetParameter in turn
    (a dict: the parameter; a string: that error code)."""
    sts = boto3.client("sts", region_name="us-east-1")
    ssm = boto3.client("ssm", region_name="us-east-1")
    with Stubber(sts) as sts_stub, Stubber(ssm) as ssm_stub:
        sts_stub.add_response("get_caller_identity", {"Account": MOTO_ACCOUNT, "Arn": f"arn:aws:iam::{MOTO_ACCOUNT}:user/deployer"})
        for ssm_answer in ssm_answers:
            if isinstance(ssm_answer, str):
                ssm_stub.add_client_error("get_parameter", ssm_answer, ssm_answer, 400)
            else:
                ssm_stub.add_response("get_parameter", {"Parameter": ssm_answer})
        return preflight(target, session=StubbedSession(sts=sts, ssm=ssm), pins=no_pins, requirement=REQUIREMENT, layers=layers)


def test_a_region_without_the_powertools_layer_says_what_to_do() -> None:
    # Given a bootstrapped region where Powertools does not publish its layer (no public SSM parameter):
    # before, the preflight passed it and the change set failed at deploy
    # When the deploy preflight runs
    with pytest.raises(UsageError) as refused:
        layer_check(replace_region(DEPLOY, "ap-southeast-7"), LAYERS, "ParameterNotFound")
    # Then one line names the region and the parameter, and how to find a release published there
    message = str(refused.value)
    assert "\n" not in message
    assert f"not published in region ap-southeast-7 (no public SSM parameter {POWERTOOLS})" in message
    assert "`aws ssm get-parameters-by-path --path /aws/service/powertools/python/arm64/python3.13 --region ap-southeast-7`" in message


def test_a_region_with_the_powertools_layer_passes_and_names_it() -> None:
    # Given a bootstrapped region where the layer is published
    summary = layer_check(
        DEPLOY,
        LAYERS,
        {"Name": POWERTOOLS, "Value": published_layer_arn("us-east-1")},
        {"Name": REQUIREMENT.parameter, "Value": "30"},
    )
    # Then the summary names the layer version it resolves to
    assert summary.endswith("; Powertools layer AWSLambdaPowertoolsPythonV3-python314-arm64:30")


def test_a_powertools_parameter_that_may_not_be_read_warns_and_goes_on(capsys: Any) -> None:
    # Given credentials that may not read the public parameter (CloudFormation resolves it at deploy)
    summary = layer_check(DEPLOY, LAYERS, "AccessDeniedException", {"Name": REQUIREMENT.parameter, "Value": "30"})
    # Then the command goes on, with one warning
    assert "Powertools layer not checked in us-east-1 (access denied)" in summary
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith(f"make deploy ENV=dev: warning: not allowed to read {POWERTOOLS}")


def test_otel_tracing_in_a_region_without_a_pinned_adot_layer_says_what_to_do() -> None:
    # Given the otel tracing mode, whose ADOT layer is pinned for us-east-1 only, and a region with Powertools
    otel = LayerRequirement(powertools_parameter=POWERTOOLS, adot_layer_arns={"us-east-1": ADOT_ARN})
    published = {"Name": POWERTOOLS, "Value": published_layer_arn("eu-west-1")}
    # When the diff preflight runs for eu-west-1
    with pytest.raises(UsageError) as refused:
        layer_check(replace_region(Target(command="diff", env="dev"), "eu-west-1"), otel, published)
    # Then one line says to pin that region's ADOT layer, and how to find it
    message = str(refused.value)
    assert "CommonProps.adot_layer_arns" in message and "which has none for eu-west-1" in message
    assert "`aws lambda list-layer-versions --layer-name AWSOpenTelemetryDistroPython --region eu-west-1`" in message
    # and in us-east-1 it passes, naming both layers
    summary = layer_check(DEPLOY, otel, published, {"Name": REQUIREMENT.parameter, "Value": "30"})
    assert summary.endswith("Powertools layer AWSLambdaPowertoolsPythonV3-python314-arm64:30, ADOT layer AWSOpenTelemetryDistroPython:25")


def replace_region(target: Target, region: str) -> Target:
    return Target(command=target.command, env=target.env, region=region)


def test_bootstrap_of_a_region_without_the_powertools_layer_is_refused(embedded: Any) -> None:
    # Given the embedded cloud, where the layer is published in us-east-1 only
    # When `make bootstrap` is checked for ap-southeast-7 and for us-east-1
    with pytest.raises(UsageError) as refused:
        preflight(Target(command="bootstrap", env="dev", region="ap-southeast-7"), session=embedded, pins=no_pins)
    summary = preflight(Target(command="bootstrap", env="dev", region="us-east-1"), session=embedded, pins=no_pins)
    # Then the first is refused before anything is bootstrapped, the second goes on
    assert "not published in region ap-southeast-7" in str(refused.value)
    assert summary == f"aws://{MOTO_ACCOUNT}/us-east-1"


def test_main_stops_a_deploy_to_a_region_without_the_powertools_layer(embedded: Any, capsys: Any) -> None:
    # Given the embedded cloud, where the layer is published in us-east-1 only
    # When the whole preflight runs for ap-southeast-7 (infra/config.py's dev: the layer its functions use)
    status, err = run_main(["--command", "deploy", "--env", "dev", "--region", "ap-southeast-7"], capsys)
    # Then it exits 2 with one line naming the parameter the dev functions resolve
    assert status == USAGE_EXIT_STATUS
    (line,) = [line for line in err if line.startswith("make ")]
    assert line.startswith(
        f"make deploy ENV=dev: the Powertools layer the functions use is not published in region ap-southeast-7 "
        f"(no public SSM parameter {layer_requirement('dev').powertools_parameter})"
    )


def test_the_layers_checked_are_every_layer_the_apps_functions_use(dev_templates: dict[str, Template]) -> None:
    # Given what the preflight checks for dev: its Powertools parameter, no ADOT layer (dev traces with Lambda's active tracing)
    layers = layer_requirement("dev")
    bootstrap_version = bootstrap_requirement("dev").parameter
    assert layers.adot_layer_arns is None
    # When each synthesized stack's functions' layers and SSM-typed parameters are read
    layer_sources: set[str] = set()
    for name, template in dev_templates.items():
        ssm_parameters = {
            key: spec["Default"] for key, spec in template.get("Parameters", {}).items() if spec["Type"].startswith("AWS::SSM::Parameter::")
        }
        functions = resources_of_type(template, "AWS::Lambda::Function").values()
        layers_used = [layer["Ref"] for function in functions for layer in function["Properties"].get("Layers", [])]
        # (the SDK layer is a layer version of the stack itself: the deploy creates it, nothing to resolve)
        own_layers = set(resources_of_type(template, "AWS::Lambda::LayerVersion"))
        assert len(own_layers) == (1 if functions else 0), name
        layer_sources |= {ssm_parameters[layer] for layer in layers_used if layer not in own_layers}
        # Then every SSM parameter a stack resolves at deploy is one the preflight reads, and no stack maps an ADOT layer
        assert set(ssm_parameters.values()) <= {layers.powertools_parameter, bootstrap_version}, name
        assert "AdotPythonLayer" not in template.get("Mappings", {}), name
    # and every function's layers resolve from the Powertools parameter the preflight reads
    assert layer_sources == {layers.powertools_parameter}


# --- make deploy ---------------------------------------------------------------------------------


def test_make_deploy_without_credentials_fails_fast_with_one_message(tmp_path: Path) -> None:
    # Given an environment with no credentials: no variables, empty config files, no instance metadata
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES and not k.startswith(("MAKE", "MFLAGS"))}
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    env |= {"AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    # When `make deploy ENV=dev` runs
    started = time.monotonic()
    done = subprocess.run(
        ["make", "--no-print-directory", "deploy", "ENV=dev"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    # Then it fails within 20 s, with the preflight's message once and none of the CDK CLI's
    assert done.returncode != 0
    assert elapsed < 20, f"took {elapsed:.1f} s"
    assert output.count(NO_CREDENTIALS) == 1, output
    assert "Unable to resolve AWS account" not in output
    assert "npx cdk" not in output  # the CLI never started
