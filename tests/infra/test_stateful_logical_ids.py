"""No stateful resource may change its CloudFormation logical ID: in prod, CloudFormation would
replace the retained resource and the data with it. The inventory in stateful_logical_ids.json was
taken from the reviewed snapshots before infra was split by pipeline (commit 18a976b); a refactor
that moves code but not construct paths leaves it unchanged. A new stateful resource is added to
the inventory by hand, as a reviewed decision; an existing one never leaves it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from onceflow.infra.config import load_config

INVENTORY = Path(__file__).with_name("stateful_logical_ids.json")
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_snapshots"
# Resources that hold data or identity a replacement would lose: items, objects, records,
# messages, key material, secret values, log events, execution history, subscriptions.
STATEFUL_TYPES = frozenset(
    {
        "AWS::DynamoDB::Table",
        "AWS::DynamoDB::GlobalTable",
        "AWS::S3::Bucket",
        "AWS::Kinesis::Stream",
        "AWS::SQS::Queue",
        "AWS::KMS::Key",
        "AWS::SecretsManager::Secret",
        "AWS::Logs::LogGroup",
        "AWS::StepFunctions::StateMachine",
        "AWS::SNS::Topic",
    }
)


def stateful_resources(template: dict[str, Any]) -> dict[str, str]:
    return {logical_id: r["Type"] for logical_id, r in template["Resources"].items() if r["Type"] in STATEFUL_TYPES}


def inventory() -> dict[str, dict[str, dict[str, str]]]:
    loaded: dict[str, dict[str, dict[str, str]]] = json.loads(INVENTORY.read_text())
    return loaded


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_synthesized_stateful_resources_keep_their_logical_ids(env_name: str, request: pytest.FixtureRequest) -> None:
    # Given the environment's synthesized stacks and the frozen inventory
    templates: dict[str, Any] = request.getfixturevalue(f"{env_name}_templates")
    prefix = load_config(env_name).stack_prefix
    # When we list each stack's stateful resources by logical ID and type
    found = {name.removeprefix(f"{prefix}-"): stateful_resources(t) for name, t in templates.items()}
    # Then every one is in the inventory under the same ID and type, and none is missing
    assert found == inventory()[env_name]


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_reviewed_snapshots_keep_the_stateful_logical_ids(env_name: str) -> None:
    # Given the reviewed snapshots (which `--snapshot-update` can rewrite)
    # When we list their stateful resources
    # Then an accepted snapshot update cannot have renamed or dropped one
    for stack_suffix, expected in inventory()[env_name].items():
        snapshot = json.loads((SNAPSHOTS / f"test_template_matches_snapshot[{env_name}-{stack_suffix}].json").read_text())
        assert stateful_resources(snapshot) == expected, stack_suffix


def test_inventory_covers_every_kind_of_stateful_resource_the_app_has() -> None:
    # Given the frozen inventory
    kinds = {t for env in inventory().values() for stack in env.values() for t in stack.values()}
    # Then tables, buckets, the stream, queues, keys, the secret, log groups and the state machine are all in it
    assert kinds >= STATEFUL_TYPES - {"AWS::DynamoDB::GlobalTable"}
