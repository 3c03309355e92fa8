"""Snapshots of the synthesized templates: any change to the deployed shape shows up as a
reviewable diff (`pytest tests/infra/test_snapshots.py --snapshot-update` accepts it)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from onceflow.infra.config import load_config

ENVS = ("dev", "prod")
# Each environment's stacks ("<stack_prefix>-<suffix>") and how many of the project's Lambda functions each holds:
# every function's code key must be normalized, not just the first one's.
FUNCTIONS_PER_STACK = {"Alarms": 0, "RunnerStats": 1, "EventLog": 5, "TaxiEtl": 12}
# CDK's own deploy-time handlers, whose code is inline in the template (no asset): the taxi stack's bucket notifications.
INLINE_FUNCTIONS_PER_STACK = {"Alarms": 0, "RunnerStats": 0, "EventLog": 0, "TaxiEtl": 1}
ASSET_HASH = "<asset-hash>"
# A CDK asset hash is the SHA-256 of the asset's content, i.e. of the runtime/ sources: it changes
# with every runtime code edit. It shows up as the function's S3Key "<hash>.zip", in "asset.<hash>"
# directory names and in aws:asset:* metadata. Left in, every handler change would break these
# infra snapshots; the code asset itself is checked in test_runner_stats_infra.py instead.
_SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


def normalize(value: Any) -> Any:
    """The template with asset hashes and asset paths replaced by placeholders."""
    if isinstance(value, dict):
        return {key: ("<asset-path>" if key == "aws:asset:path" else normalize(item)) for key, item in value.items()}
    if isinstance(value, list):
        return [normalize(item) for item in value]
    if isinstance(value, str):
        return _SHA256.sub(ASSET_HASH, value)
    return value


@pytest.fixture
def snapshot_json(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    # One readable, diffable .json file per environment and stack.
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("stack_suffix", sorted(FUNCTIONS_PER_STACK))
@pytest.mark.parametrize("env_name", ENVS)
def test_template_matches_snapshot(
    env_name: str, stack_suffix: str, request: pytest.FixtureRequest, snapshot_json: SnapshotAssertion
) -> None:
    # Given one of the environment's synthesized stacks
    templates: dict[str, Any] = request.getfixturevalue(f"{env_name}_templates")
    template = templates[f"{load_config(env_name).stack_prefix}-{stack_suffix}"]
    # When its asset hashes are replaced by placeholders
    normalized = normalize(template)
    assert not _SHA256.search(json.dumps(normalized))
    functions = [r for r in normalized["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    inline = [function for function in functions if "ZipFile" in function["Properties"]["Code"]]
    assert (len(functions) - len(inline), len(inline)) == (FUNCTIONS_PER_STACK[stack_suffix], INLINE_FUNCTIONS_PER_STACK[stack_suffix])
    for function in functions:
        if function not in inline:
            assert function["Properties"]["Code"]["S3Key"] == f"{ASSET_HASH}.zip"
    # Then it equals the reviewed snapshot
    assert normalized == snapshot_json


def test_every_stack_of_every_environment_is_snapshotted(dev_templates: dict[str, Any], prod_templates: dict[str, Any]) -> None:
    # Given the stacks the app synthesizes per environment
    # When we compare them with the stacks the snapshot test is parametrized over
    # Then no stack is left without a snapshot
    for env_name, templates in (("dev", dev_templates), ("prod", prod_templates)):
        prefix = load_config(env_name).stack_prefix
        assert set(templates) == {f"{prefix}-{suffix}" for suffix in FUNCTIONS_PER_STACK}


def test_normalize_replaces_only_asset_hashes() -> None:
    # Given a template fragment with an asset key, asset metadata and ordinary values
    digest = "0123456789abcdef" * 4
    fragment = {
        "Code": {"S3Key": f"{digest}.zip", "S3Bucket": "cdk-hnb659fds-assets"},
        "Metadata": {"aws:asset:path": f"asset.{digest}", "aws:asset:property": "Code"},
        "Other": [f"asset.{digest}", "RunnerStatsHandler6A216011", 7],
    }
    # When it is normalized
    normalized = normalize(fragment)
    # Then hashes and the asset path are placeholders and everything else is unchanged
    assert normalized == {
        "Code": {"S3Key": "<asset-hash>.zip", "S3Bucket": "cdk-hnb659fds-assets"},
        "Metadata": {"aws:asset:path": "<asset-path>", "aws:asset:property": "Code"},
        "Other": ["asset.<asset-hash>", "RunnerStatsHandler6A216011", 7],
    }
