"""Empty the S3 buckets of a stack that is about to be destroyed (`make destroy ENV=dev` runs it).

CloudFormation cannot delete a bucket that still holds objects, and the event log's bucket is
versioned: every object version and delete marker must go. CDK's `auto_delete_objects` would do
this with a custom-resource Lambda in every environment; a step of `make destroy` does it only
where data is meant to be thrown away. A stack whose buckets are retained (prod) is refused.
Running it twice is harmless: an empty bucket has nothing left to delete.

    python -m ops.empty_buckets --env dev          # every stack of the environment (what make destroy runs)
    python -m ops.empty_buckets --stack Onceflow-dev-EventLog --dry-run

Its --env is not the other tools' --env: it does not read cdk-outputs-<env>.json. It names every
stack of the environment (infra/config.py's names) that CloudFormation still lists, because what
it needs is not in the outputs file: the buckets are not stack outputs (their names come from the
stack's resources, and the refusal from its template's DeletionPolicy), so it asks CloudFormation
either way; and a teardown must not trust a file that may be stale, or absent for a stack a failed
or hand-run deploy left behind, or it would leave a bucket full and `cdk destroy` would fail.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from ops.cli import AwsSession, UsageError, add_aws_options, usage_errors
from ops.progress import progress_bar

DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys


def stack_buckets(cloudformation: Any, stack: str) -> list[str]:
    """The physical names of the buckets the stack created; refuses a stack that retains them."""
    template = cloudformation.get_template(StackName=stack, TemplateStage="Processed")["TemplateBody"]
    resources = template["Resources"] if isinstance(template, dict) else {}
    retained = [name for name, body in resources.items() if body["Type"] == "AWS::S3::Bucket" and body.get("DeletionPolicy") == "Retain"]
    if retained:
        raise UsageError(f"stack {stack} retains its buckets ({', '.join(retained)}); refusing to empty them")
    paginator = cloudformation.get_paginator("list_stack_resources")
    return [
        summary["PhysicalResourceId"]
        for page in paginator.paginate(StackName=stack)
        for summary in page["StackResourceSummaries"]
        if summary["ResourceType"] == "AWS::S3::Bucket" and summary.get("PhysicalResourceId")
    ]


def deployed_stacks(cloudformation: Any, env_name: str) -> list[str]:
    """The app's stacks of the environment that exist (a partial deploy has fewer)."""
    from onceflow.infra.config import PIPELINE_STACKS, ConfigError, load_config

    try:
        config = load_config(env_name)
    except ConfigError as error:
        raise UsageError(str(error)) from error
    names = [config.stack_name(pipeline) for pipeline in PIPELINE_STACKS]
    live = {
        summary["StackName"]
        for page in cloudformation.get_paginator("list_stacks").paginate()
        for summary in page["StackSummaries"]
        if summary["StackStatus"] != "DELETE_COMPLETE"
    }
    return [name for name in names if name in live]


def versions(s3: Any, bucket: str) -> Iterator[dict[str, str]]:
    """Every object version and delete marker of the bucket (an unversioned bucket's objects have version "null")."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            yield {"Key": entry["Key"], "VersionId": entry["VersionId"]}


def empty_bucket(s3: Any, bucket: str, *, force_progress: bool = False) -> int:
    """Delete everything in the bucket, in batches; returns how many versions were deleted."""
    entries = list(versions(s3, bucket))  # a bucket being torn down is a dev bucket: small
    progress = progress_bar(len(entries), f"emptying {bucket}", force=force_progress)
    for start in range(0, len(entries), DELETE_BATCH):
        batch = entries[start : start + DELETE_BATCH]
        response = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise SystemExit(f"S3 refused {len(errors)} deletions in {bucket} (first: {first.get('Key')}: {first.get('Code')}); run again")
        progress.update(len(batch))
    progress.close()
    return len(entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Empty the buckets of a stack before it is destroyed (never a retaining stack).")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--stack", help="a deployed stack, e.g. Onceflow-dev-EventLog")
    target.add_argument(
        "--env",
        help="every deployed stack of this environment (names from infra/config.py, found in CloudFormation; "
        "unlike the other tools, cdk-outputs-<env>.json is not read)",
    )
    parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    parser.add_argument("--progress", action="store_true", help="draw the progress bar even when stderr is not a terminal")
    add_aws_options(parser)
    args = parser.parse_args(argv)

    aws = AwsSession.from_args(args)
    with usage_errors(parser):
        cloudformation = aws.client("cloudformation")
        s3 = aws.client("s3")
        stacks = [args.stack] if args.stack else deployed_stacks(cloudformation, args.env)
        buckets = [bucket for stack in stacks for bucket in stack_buckets(cloudformation, stack)]
    for bucket in buckets:
        if args.dry_run:
            print(f"{bucket}: would delete {sum(1 for _ in versions(s3, bucket))} object versions")
            continue
        deleted = empty_bucket(s3, bucket, force_progress=args.progress)
        print(f"{bucket}: deleted {deleted} object versions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
