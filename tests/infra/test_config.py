"""The typed per-environment configuration: valid as shipped, strict about bad values, and
selectable from the CDK CLI exactly like from the tests."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs

from devtools import asl_gate
from devtools.aws.template_resources import PROJECT_ROOT, load_assembly
from onceflow.infra.common import POWERTOOLS_LAYER_VERSION
from onceflow.infra.config import ENVIRONMENTS, ConfigError, EnvConfig, EventLogConfig, RunnerStatsConfig, load_config
from runtime.event_log.contract import SQS_MAX_VISIBILITY_SECONDS

ENVS = ("dev", "prod")


def with_runner_stats(config: EnvConfig, **changes: Any) -> EnvConfig:
    return dataclasses.replace(config, runner_stats=dataclasses.replace(config.runner_stats, **changes))


def with_event_log(config: EnvConfig, **changes: Any) -> EnvConfig:
    return dataclasses.replace(config, event_log=dataclasses.replace(config.event_log, **changes))


# --- the shipped environments -----------------------------------------------------------------


@pytest.mark.parametrize("env_name", ENVS)
def test_shipped_environments_validate(env_name: str) -> None:
    # Given an environment name the app accepts
    # When its config is loaded
    config = load_config(env_name)
    # Then it validates and is the registered, immutable object
    assert config is ENVIRONMENTS[env_name]
    assert config.name == env_name
    assert config.validate() is config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.retain_data = not config.retain_data  # type: ignore[misc]


@pytest.mark.parametrize("env_name", [None, ""])
def test_no_environment_means_dev(env_name: str | None) -> None:
    # Given no `-c env=...` on the command line
    # When the config is loaded
    config = load_config(env_name)
    # Then it is dev, cdk.json's default
    assert config is ENVIRONMENTS["dev"]


@pytest.mark.parametrize("name", ["staging", "Prod", "dev "])
def test_unknown_environment_is_refused(name: str) -> None:
    # Given a name that is not a configured environment
    # When it is loaded
    # Then synth stops with the list of valid names
    with pytest.raises(ConfigError, match=rf"unknown environment '{name}'; choose one of dev, prod"):
        load_config(name)


def test_prod_retains_data_and_dev_destroys_it() -> None:
    # Given both environments
    dev, prod = load_config("dev"), load_config("prod")
    # When we ask for their removal policies
    # Then prod keeps stateful resources and dev cleans up
    assert prod.retain_data and prod.removal_policy == RemovalPolicy.RETAIN
    assert not dev.retain_data and dev.removal_policy == RemovalPolicy.DESTROY


def test_prod_sizes_and_retention() -> None:
    # Given the prod environment
    prod = load_config("prod").runner_stats
    # When we read its throughput settings
    # Then it batches 1000 records, waits up to 5 s for them, and gives up on records long
    # before the stream would drop them
    assert prod.batch_size == 1000 and prod.batching_window_seconds == 5
    assert prod.max_record_age_seconds < prod.stream_retention_hours * 3600
    assert load_config("prod").log_retention == logs.RetentionDays.THREE_MONTHS
    assert load_config("dev").log_retention == logs.RetentionDays.ONE_WEEK


@pytest.mark.parametrize("env_name", ENVS)
def test_tags_name_project_environment_and_owner(env_name: str) -> None:
    # Given an environment
    config = load_config(env_name)
    # When we read its tags
    # Then they identify the project, the environment and the owner
    assert config.tags == {"project": "onceflow", "environment": env_name, "owner": "onceflow-team"}


# --- invalid values stop synth with a clear message -------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"batch_size": 0}, r"batch_size must be 1\.\.2000", id="batch_size=0"),
        pytest.param({"batch_size": 2_001}, r"batch_size must be 1\.\.2000", id="batch_size=2001"),
        pytest.param({"memory_mb": 64}, r"memory_mb must be 128\.\.10240", id="memory_mb=64"),
        pytest.param({"max_message_bytes": 2_000_000}, r"max_message_bytes must be 256\.\.1048576", id="max_message_bytes=2MB"),
        pytest.param({"reject_payload_max_bytes": 400_000}, r"reject_payload_max_bytes must be 0\.\.65536", id="reject_payload=400KB"),
        pytest.param({"retry_attempts": -1}, r"retry_attempts must be 0\.\.10000 \(bounded, never infinite\)", id="retry_attempts=-1"),
        pytest.param(
            {"max_record_age_seconds": 24 * 3600 + 1},
            r"max_record_age_seconds must not exceed the stream retention",
            id="max_record_age_seconds=86401",
        ),
        pytest.param({"max_record_age_seconds": -1}, r"max_record_age_seconds must be 60\.\.604800", id="max_record_age_seconds=-1"),
        pytest.param({"archive_chunk_size": 41}, r"archive_chunk_size must be 1\.\.40", id="archive_chunk_size=41"),
        pytest.param({"archive_chunk_size": 0}, r"archive_chunk_size must be 1\.\.40", id="archive_chunk_size=0"),
        pytest.param({"parallelization_factor": 11}, r"parallelization_factor must be 1\.\.10", id="parallelization_factor=11"),
        pytest.param({"batching_window_seconds": 301}, r"batching_window_seconds must be 0\.\.300", id="batching_window_seconds=301"),
        pytest.param({"shard_count": 0}, r"shard_count must be 1\.\.500", id="shard_count=0"),
        pytest.param({"stream_retention_hours": 23}, r"stream_retention_hours must be 24\.\.8760", id="stream_retention_hours=23"),
        pytest.param({"commit_attempts": 0}, r"commit_attempts must be >= 1", id="commit_attempts=0"),
        pytest.param({"timeout_seconds": 901}, r"timeout_seconds must be 3\.\.900", id="timeout_seconds=901"),
    ],
)
def test_invalid_runner_stats_values_are_refused(changes: dict[str, int], message: str) -> None:
    # Given dev's config with one runner-stats value out of range (dev's stream keeps 24 h)
    config = with_runner_stats(load_config("dev"), **changes)
    # When it is validated
    # Then it fails, naming the setting and its allowed range
    with pytest.raises(ConfigError, match=message):
        config.validate()


@pytest.mark.parametrize("env_name", ENVS)
def test_shipped_event_log_values_are_valid(env_name: str) -> None:
    # Given an environment's event-log settings, and the class defaults
    settings = load_config(env_name).event_log
    # When they are validated
    settings.validate()
    EventLogConfig().validate()
    # Then they pass, with a lease longer than the worker may run and shorter than the snapshot
    # queue's visibility timeout (six worker timeouts), and a backoff within SQS's 12 h
    assert settings.worker_timeout_seconds < settings.lease_seconds < settings.snapshot_visibility_seconds
    assert settings.snapshot_visibility_seconds == 6 * settings.worker_timeout_seconds
    assert settings.finalizer_visibility_seconds == 6 * settings.finalizer_timeout_seconds
    assert settings.backoff_cap_seconds <= SQS_MAX_VISIBILITY_SECONDS == 12 * 3600
    assert settings.handoff_margin_seconds < settings.worker_timeout_seconds


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # the worker's lease: longer than the worker's timeout, shorter than the queue's visibility (dev: 300 s -> 1800 s)
        pytest.param({"lease_seconds": 300}, r"lease_seconds must exceed worker_timeout_seconds", id="lease=timeout"),
        pytest.param({"lease_seconds": 120}, r"lease_seconds must exceed worker_timeout_seconds", id="lease<timeout"),
        pytest.param({"lease_seconds": 1800}, r"lease_seconds must be shorter than the queue's visibility timeout", id="lease=6xtimeout"),
        pytest.param({"lease_seconds": 3600}, r"lease_seconds must be shorter than the queue's visibility timeout", id="lease>6xtimeout"),
        pytest.param(
            {"worker_timeout_seconds": 600},  # dev's 600 s lease would no longer outlive the worker
            r"lease_seconds must exceed worker_timeout_seconds",
            id="timeout=lease",
        ),
        pytest.param({"worker_timeout_seconds": 901}, r"worker_timeout_seconds must be 3\.\.900", id="worker_timeout=901"),
        pytest.param({"worker_timeout_seconds": 2}, r"worker_timeout_seconds must be 3\.\.900", id="worker_timeout=2"),
        # the hand-off margin must leave the worker time to work
        pytest.param(
            {"handoff_margin_seconds": 300}, r"handoff_margin_seconds must be shorter than the worker timeout", id="margin=timeout"
        ),
        pytest.param({"handoff_margin_seconds": 0}, r"handoff_margin_seconds must be shorter than the worker timeout", id="margin=0"),
        # backoff within SQS's longest visibility timeout (12 h)
        pytest.param({"backoff_cap_seconds": 43_201}, r"backoff must be 1 s\.\.12 h", id="backoff_cap=43201"),
        pytest.param({"backoff_base_seconds": 0}, r"backoff must be 1 s\.\.12 h", id="backoff_base=0"),
        pytest.param({"backoff_base_seconds": 120, "backoff_cap_seconds": 60}, r"backoff must be 1 s\.\.12 h", id="backoff_base>cap"),
        # the pending tag is one S3 tag, name=value
        pytest.param({"pending_tag": "onceflow-pending"}, r"pending_tag must be one tag as name=value", id="tag-without-value"),
        pytest.param({"pending_tag": "=true"}, r"pending_tag must be one tag as name=value", id="tag-without-name"),
        pytest.param({"pending_tag": "onceflow-pending="}, r"pending_tag must be one tag as name=value", id="tag-empty-value"),
        pytest.param({"pending_tag": "a=b&c=d"}, r"pending_tag must be one tag as name=value", id="two-tags"),
        pytest.param({"pending_tag": ""}, r"pending_tag must be one tag as name=value", id="tag-empty"),
        # dead-letter queues are reached after a bounded number of receives
        pytest.param({"snapshot_max_receives": 0}, r"max receives must be 1\.\.1000", id="snapshot_max_receives=0"),
        pytest.param({"snapshot_max_receives": 1001}, r"max receives must be 1\.\.1000", id="snapshot_max_receives=1001"),
        pytest.param({"finalizer_max_receives": 0}, r"max receives must be 1\.\.1000", id="finalizer_max_receives=0"),
        # sizes
        pytest.param({"chunk_bytes": 1023}, r"chunk_bytes must be 1 KiB\.\.64 MiB", id="chunk_bytes=1023"),
        pytest.param({"chunk_bytes": 64 * 1024 * 1024 + 1}, r"chunk_bytes must be 1 KiB\.\.64 MiB", id="chunk_bytes=64MiB+1"),
        pytest.param({"snapshot_every": 9}, r"snapshot_every must be 10\.\.10000000", id="snapshot_every=9"),
        pytest.param({"max_value_bytes": 16_384}, r"max_value_bytes must be below max_body_bytes", id="value=body"),
        pytest.param({"max_body_bytes": 2 * 1024 * 1024}, r"max_body_bytes, which is at most 1 MiB", id="body=2MiB"),
        pytest.param(
            {"max_value_bytes": 301 * 1024, "max_body_bytes": 1024 * 1024},
            r"max_value_bytes must keep an entry well under DynamoDB's 400 KB item limit",
            id="value=301KiB",
        ),
        # expiry and presigned URLs
        pytest.param({"pending_expiry_days": 0}, r"expiry days must be at least 1", id="pending_expiry_days=0"),
        pytest.param({"noncurrent_expiry_days": 0}, r"expiry days must be at least 1", id="noncurrent_expiry_days=0"),
        pytest.param({"url_expiry_seconds": 59}, r"url_expiry_seconds must be 60\.\.604800", id="url_expiry=59"),
        pytest.param({"url_expiry_seconds": 604_801}, r"url_expiry_seconds must be 60\.\.604800", id="url_expiry=604801"),
        # the router's stream mapping
        pytest.param({"router_batch_size": 0}, r"router batch size must be 1\.\.10000", id="router_batch_size=0"),
        pytest.param({"router_retry_attempts": -1}, r"its retries 0\.\.10000", id="router_retry_attempts=-1"),
        pytest.param(
            {"router_max_record_age_seconds": 24 * 3600 + 1},
            r"router_max_record_age_seconds must be 60\.\.86400 \(a DynamoDB stream keeps 24 h\)",
            id="router_max_record_age=86401",
        ),
        # the API and the functions
        pytest.param({"api_rate_limit": 0}, r"api rate limit must be positive and at most the burst limit", id="rate=0"),
        pytest.param({"api_rate_limit": 300}, r"api rate limit must be positive and at most the burst limit", id="rate>burst"),
        pytest.param({"worker_max_concurrency": 0}, r"worker_max_concurrency must be 1\.\.1000", id="worker_max_concurrency=0"),
        pytest.param({"api_timeout_seconds": 901}, r"function timeouts must be 3\.\.900 s", id="api_timeout=901"),
        pytest.param({"router_timeout_seconds": 2}, r"function timeouts must be 3\.\.900 s", id="router_timeout=2"),
        pytest.param({"finalizer_timeout_seconds": 901}, r"function timeouts must be 3\.\.900 s", id="finalizer_timeout=901"),
        pytest.param({"api_memory_mb": 64}, r"memory must be 128\.\.10240 MB", id="api_memory=64"),
        pytest.param({"worker_memory_mb": 10_241}, r"memory must be 128\.\.10240 MB", id="worker_memory=10241"),
    ],
)
def test_invalid_event_log_values_are_refused(changes: dict[str, Any], message: str) -> None:
    # Given dev's config (worker timeout 300 s, lease 600 s, burst 200) with one event-log value out of range
    config = with_event_log(load_config("dev"), **changes)
    # When it is validated, on its own and as part of the environment
    # Then both fail, naming the setting and its allowed range
    with pytest.raises(ConfigError, match=message):
        config.event_log.validate()
    with pytest.raises(ConfigError, match=message):
        config.validate()


@pytest.mark.parametrize("version", ["2.43.1", "latest", "3.37", "3.37.0-beta", ""])
def test_powertools_version_must_be_a_v3_release(version: str) -> None:
    # Given prod's config pinned to something that is not a Powertools v3 release
    config = dataclasses.replace(load_config("prod"), powertools_layer_version=version)
    # When it is validated
    # Then it fails with an example of a valid version
    with pytest.raises(ConfigError, match=r"powertools_layer_version must be a Powertools v3 release such as 3\.37\.0"):
        config.validate()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Prod"}, r"environment name 'Prod' must be lower-case"),
        ({"log_level": "TRACE"}, r"log_level 'TRACE' is not a Powertools log level"),
    ],
)
def test_invalid_environment_values_are_refused(changes: dict[str, str], message: str) -> None:
    # Given dev's config with an invalid top-level value
    config = dataclasses.replace(load_config("dev"), **changes)
    # When it is validated
    # Then it fails, quoting the bad value
    with pytest.raises(ConfigError, match=message):
        config.validate()


@pytest.mark.parametrize("env_name", ENVS)
def test_shipped_environments_are_environment_agnostic(env_name: str) -> None:
    # Given a shipped environment, which names no account or region
    config = load_config(env_name)
    # Then its stacks take both from the credentials and profile the CLI runs with
    assert (config.account, config.region, config.environment) == (None, None, None)


def test_an_environment_pointed_at_an_account_and_region_deploys_there(tmp_path: Path) -> None:
    # Given prod pointed at one account and region
    from aws_cdk import App

    from devtools.aws.template_resources import cdk_context
    from onceflow.infra.stacks import AlarmsStack

    config = dataclasses.replace(load_config("prod"), account="111122223333", region="eu-west-1").validate()
    # When its stack is built
    stack = AlarmsStack(App(context=cdk_context("prod"), outdir=str(tmp_path)), config.stack_name("Alarms"), config=config)
    # Then the stack is bound to them
    assert (stack.account, stack.region) == ("111122223333", "eu-west-1")
    assert stack.environment == "aws://111122223333/eu-west-1"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"account": "1111-2222-3333"}, r"account '1111-2222-3333' must be a 12-digit AWS account id"),
        ({"account": "11112222333"}, r"must be a 12-digit AWS account id"),
        ({"region": "Europe"}, r"region 'Europe' is not an AWS region name such as eu-west-1"),
        ({"region": "eu-west"}, r"is not an AWS region name"),
    ],
)
def test_a_bad_account_or_region_is_refused(changes: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(load_config("dev"), **changes).validate()


def test_the_installed_powertools_is_the_layer_the_functions_run_with() -> None:
    # Given the Powertools release installed in this environment (what every test runs the handlers with)
    installed = importlib.metadata.version("aws-lambda-powertools")
    # Then it is the layer release the constructs default to, and the one every shipped environment deploys
    assert installed == POWERTOOLS_LAYER_VERSION
    assert {config.powertools_layer_version for config in ENVIRONMENTS.values()} == {installed}


def test_config_errors_are_value_errors() -> None:
    # Given the error type synth raises
    # When callers catch ValueError
    # Then they also catch configuration errors
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ValueError):
        RunnerStatsConfig(batch_size=0).validate()


# --- the real CLI -----------------------------------------------------------------------------

# SLOW (~13 s per environment) and needs node_modules (`make install`): runs the real `npx cdk synth`, then
# cfn-lint and the state machine definition gate on what it wrote, as `make cfn-lint` does on cdk.out/<env>;
# `make test` runs them here rather than synthesizing both environments a second time. Deselect with
# `-k "not cdk_cli"` for a quick run. No AWS credentials are involved: every AWS_* variable is removed from
# its environment, and synth of an environment-agnostic stack needs none.
CLI_TIMEOUT_SECONDS = 180


def run_in_repository(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`command` from the repository's root (where cdk.json and .cfnlintrc.yaml are read), its output kept."""
    return subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS, check=False)


def comparable(template: dict[str, Any]) -> dict[str, Any]:
    """Drop what only the CLI adds (aws:cdk:path / asset metadata, the CDKMetadata resource)."""
    resources = {
        logical_id: {key: value for key, value in resource.items() if key != "Metadata"}
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] != "AWS::CDK::Metadata"
    }
    conditions = {name: value for name, value in template.get("Conditions", {}).items() if name != "CDKMetadataAvailable"}
    return {**{k: v for k, v in template.items() if k not in {"Resources", "Conditions"}}, "Resources": resources} | (
        {"Conditions": conditions} if conditions else {}
    )


@pytest.mark.parametrize("env_name", ENVS)
def test_cdk_cli_synth_without_aws_credentials(env_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # Given the CDK CLI from node_modules, the venv first on PATH (cdk.json runs `python3 app.py`),
    # and no AWS credentials or settings at all
    assert (PROJECT_ROOT / "node_modules" / ".bin" / "cdk").exists(), "run `make install` first"
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env["PATH"] = f"{PROJECT_ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["CDK_DISABLE_CLI_TELEMETRY"] = "true"
    # When `cdk synth -c env=<env>` runs
    result = run_in_repository(["npx", "cdk", "synth", "-c", f"env={env_name}", "--quiet", "--no-notices", "-o", str(tmp_path)], env)
    # Then it succeeds and writes the environment's stack, identical to the in-process synth the
    # tests use (same context, same asset hash) apart from the metadata only the CLI adds
    assert result.returncode == 0, result.stdout + result.stderr
    in_process: dict[str, Any] = request.getfixturevalue(f"{env_name}_templates")
    cli_templates = load_assembly(tmp_path)
    assert set(cli_templates) == set(in_process)
    for name, template in cli_templates.items():
        assert comparable(template) == comparable(in_process[name]), name
    # And cfn-lint passes on every template the CLI wrote, with the repository's .cfnlintrc.yaml (read from the
    # working directory; the templates named here replace its globs)
    templates = sorted(str(path) for path in tmp_path.glob("*.template.json"))
    assert len(templates) == len(cli_templates) == 4
    lint = run_in_repository([str(Path(sys.executable).with_name("cfn-lint")), *templates])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # And so does the state machine definition gate, which cfn-lint cannot do for CDK's joined definitions: the
    # saga's and the bulk load's machines, each resolved and valid
    machines, findings = asl_gate.check([tmp_path])
    assert findings == []
    assert len(machines) == 2
