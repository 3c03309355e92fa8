"""The operator tools' shared scaffolding (ops/cli.py): every tool takes --region and --profile,
finds its resources through --stack or by name, and ends a usage error with one line and exit 2."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ops.cli import StackKind, UsageError, resources_from_stack

TOOLS = ["ops.empty_buckets", "ops.event_log_pending", "ops.event_log_reprocess", "ops.runner_stats_reprocess", "ops.taxi_redrive"]
# Each tool's command line that gets as far as its first AWS client.
REACHES_AWS = {
    "ops.empty_buckets": ["--env", "dev"],
    "ops.event_log_pending": ["--stack", "Onceflow-dev-EventLog"],
    "ops.event_log_reprocess": ["--log-id", "sheet-1", "--stack", "Onceflow-dev-EventLog"],
    "ops.runner_stats_reprocess": ["--from", "2026-11-01", "--stack", "Onceflow-dev-RunnerStats"],
    "ops.taxi_redrive": ["--stack", "Onceflow-dev-TaxiEtl"],
}
# Imported at collection: the tracer's X-Ray emitter opens its UDP socket on import, before sockets are blocked.
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
    from ops.cli import AwsSession

    # When a client is built from --profile
    client = AwsSession(profile="ops").client("dynamodb")
    # Then it uses the profile's region (building a client calls nothing)
    assert client.meta.region_name == "eu-west-1"


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
