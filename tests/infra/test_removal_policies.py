"""Retention, deletion protection, tags, stack names and the Powertools layer of every stack, in every environment.

The templates come from the session fixtures `dev_templates` / `prod_templates` (tests/conftest.py):
`app.build_app` with cdk.json's context and cdk-nag on, i.e. what `cdk synth -c env=...` produces.
What prod keeps and dev deletes is written out here per resource type; the owner, stack prefix and
Powertools version are read from the config and, for the shipped environments, written out too.
The variant (another owner, stack prefix and Powertools version) goes through `app.build_app`
itself, with `load_config` replaced, so the construct tree is at hand to find every taggable resource.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, CfnResource, Stack, TagManager

import app as cdk_app
from devtools.aws.template_resources import cdk_context, resources_of_type
from onceflow.infra.config import EnvConfig, load_config
from tests.infra.template_queries import sdk_layer_ref

STACKS = ("Alarms", "RunnerStats", "EventLog", "TaxiEtl")

# What the brief fixes per environment (independent of infra/config.py on purpose).
EXPECTED = {
    "dev": {"removal": "Delete", "protected": False, "prefix": "Onceflow-dev", "owner": "onceflow-team", "powertools": "3.37.0"},
    "prod": {"removal": "Retain", "protected": True, "prefix": "Onceflow-prod", "owner": "onceflow-team", "powertools": "3.37.0"},
}

# Resources that hold data, keys or history: retained in prod, deleted in dev (config.removal_policy).
STATEFUL = {
    "AWS::DynamoDB::Table",
    "AWS::S3::Bucket",
    "AWS::Logs::LogGroup",
    "AWS::KMS::Key",
    "AWS::SQS::Queue",
    "AWS::SecretsManager::Secret",
    "AWS::Kinesis::Stream",
    "AWS::StepFunctions::StateMachine",
    # SNS keeps no messages, but pagers subscribed to the alarm topic's ARN outside CloudFormation would be lost.
    "AWS::SNS::Topic",
}
ALARM_TOPIC = "AWS::SNS::Topic"
# Everything else the stacks create: nothing to keep, so no DeletionPolicy.
STATELESS = {
    "AWS::ApiGatewayV2::Api",
    "AWS::ApiGatewayV2::Authorizer",
    "AWS::ApiGatewayV2::Integration",
    "AWS::ApiGatewayV2::Route",
    "AWS::ApiGatewayV2::Stage",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
    "AWS::Events::Rule",
    "AWS::IAM::Policy",
    "AWS::IAM::Role",
    "AWS::Lambda::EventSourceMapping",
    "AWS::Lambda::Function",
    "AWS::Lambda::LayerVersion",  # the SDK layer: rebuilt from the lock; a function keeps a deleted version it runs
    "AWS::Lambda::Permission",
    "AWS::S3::BucketPolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    # CDK's deploy-time custom resource that puts a bucket's notification configuration: the bucket holds the state.
    "Custom::S3BucketNotifications",
}
# The stateful types each stack holds, so a new kind of state in a stack shows up here.
STATEFUL_TYPES = {
    "Alarms": {"AWS::KMS::Key", ALARM_TOPIC},
    "RunnerStats": {"AWS::DynamoDB::Table", "AWS::Kinesis::Stream", "AWS::SQS::Queue", "AWS::Logs::LogGroup"},
    "EventLog": {"AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::SQS::Queue", "AWS::Logs::LogGroup"},
    "TaxiEtl": {
        "AWS::DynamoDB::Table",
        "AWS::S3::Bucket",  # the bulk route's ingest bucket and its access logs
        "AWS::SQS::Queue",  # the load starter's queue and its dead-letter queue
        "AWS::Logs::LogGroup",
        "AWS::KMS::Key",
        "AWS::SecretsManager::Secret",
        "AWS::StepFunctions::StateMachine",
    },
}
# Types that support tags in CloudFormation and appear in the stacks: each instance must carry them.
TAGGED_TYPES = (STATEFUL | {ALARM_TOPIC, *STATELESS}) - {
    # No Tags property in CloudFormation.
    "AWS::ApiGatewayV2::Authorizer",
    "AWS::ApiGatewayV2::Integration",
    "AWS::ApiGatewayV2::Route",
    "AWS::IAM::Policy",
    "AWS::Lambda::LayerVersion",
    "AWS::Lambda::Permission",
    "AWS::S3::BucketPolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    "Custom::S3BucketNotifications",
}
POWERTOOLS_PREFIX = "/aws/service/powertools/python/arm64/python3.13/"
SSM_PARAMETER_TYPE = "AWS::SSM::Parameter::Value<String>"

VARIANT_CONFIG = dataclasses.replace(
    load_config("prod"), stack_prefix="Acme-prod", owner="data-platform", powertools_layer_version="3.41.2"
)


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def template_json(env_templates: dict[str, dict[str, Any]], config: EnvConfig, stack: str) -> dict[str, Any]:
    return env_templates[config.stack_name(stack)]


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> tuple[App, Path, dict[str, dict[str, Any]]]:
    """`app.build_app` (cdk-nag included) with the variant config: the app, its assembly directory and its templates."""
    outdir = tmp_path_factory.mktemp("removal-variant")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cdk_app, "load_config", lambda _name: VARIANT_CONFIG)
        app = cdk_app.build_app(App(context=cdk_context(VARIANT_CONFIG.name), outdir=str(outdir)))
        assembly = app.synth()
    return app, outdir, {s.stack_name: s.template for s in assembly.stacks}


def tags_of(resource: dict[str, Any]) -> dict[str, str] | None:
    """A resource's tags as a dict, whether the type writes them as a list of Key/Value or as a map."""
    tags = resource.get("Properties", {}).get("Tags")
    if tags is None:
        return None
    if isinstance(tags, list):
        return {tag["Key"]: tag["Value"] for tag in tags}
    return dict(tags)


def expected_tags(env_name: str) -> dict[str, str]:
    return {"project": "onceflow", "environment": env_name, "owner": EXPECTED[env_name]["owner"]}


def powertools_parameters(template_json: dict[str, Any]) -> dict[str, str]:
    """Parameter name -> default, for the SSM parameters naming a Powertools layer."""
    return {
        name: parameter["Default"]
        for name, parameter in template_json.get("Parameters", {}).items()
        if str(parameter.get("Default", "")).startswith("/aws/service/powertools/")
    }


def assert_layers_from_one_parameter(template_json: dict[str, Any], version: str) -> None:
    # The project's functions (CDK's inline deploy-time handlers, such as the bucket notifications', take no layer)
    functions = {
        logical_id: fn
        for logical_id, fn in resources_of_type(template_json, "AWS::Lambda::Function").items()
        if str(fn["Properties"].get("Handler", "")).startswith("runtime.")
    }
    parameters = powertools_parameters(template_json)
    if not functions:
        assert parameters == {}
        return
    # one parameter per stack (the factory caches the layer on the stack), naming the configured version
    assert list(parameters.values()) == [f"{POWERTOOLS_PREFIX}{version}"]
    (name,) = parameters
    assert template_json["Parameters"][name]["Type"] == SSM_PARAMETER_TYPE
    for logical_id, fn in functions.items():
        assert fn["Properties"]["Layers"] == [{"Ref": name}, sdk_layer_ref(template_json)], logical_id


# --- 1. stack names -------------------------------------------------------------------------------


def test_stack_names_come_from_the_config(env_templates: dict[str, dict[str, Any]], config: EnvConfig, env_name: str) -> None:
    # Given the environment's synthesized stacks
    # When we read their names
    # Then they are config.stack_name(...) of the four stacks, i.e. Onceflow-<env>-<Stack>
    assert set(env_templates) == {config.stack_name(s) for s in STACKS} == {f"{EXPECTED[env_name]['prefix']}-{s}" for s in STACKS}


# --- 2. removal policies ------------------------------------------------------------------------


def test_every_resource_type_is_classified(template_json: dict[str, Any], stack: str) -> None:
    # Given the stack's resources
    types = {resource["Type"] for resource in template_json["Resources"].values()}
    # When we sort their types into stateful and stateless
    # Then none is unknown (a new type must be classified here first), and the stack holds exactly its stateful types
    assert not types - STATEFUL - STATELESS - {ALARM_TOPIC}, "classify these types in this module"
    assert types & (STATEFUL | {ALARM_TOPIC}) == STATEFUL_TYPES[stack]


def test_stateful_resources_are_retained_in_prod_and_deleted_in_dev(template_json: dict[str, Any], env_name: str) -> None:
    # Given the environment's retention expectation (prod keeps data, dev is disposable)
    policy = EXPECTED[env_name]["removal"]
    # When we read each stateful resource's deletion and replacement policies
    policies = {
        logical_id: (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
        for logical_id, resource in template_json["Resources"].items()
        if resource["Type"] in STATEFUL
    }
    # Then every one is retained in prod and deleted in dev, on deletion and on replacement alike
    assert policies == {logical_id: (policy, policy) for logical_id in policies}


def test_stateless_resources_have_no_removal_policy(template_json: dict[str, Any]) -> None:
    # Given the stack's stateless resources (functions, roles, alarms, API parts, ...)
    # When we read their deletion and replacement policies
    # Then they have none: CloudFormation deletes them with the stack, nothing is orphaned
    kept = [
        logical_id
        for logical_id, resource in template_json["Resources"].items()
        if resource["Type"] in STATELESS and {"DeletionPolicy", "UpdateReplacePolicy"} & set(resource)
    ]
    assert kept == []


def test_the_alarm_topic_and_its_key_follow_the_environment(
    env_templates: dict[str, dict[str, Any]], config: EnvConfig, env_name: str
) -> None:
    # Given the Alarms stack's topic, which has a policy, and its key
    template_json = env_templates[config.stack_name("Alarms")]
    ((topic_id, topic),) = resources_of_type(template_json, ALARM_TOPIC).items()
    ((_, key),) = resources_of_type(template_json, "AWS::KMS::Key").items()
    assert [p["Properties"]["Topics"] for p in resources_of_type(template_json, "AWS::SNS::TopicPolicy").values()] == [[{"Ref": topic_id}]]
    # When we read their removal policies
    # Then both are retained in prod and deleted in dev, like every other stateful resource
    policy = EXPECTED[env_name]["removal"]
    assert (topic["DeletionPolicy"], topic["UpdateReplacePolicy"]) == (policy, policy)
    assert (key["DeletionPolicy"], key["UpdateReplacePolicy"]) == (policy, policy)


def test_tables_are_deletion_protected_only_in_prod_and_always_recoverable(
    template_json: dict[str, Any], env_name: str, stack: str
) -> None:
    # Given the stack's tables
    tables = resources_of_type(template_json, "AWS::DynamoDB::Table")
    assert bool(tables) == (stack != "Alarms")
    # When we read their deletion protection and point-in-time recovery
    settings = {
        logical_id: (
            table["Properties"].get("DeletionProtectionEnabled"),
            table["Properties"].get("PointInTimeRecoverySpecification"),
        )
        for logical_id, table in tables.items()
    }
    # Then prod protects every table and dev none, and every table has point-in-time recovery
    protected = EXPECTED[env_name]["protected"]
    assert settings == {logical_id: (protected, {"PointInTimeRecoveryEnabled": True}) for logical_id in tables}


# --- 3. tags --------------------------------------------------------------------------------------


def test_every_taggable_resource_carries_the_environment_tags(template_json: dict[str, Any], config: EnvConfig, env_name: str) -> None:
    # Given the environment's tags
    tags = expected_tags(env_name)
    assert config.tags == tags
    # When we read the tags of every resource that supports them, and of any other resource that has some
    found = {
        logical_id: tags_of(resource)
        for logical_id, resource in template_json["Resources"].items()
        if resource["Type"] in TAGGED_TYPES or tags_of(resource) is not None
    }
    assert found
    # Then each carries project, environment and owner with the environment's values
    wrong = {logical_id: actual for logical_id, actual in found.items() if actual is None or not tags.items() <= actual.items()}
    assert wrong == {}


# --- 4. the Powertools layer --------------------------------------------------------------------------


def test_functions_use_the_configured_powertools_layer(template_json: dict[str, Any], config: EnvConfig, env_name: str) -> None:
    # Given the environment's Powertools version
    assert config.powertools_layer_version == EXPECTED[env_name]["powertools"]
    # When we read the stack's SSM parameters and its functions' layers
    # Then every function's one layer is the stack's one parameter, which names that version (the
    # Alarms stack has no function and no such parameter)
    assert_layers_from_one_parameter(template_json, config.powertools_layer_version)


# --- 5. a variant: another owner, stack prefix and Powertools version ----------------------------


def test_variant_stack_names_come_from_its_prefix(variant: tuple[App, Path, dict[str, dict[str, Any]]]) -> None:
    # Given the app built with the variant config
    _, _, templates = variant
    # When we read the stack names
    # Then they follow the variant's prefix
    assert set(templates) == {VARIANT_CONFIG.stack_name(s) for s in STACKS} == {f"Acme-prod-{s}" for s in STACKS}


def test_variant_tags_are_on_every_taggable_resource(variant: tuple[App, Path, dict[str, dict[str, Any]]]) -> None:
    # Given the variant app's construct tree and templates
    app, _, templates = variant
    tags = {"project": "onceflow", "environment": "prod", "owner": "data-platform"}
    assert VARIANT_CONFIG.tags == tags
    checked = 0
    for stack in (child for child in app.node.children if isinstance(child, Stack)):
        resources = templates[stack.stack_name]["Resources"]
        # When we visit every CloudFormation resource CDK can tag
        for construct in stack.node.find_all():
            if not isinstance(construct, CfnResource) or not (TagManager.is_taggable(construct) or TagManager.is_taggable_v2(construct)):
                continue
            logical_id = stack.resolve(construct.logical_id)
            # Then its template entry carries the variant's owner with the project and environment
            actual = tags_of(resources[logical_id])
            assert actual is not None and tags.items() <= actual.items(), f"{stack.stack_name} {logical_id}: {actual}"
            checked += 1
    # and so does every resource of a type tagged in the shipped stacks
    for name, template_json in templates.items():
        for logical_id, resource in template_json["Resources"].items():
            if resource["Type"] in TAGGED_TYPES:
                assert tags.items() <= (tags_of(resource) or {}).items(), f"{name} {logical_id}"
    assert checked > 50


def test_variant_stack_tags_in_the_manifest(variant: tuple[App, Path, dict[str, dict[str, Any]]]) -> None:
    # Given the variant's cloud assembly manifest
    _, outdir, templates = variant
    manifest = json.loads((outdir / "manifest.json").read_text())
    stacks = {name: a for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    assert set(stacks) == set(templates)
    # When we read each stack artifact's own tags
    # Then they are the config's (with cdk.json's @aws-cdk/core:explicitStackTags the stack gets them
    # from its `tags` prop; Tags.of(stack) tags the resources, checked above)
    for name, artifact in stacks.items():
        assert artifact["properties"].get("tags") == VARIANT_CONFIG.tags, name


def test_variant_powertools_version_names_the_layer_parameter(variant: tuple[App, Path, dict[str, dict[str, Any]]]) -> None:
    # Given the variant's templates
    _, _, templates = variant
    # When we read each stack's Powertools parameter and its functions' layers
    for template_json in templates.values():
        # Then the parameter names the variant's version, and the shipped version appears nowhere
        assert_layers_from_one_parameter(template_json, "3.41.2")
        assert "3.37.0" not in json.dumps(template_json)


def test_variant_keeps_prod_retention(variant: tuple[App, Path, dict[str, dict[str, Any]]]) -> None:
    # Given the variant (prod with another owner, prefix and layer)
    _, _, templates = variant
    # When we read its stateful resources' policies
    # Then they are still retained: only the removal setting decides retention
    for name, template_json in templates.items():
        for logical_id, resource in template_json["Resources"].items():
            if resource["Type"] in STATEFUL:
                assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == ("Retain", "Retain"), f"{name} {logical_id}"
