"""`python -m ops.empty_buckets` (the first step of `make destroy ENV=dev`) against the embedded cloud."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from ops import empty_buckets


@pytest.fixture
def cloud(moto_aws: None) -> Iterator[tuple[Any, Any]]:
    yield boto3.client("cloudformation", region_name="us-east-1"), boto3.client("s3", region_name="us-east-1")


def deploy(cloudformation: Any, stack: str, deletion_policy: str) -> None:
    template = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": deletion_policy}}}
    cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(template))


def bucket_of(cloudformation: Any, stack: str) -> str:
    (summary,) = cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    return str(summary["PhysicalResourceId"])


def fill(s3: Any, bucket: str) -> int:
    """A versioned bucket with overwritten objects and a delete marker; returns how many versions it holds."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for index in range(5):
        for revision in range(3):
            s3.put_object(Bucket=bucket, Key=f"snapshots/log-{index}/chunk", Body=f"{revision}".encode())
    s3.delete_object(Bucket=bucket, Key="snapshots/log-0/chunk")
    return 5 * 3 + 1


def remaining(s3: Any, bucket: str) -> int:
    page = s3.list_object_versions(Bucket=bucket)
    return len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))


def test_every_version_and_delete_marker_goes_and_a_second_run_finds_nothing(cloud: tuple[Any, Any], capsys: Any) -> None:
    # Given a dev stack whose versioned bucket holds 15 versions and a delete marker
    cloudformation, s3 = cloud
    deploy(cloudformation, "Onceflow-dev-EventLog", "Delete")
    bucket = bucket_of(cloudformation, "Onceflow-dev-EventLog")
    total = fill(s3, bucket)
    # When the tool runs for the environment, with the progress bar forced on
    assert empty_buckets.main(["--env", "dev", "--progress"]) == 0
    captured = capsys.readouterr()
    # Then the bucket is empty, the count is reported and progress was drawn
    assert remaining(s3, bucket) == 0
    assert f"{bucket}: deleted {total} object versions" in captured.out
    assert f"emptying {bucket}" in captured.err and f"{total}/{total}" in captured.err
    # and a second run deletes nothing
    assert empty_buckets.main(["--env", "dev"]) == 0
    assert f"{bucket}: deleted 0 object versions" in capsys.readouterr().out


def test_a_dry_run_counts_and_deletes_nothing(cloud: tuple[Any, Any], capsys: Any) -> None:
    # Given a filled bucket of a dev stack
    cloudformation, s3 = cloud
    deploy(cloudformation, "Onceflow-dev-EventLog", "Delete")
    bucket = bucket_of(cloudformation, "Onceflow-dev-EventLog")
    total = fill(s3, bucket)
    # When the tool runs as a dry run on the stack
    assert empty_buckets.main(["--stack", "Onceflow-dev-EventLog", "--dry-run"]) == 0
    # Then it reports what it would delete, and everything is still there
    assert f"{bucket}: would delete {total} object versions" in capsys.readouterr().out
    assert remaining(s3, bucket) == total


def test_a_stack_that_retains_its_buckets_is_refused(cloud: tuple[Any, Any], capsys: Any) -> None:
    # Given a prod-like stack whose bucket is retained, holding data
    cloudformation, s3 = cloud
    deploy(cloudformation, "Onceflow-prod-EventLog", "Retain")
    bucket = bucket_of(cloudformation, "Onceflow-prod-EventLog")
    total = fill(s3, bucket)
    # When the tool is pointed at it
    # Then it refuses, and deletes nothing
    with pytest.raises(SystemExit) as stopped:
        empty_buckets.main(["--stack", "Onceflow-prod-EventLog"])
    assert stopped.value.code == 2
    assert "retains its buckets" in capsys.readouterr().err
    assert remaining(s3, bucket) == total


def test_only_the_environments_deployed_stacks_are_touched(cloud: tuple[Any, Any], capsys: Any) -> None:
    # Given a dev EventLog stack and another team's stack, both with filled buckets
    cloudformation, s3 = cloud
    deploy(cloudformation, "Onceflow-dev-EventLog", "Delete")
    deploy(cloudformation, "SomeoneElse", "Delete")
    ours, theirs = bucket_of(cloudformation, "Onceflow-dev-EventLog"), bucket_of(cloudformation, "SomeoneElse")
    fill(s3, ours)
    total = fill(s3, theirs)
    # When the tool runs for dev
    assert empty_buckets.main(["--env", "dev"]) == 0
    # Then only dev's bucket is emptied
    assert remaining(s3, ours) == 0
    assert remaining(s3, theirs) == total


def test_an_unknown_environment_is_a_clear_error(cloud: tuple[Any, Any], capsys: Any) -> None:
    # Given no such environment
    # When the tool is asked for it
    # Then it stops with the config's message
    with pytest.raises(SystemExit) as stopped:
        empty_buckets.main(["--env", "staging"])
    assert stopped.value.code == 2
    assert "unknown environment 'staging'" in capsys.readouterr().err
