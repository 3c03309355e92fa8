"""The embedded cloud's IAM (devtools/aws/call_audit.py): a function's calls are checked against its
synthesized role and refused as AWS would refuse them."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools.aws import call_audit
from devtools.aws.clients import new_client
from devtools.aws.esm import lambda_event, records_from_payloads
from devtools.aws.iam_policy import Role
from devtools.aws.template_resources import Template, find_function
from devtools.runner_world import RunnerStatsWorld
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_contract
from runtime.runner_stats.store import DynamoRunStatsStore
from runtime.shared.concurrency import map_bounded

RUNNER = runner_contract.HANDLER
EVENT_LOG_API = event_log_contract.HANDLER_API


def runner_event(*seqs: int) -> dict[str, Any]:
    payloads = [
        {"user_id": 7, "run_id": 70, "sequence_id": seq, "timestamp_utc": 1_509_547_364_734 + seq * 30_000, "distance_meters": 10}
        for seq in seqs
    ]
    return lambda_event(records_from_payloads([("7", json.dumps(p).encode()) for p in payloads]))


@pytest.fixture
def audited(dev_templates: dict[str, Template]) -> Iterator[call_audit.CallAudit]:
    """A fresh audit of the dev templates for this test alone (the session's own goes on after it)."""
    with call_audit.auditing(dev_templates) as audit:
        yield audit


def test_a_call_the_role_does_not_grant_fails_and_names_function_action_and_resource(
    moto_aws: None, runner_stats_template: Template, audited: call_audit.CallAudit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the runner-stats store with a DescribeTable added to its commit, which its role does not grant
    world = RunnerStatsWorld.create(runner_stats_template)
    commit = DynamoRunStatsStore.commit

    def commit_and_describe(store: DynamoRunStatsStore, *args: Any) -> None:
        store.client.describe_table(TableName=world.settings.tables.run_stats)
        commit(store, *args)

    monkeypatch.setattr(DynamoRunStatsStore, "commit", commit_and_describe)
    # When the handler processes a batch
    response = world.invoke(runner_event(1, 2))
    # Then the call was refused as AWS would refuse it, nothing was committed, the batch is retried
    assert response["batchItemFailures"], response
    assert world.view().runs == {}
    (denial,) = set(audited.denials)
    assert denial.handler == RUNNER
    assert denial.call == "dynamodb:DescribeTable"
    assert denial.need.action == "dynamodb:DescribeTable"
    assert denial.need.resource.endswith(f":table/{world.settings.tables.run_stats}")
    assert "dynamodb:DescribeTable" in denial.describe() and RUNNER in denial.describe()


def test_calls_on_a_handlers_worker_threads_are_the_handlers(
    moto_aws: None, runner_stats_template: Template, audited: call_audit.CallAudit
) -> None:
    # Given a table of the runner-stats stack
    world = RunnerStatsWorld.create(runner_stats_template)
    table = world.settings.tables.run_stats
    client = new_client()
    # When a handler's context reads it on a pool of threads
    with call_audit.acting_as(RUNNER):
        map_bounded(lambda run: client.get_item(TableName=table, Key={"user_id": {"N": "7"}, "run_id": {"N": str(run)}}), list(range(8)), 4)
    # Then every call is the handler's, and allowed
    assert audited.operations[RUNNER]["dynamodb:GetItem"] == 8
    assert audited.denials == []


def test_calls_outside_any_entry_point_are_not_checked(
    moto_aws: None, runner_stats_template: Template, audited: call_audit.CallAudit
) -> None:
    # Given no function acting
    world = RunnerStatsWorld.create(runner_stats_template)
    # When a test's own set-up scans a table
    world.client.scan(TableName=world.settings.tables.run_stats)
    # Then nothing is recorded against any function
    assert sum(sum(counts.values()) for counts in audited.operations.values()) == 0


def test_a_missing_key_answers_404_with_list_bucket_and_403_without(moto_aws: None, dev_templates: dict[str, Template]) -> None:
    # Given the event-log bucket, and the API function's role with and without its s3:ListBucket grant
    s3 = new_client("s3")
    s3.create_bucket(Bucket="eventlogbucket7de35d8b")
    without_list = copy.deepcopy(dev_templates)
    for resource in without_list["Onceflow-dev-EventLog"]["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            statements[:] = [s for s in statements if s["Action"] != "s3:ListBucket"]
    for templates, expected in ((dev_templates, "404"), (without_list, "403")):
        # When the API heads a payload not uploaded yet
        with call_audit.auditing(templates), call_audit.acting_as(EVENT_LOG_API), pytest.raises(ClientError) as raised:
            s3.head_object(Bucket="eventlogbucket7de35d8b", Key="payloads/not-yet")
        # Then S3 hides the key's absence from a caller that may not list the bucket
        assert raised.value.response["Error"]["Code"] == expected


def test_a_grant_no_call_uses_is_reported(dev_templates: dict[str, Template]) -> None:
    # Given the runner-stats role with one more grant than its code uses
    widened = copy.deepcopy(dev_templates)
    resources = widened["Onceflow-dev-RunnerStats"]["Resources"]
    policy = next(r for r in resources.values() if r["Type"] == "AWS::IAM::Policy")
    policy["Properties"]["PolicyDocument"]["Statement"].append(
        {
            "Effect": "Allow",
            "Action": "dynamodb:Scan",
            "Resource": {"Fn::GetAtt": [next(i for i in resources if "RejectsTable" in i), "Arn"]},
        }
    )
    audit = call_audit.CallAudit.from_templates(widened)
    # Then the unused grant is listed (along with the rest: nothing ran)
    assert any(grant.action == "dynamodb:Scan" for grant in audit.unused_grants(RUNNER))
    # and the Lambda service's own needs (the stream, the on-failure queue, logs) are allowed
    assert audit.denials == []
    assert not any(grant.action.startswith(("kinesis:GetRecords", "logs:")) for grant in audit.unused_grants(RUNNER))


def test_dev_and_prod_grant_the_same_actions_on_the_same_resources(
    dev_templates: dict[str, Template], prod_templates: dict[str, Template]
) -> None:
    # Given each function's role in both environments (the audit checks calls against dev's)
    for suffix in ("RunnerStats", "EventLog", "TaxiEtl"):
        dev, prod = dev_templates[f"Onceflow-dev-{suffix}"], prod_templates[f"Onceflow-prod-{suffix}"]
        for handler in call_audit.entry_points({suffix: dev}):
            dev_role = Role.of_function(dev, find_function(dev, handler))
            prod_role = Role.of_function(prod, find_function(prod, handler))
            # Then the grants are the same, so what is allowed in dev is allowed in prod
            assert sorted(map(repr, dev_role.grants())) == sorted(map(repr, prod_role.grants())), handler


def test_the_workers_records_of_a_parallel_run_are_judged_as_one_run(
    moto_aws: None, runner_stats_template: Template, dev_templates: dict[str, Template], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two pytest-xdist workers' audits: the first saw the runner read its table, the second
    # saw it refused a DescribeTable of it
    world = RunnerStatsWorld.create(runner_stats_template)
    table = world.settings.tables.run_stats
    first, second = call_audit.CallAudit.from_templates(dev_templates), call_audit.CallAudit.from_templates(dev_templates)
    assert first.check(RUNNER, "dynamodb", "GetItem", {"TableName": table, "Key": {"user_id": {"N": "7"}, "run_id": {"N": "1"}}}) is None
    denial = second.check(RUNNER, "dynamodb", "DescribeTable", {"TableName": table})
    assert denial is not None
    used_by_first_alone = first.used[RUNNER] - second.used[RUNNER]
    assert {grant.action for grant in used_by_first_alone} == {"dynamodb:GetItem"}
    # When the controller, which ran no test and has no audit of its own, merges their records
    monkeypatch.setattr(call_audit, "_active", None)
    for worker in (first, second):
        merged = call_audit.merge_recorded(worker.recorded())
    # Then the run's audit is the merge: a grant either used is used, what neither used is unused,
    # the second's denial is the run's, and the calls add up
    assert call_audit._active is merged
    assert set(merged.unused_grants(RUNNER)) == set(first.unused_grants(RUNNER)) & set(second.unused_grants(RUNNER))
    assert not used_by_first_alone & set(merged.unused_grants(RUNNER))
    assert denial in merged.denials
    assert merged.operations[RUNNER] == Counter({"dynamodb:GetItem": 1, "dynamodb:DescribeTable": 1})
    # and a grant neither used still fails a strict run
    assert set(merged.unexplained_unused()) == set(first.unexplained_unused()) & set(second.unexplained_unused())
    assert merged.unexplained_unused()
