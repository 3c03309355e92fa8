"""The operator tools' shared scaffolding (ops/cli.py): every tool takes --region and --profile,
finds its resources through --env (the cdk-outputs-<env>.json of `make deploy`), --stack or by name,
and ends a usage error with one line and exit 2."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ops.cli import AwsSession, StackKind, UsageError, add_target, resolve_target, resources_from_stack, target_flags

TOOLS = ["ops.empty_buckets", "ops.event_log_pending", "ops.event_log_reprocess", "ops.runner_stats_reprocess", "ops.taxi_redrive"]
# Each tool's command line that gets as far as its first AWS client.
REACHES_AWS = {
    "ops.empty_buckets": ["--env", "dev"],
    "ops.event_log_pending": ["--stack", "Onceflow-dev-EventLog"],
    "ops.event_log_reprocess": ["--log-id", "sheet-1", "--stack", "Onceflow-dev-EventLog"],
    "ops.runner_stats_reprocess": ["--from", "2026-11-01", "--stack", "Onceflow-dev-RunnerStats"],
    "ops.taxi_redrive": ["--stack", "Onceflow-dev-TaxiEtl"],
}
# Imported once, at collection, for every test of this module.
MODULES = {tool: importlib.import_module(tool) for tool in TOOLS}
KIND = StackKind("EventLog", {"LogTableName": "log_table", "PendingTableName": "pending_table"})


@pytest.fixture
def no_aws_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No region, no credentials, no config files, and no instance metadata to ask."""
    for name in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def run(tool: str, argv: list[str], capsys: Any) -> tuple[Any, list[str]]:
    """The exit status and stderr's lines of a tool run that stops."""
    with pytest.raises(SystemExit) as stopped:
        MODULES[tool].main(argv)
    return stopped.value.code, capsys.readouterr().err.strip().splitlines()


def help_text(tool: str, capsys: Any) -> str:
    with pytest.raises(SystemExit) as stopped:
        MODULES[tool].main(["--help"])
    assert stopped.value.code == 0
    return str(capsys.readouterr().out)


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_takes_region_and_profile(tool: str, capsys: Any) -> None:
    # Given a tool, When its help is printed
    out = help_text(tool, capsys)
    # Then it names both options
    assert "--region" in out and "--profile" in out


@pytest.mark.parametrize("tool", TOOLS)
def test_no_region_is_one_line_and_exit_2(tool: str, no_aws_setup: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given no region anywhere
    # When the tool is about to call AWS
    code, err = run(tool, REACHES_AWS[tool], capsys)
    # Then it stops with one line, no traceback
    assert code == 2
    assert len(err) == 1 and "no AWS region" in err[0]


@pytest.mark.parametrize("tool", TOOLS)
def test_aws_region_alone_is_a_region(tool: str, no_aws_setup: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given only AWS_REGION (which the CDK CLI and Lambda use; botocore reads AWS_DEFAULT_REGION)
    no_aws_setup.setenv("AWS_REGION", "eu-west-1")
    # When the tool is about to call AWS
    code, err = run(tool, REACHES_AWS[tool], capsys)
    # Then it has its region and stops only for the missing credentials
    assert code == 2
    assert len(err) == 1 and "no AWS credentials" in err[0]


@pytest.mark.parametrize("tool", TOOLS)
def test_no_credentials_is_one_line_and_exit_2(tool: str, no_aws_setup: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given a region but no credentials
    code, err = run(tool, [*REACHES_AWS[tool], "--region", "eu-west-1"], capsys)
    # Then the tool says so in one line and exits 2
    assert code == 2
    assert len(err) == 1 and "no AWS credentials" in err[0]


def test_an_unknown_profile_is_one_line_and_exit_2(no_aws_setup: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given a profile the config files do not have
    code, err = run("ops.taxi_redrive", [*REACHES_AWS["ops.taxi_redrive"], "--profile", "nobody"], capsys)
    # Then the tool names it in one line and exits 2
    assert code == 2
    assert len(err) == 1 and "nobody" in err[0]


def test_a_profile_supplies_region_and_credentials(no_aws_setup: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Given a profile with a region and static keys in the config files
    (tmp_path / "config").write_text("[profile ops]\nregion = eu-west-1\n")
    (tmp_path / "credentials").write_text("[ops]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret\n")
    # When a client is built from --profile
    client = AwsSession(profile="ops").client("dynamodb")
    # Then it uses the profile's region (building a client calls nothing)
    assert client.meta.region_name == "eu-west-1"


@pytest.mark.parametrize("region", ["ap-east-1", "us-east-1"])
def test_a_tools_s3_client_uses_the_buckets_regional_endpoint(region: str, no_aws_setup: pytest.MonkeyPatch) -> None:
    # Given keys and a region (ap-east-1 opened after S3's global endpoint stopped serving new Regions)
    no_aws_setup.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    no_aws_setup.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    # When a tool's S3 client presigns a URL (no call)
    url = AwsSession(region=region).client("s3").generate_presigned_url("get_object", Params={"Bucket": "onceflow-data", "Key": "k"})
    # Then it names the bucket's regional virtual-hosted endpoint, not s3.amazonaws.com
    assert url.startswith(f"https://onceflow-data.s3.{region}.amazonaws.com/k?")


def test_a_tools_s3_client_of_the_local_cloud_is_path_style(no_aws_setup: pytest.MonkeyPatch) -> None:
    # Given a session pointed at the embedded cloud's one endpoint
    no_aws_setup.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    no_aws_setup.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    session = AwsSession(region="us-east-1", endpoint_url="http://127.0.0.1:8410")
    # When its S3 client presigns a URL
    url = session.client("s3").generate_presigned_url("get_object", Params={"Bucket": "onceflow-data", "Key": "k"})
    # Then the bucket is the path's first segment on that endpoint, and the URL is SigV4
    assert url.startswith("http://127.0.0.1:8410/onceflow-data/k?") and "X-Amz-Signature=" in url


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stack", "s", "--pending-table", "t"], "not both"),
        ([], "give --stack, or every one of --pending-table"),
    ],
)
def test_stack_and_names_are_one_way_or_the_other(argv: list[str], message: str, capsys: Any) -> None:
    # Given both ways to name the table, or neither
    code, err = run("ops.event_log_pending", argv, capsys)
    # Then the tool refuses in one line with exit 2
    assert code == 2
    assert len(err) == 1 and message in err[0]


def test_a_stack_that_cannot_be_read_is_a_usage_error() -> None:
    # Given CloudFormation answering that the stack does not exist
    class Missing:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 (boto3's parameter name)
            raise ClientError(
                {"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}}, "DescribeStacks"
            )

    # When the resources are read from it
    # Then the error names the stack and CloudFormation's reason
    with pytest.raises(UsageError, match="cannot read stack gone: Stack with id gone does not exist"):
        resources_from_stack(Missing(), "gone", KIND)


def test_outputs_are_mapped_to_attributes_and_missing_ones_named() -> None:
    # Given a stack with one of the two outputs the kind needs
    class Outputs:
        def __init__(self, outputs: dict[str, str]) -> None:
            self.outputs = outputs

        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803
            return {"Stacks": [{"Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]}]}

    # When the resources are read
    # Then a complete stack maps each output to its attribute, and an incomplete one names what is missing
    both = Outputs({"LogTableName": "log", "PendingTableName": "pending", "Other": "x"})
    assert resources_from_stack(both, "ok", KIND) == {"log_table": "log", "pending_table": "pending"}
    with pytest.raises(UsageError, match=r"no outputs \['PendingTableName'\]; is it an onceflow EventLog stack"):
        resources_from_stack(Outputs({"LogTableName": "log"}), "half", KIND)


# --- --env: the stack outputs `make deploy ENV=<env>` writes to cdk-outputs-<env>.json ---------------------

# Each tool that takes --stack, and its command line without a target.
ENV_TOOLS = {
    "ops.event_log_pending": [],
    "ops.event_log_reprocess": ["--log-id", "sheet-1"],
    "ops.runner_stats_reprocess": ["--from", "2026-11-01"],
    "ops.taxi_redrive": [],
}
DEV_OUTPUTS = {
    "Onceflow-dev-Alarms": {"AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:alarms"},
    "Onceflow-dev-RunnerStats": {
        "StreamName": "onceflow-dev-stream",
        "RunStatsTableName": "dev-run-stats",
        "TendencyTableName": "dev-tendency",
        "MessagesTableName": "dev-messages",
    },
    "Onceflow-dev-EventLog": {"LogTableName": "dev-log", "PendingTableName": "dev-pending", "BucketName": "dev-bucket"},
}


class NoAws(AwsSession):
    """A session that fails the test if anything asks it for a client (--env asks AWS nothing)."""

    def client(self, service: str) -> Any:
        raise AssertionError(f"--env must not call AWS, but a {service} client was built")


class NoCloudFormation:
    def describe_stacks(self, **_: Any) -> dict[str, Any]:
        raise AssertionError("--env must not call CloudFormation")


def write_outputs(directory: Path, document: object, env: str = "dev") -> Path:
    path = directory / f"cdk-outputs-{env}.json"
    path.write_text(json.dumps(document))
    return path


def resolve(argv: list[str], kind: StackKind = KIND) -> dict[str, str]:
    """The target of a command line, as a tool resolves it, with no AWS to ask."""
    parser = argparse.ArgumentParser()
    add_target(parser, kind)
    return resolve_target(parser.parse_args(argv), kind, None, NoAws())


def test_env_takes_the_kinds_stack_from_a_file_of_several(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the outputs of a whole dev deploy in the current directory (three stacks, one of them EventLog)
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    # When the target is --env dev
    resources = resolve(["--env", "dev"])
    # Then the EventLog stack's outputs are mapped to the kind's attributes, and nothing asked AWS (NoAws)
    assert resources == {"log_table": "dev-log", "pending_table": "dev-pending"}


def test_outputs_file_points_env_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the prod outputs in another directory than the current one, which holds a dev file
    elsewhere = tmp_path / "deploys"
    elsewhere.mkdir()
    prod = write_outputs(elsewhere, {"Onceflow-prod-EventLog": {"LogTableName": "prod-log", "PendingTableName": "prod-pending"}}, "prod")
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    # When --env prod names that file with --outputs-file
    # Then its stack is read, not the current directory's file
    assert resolve(["--env", "prod", "--outputs-file", str(prod)]) == {"log_table": "prod-log", "pending_table": "prod-pending"}


def test_a_tool_run_with_env_reads_its_table_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_aws_setup: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given the dev outputs file, no AWS set-up, and a DynamoDB whose tables hold nothing
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    asked: list[str] = []

    class EmptyTables:
        def describe_table(self, TableName: str) -> dict[str, Any]:  # noqa: N803 (boto3's parameter name)
            asked.append(TableName)
            return {"Table": {"ItemCount": 0}}

        def get_paginator(self, operation: str) -> Any:
            class Pages:
                def paginate(self, TableName: str, **_: Any) -> list[dict[str, Any]]:  # noqa: N803
                    asked.append(TableName)
                    return [{"Items": []}]

            return Pages()

    # When the pending tool runs with --env dev (a CloudFormation that fails if asked)
    status = MODULES["ops.event_log_pending"].main(["--env", "dev"], cloudformation=NoCloudFormation(), dynamodb=EmptyTables())
    # Then it read the EventLog stack's pending table from the file, and only that table
    assert status == 0
    assert set(asked) == {"dev-pending"}
    summary = "0 pending snapshots in dev-pending: 0 building, 0 waiting, 0 stuck; listed 0, 0 of them stuck"
    assert capsys.readouterr().out.strip() == summary


def test_runner_stats_reprocess_with_env_uses_the_runner_stats_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_aws_setup: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Given the dev outputs file, no AWS set-up (a CloudFormation call would stop with "no AWS region"),
    # and a DynamoDB that has none of the tables
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)

    class NoTables:
        def describe_table(self, TableName: str) -> dict[str, Any]:  # noqa: N803
            raise ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "not found"}}, "DescribeTable")

    # When the reprocess tool runs with --env dev
    status = MODULES["ops.runner_stats_reprocess"].main(["--from", "2026-11-01", "--env", "dev"], dynamodb=NoTables())
    # Then the three tables it looked for are the RunnerStats stack's, from the file
    assert status == 2
    assert capsys.readouterr().err.strip() == "table(s) dev-run-stats, dev-tendency, dev-messages do not exist"


@pytest.mark.parametrize("tool", ENV_TOOLS)
def test_a_missing_outputs_file_says_to_deploy(tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given a directory with no outputs file
    monkeypatch.chdir(tmp_path)
    # When the tool is run with --env dev
    code, err = run(tool, [*ENV_TOOLS[tool], "--env", "dev"], capsys)
    # Then it stops with one line that names the file and says how to write it, exit 2
    assert code == 2
    assert len(err) == 1
    assert f"no outputs file {tmp_path / 'cdk-outputs-dev.json'}" in err[0]
    assert "run `make deploy ENV=dev`" in err[0] and "--stack" in err[0]


def test_a_file_without_the_kinds_stack_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an outputs file from a deploy that has no EventLog stack
    write_outputs(tmp_path, {name: outputs for name, outputs in DEV_OUTPUTS.items() if not name.endswith("-EventLog")})
    monkeypatch.chdir(tmp_path)
    # When the EventLog target is read from it
    # Then the error names the file, the stacks it has, and what to do
    with pytest.raises(UsageError) as refused:
        resolve(["--env", "dev"])
    assert str(refused.value) == (
        "outputs file cdk-outputs-dev.json has no stack ending in -EventLog (it has: Onceflow-dev-Alarms, Onceflow-dev-RunnerStats); "
        "run `make deploy ENV=dev` in the repository root, or pass --stack"
    )


def test_two_stacks_of_the_kind_are_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given an outputs file holding two EventLog stacks (e.g. merged from two deploys)
    outputs = {"LogTableName": "log", "PendingTableName": "pending", "BucketName": "b"}
    write_outputs(tmp_path, {**DEV_OUTPUTS, "Onceflow-prod-EventLog": outputs})
    monkeypatch.chdir(tmp_path)
    # When the pending tool is run with --env dev
    code, err = run("ops.event_log_pending", ["--env", "dev"], capsys)
    # Then it refuses to guess, in one line with exit 2
    assert code == 2
    assert len(err) == 1
    assert err[0].endswith(
        "error: outputs file cdk-outputs-dev.json has 2 stacks ending in -EventLog "
        "(Onceflow-dev-EventLog, Onceflow-prod-EventLog); pass --stack to choose one"
    )


def test_a_stack_missing_an_output_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an outputs file whose EventLog stack lacks the pending table (an older deploy)
    write_outputs(tmp_path, {**DEV_OUTPUTS, "Onceflow-dev-EventLog": {"LogTableName": "dev-log"}})
    monkeypatch.chdir(tmp_path)
    # When the EventLog target is read from it
    # Then the error names the stack, the missing output, and what to do
    with pytest.raises(UsageError) as refused:
        resolve(["--env", "dev"])
    assert str(refused.value) == (
        "stack Onceflow-dev-EventLog in outputs file cdk-outputs-dev.json has no outputs ['PendingTableName']; "
        "run `make deploy ENV=dev` in the repository root to bring the file up to date, or pass --stack"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"Onceflow-dev-EventLog": {"LogTableName": ', "is not valid JSON (Expecting value: line 1 column 44"),
        (b"\xff\xfe\xff", "is not valid JSON"),
        ('["Onceflow-dev-EventLog"]', "is not a CDK outputs file"),
        ('{"Onceflow-dev-EventLog": "dev-log"}', "is not a CDK outputs file"),
    ],
)
def test_a_file_that_is_not_cdk_outputs_is_a_usage_error(
    content: str | bytes, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an outputs file that is truncated, not text, or JSON of another shape
    path = tmp_path / "cdk-outputs-dev.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)
    # When the target is read from it
    # Then the error says what is wrong with the file and how to write it again
    with pytest.raises(UsageError) as refused:
        resolve(["--env", "dev"])
    assert message in str(refused.value) and "run `make deploy ENV=dev`" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("tool", ENV_TOOLS)
def test_env_and_stack_together_are_a_usage_error(tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # Given a valid outputs file, so that only the arguments can be wrong
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    # When the tool is given both --env and --stack
    code, err = run(tool, [*ENV_TOOLS[tool], "--env", "dev", "--stack", "Onceflow-dev-EventLog"], capsys)
    # Then it refuses in one line with exit 2
    assert code == 2
    assert len(err) == 1 and err[0].endswith("error: give --env or --stack, not both")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "dev", "--pending-table", "t"], "give --env or the resource names, not both"),
        (["--env", "dev", "--stack", "s", "--log-table", "t"], "give one of --env, --stack or the resource names"),
        (["--stack", "s", "--outputs-file", "x.json"], "--outputs-file goes with --env (it replaces ./cdk-outputs-NAME.json)"),
        (["--outputs-file", "x.json"], "--outputs-file goes with --env (it replaces ./cdk-outputs-NAME.json)"),
        ([], "give --stack, or every one of --log-table --pending-table, or --env to read them from cdk-outputs-<env>.json"),
    ],
)
def test_env_stack_and_names_are_exclusive(argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a valid outputs file in the current directory
    write_outputs(tmp_path, DEV_OUTPUTS)
    monkeypatch.chdir(tmp_path)
    # When the target is named in more than one way, or --outputs-file comes without --env, or nothing is given
    # Then it is a usage error that says what to give
    with pytest.raises(UsageError) as refused:
        resolve(argv)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("argv", "flags"),
    [
        (["--env", "dev"], "--env dev"),
        (["--env", "prod", "--outputs-file", "out/prod.json"], "--env prod --outputs-file out/prod.json"),
        (["--stack", "Onceflow-prod-EventLog"], "--stack Onceflow-prod-EventLog"),
        (["--pending-table", "t"], ""),
    ],
)
def test_a_printed_command_names_the_target_as_it_was_given(argv: list[str], flags: str) -> None:
    # Given the pending tool's target options
    parser = argparse.ArgumentParser()
    add_target(parser, MODULES["ops.event_log_pending"].PENDING_TABLE)
    # When the recovery command repeats how the target was named
    # Then --env (with its file) or --stack is repeated, and nothing for resource names
    assert target_flags(parser.parse_args(argv)) == flags
