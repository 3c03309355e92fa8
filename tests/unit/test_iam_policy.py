"""The identity-policy evaluator of devtools/aws/iam_policy.py, rule by rule, and template resolution."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.aws.iam_needs import Need, bucket_arn, table_arn
from devtools.aws.iam_policy import Role, UnsupportedPolicy, condition_holds, matches, resolve


def role(*statements: dict[str, Any]) -> Role:
    return Role("R", [("Policy", index, statement) for index, statement in enumerate(statements)])


def allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def test_nothing_is_allowed_without_an_allow() -> None:
    # Given a role that allows GetItem only
    only_get = role(allow("dynamodb:GetItem", table_arn("T")))
    # Then a PutItem on the same table is implicitly denied
    assert not only_get.evaluate(Need("dynamodb:PutItem", table_arn("T"))).allowed
    assert only_get.evaluate(Need("dynamodb:GetItem", table_arn("T"))).allowed


def test_an_explicit_deny_wins_over_any_allow() -> None:
    denying = role(allow("dynamodb:*", "*"), {"Effect": "Deny", "Action": "dynamodb:DeleteItem", "Resource": "*"})
    decision = denying.evaluate(Need("dynamodb:DeleteItem", table_arn("T")))
    assert not decision.allowed and decision.denied_by == "Policy[1]"


def test_actions_match_case_insensitively_with_wildcards_and_resources_case_sensitively() -> None:
    # Given wildcards in the action and the resource
    wide = role(allow("DynamoDB:Get*", "arn:aws:dynamodb:*:*:table/Run?"))
    # Then the action's case does not matter, `?` is one character, and the resource's case does
    assert wide.evaluate(Need("dynamodb:GetItem", table_arn("Runs"))).allowed
    assert not wide.evaluate(Need("dynamodb:GetItem", table_arn("Run"))).allowed
    assert not wide.evaluate(Need("dynamodb:GetItem", table_arn("runs"))).allowed


def test_a_dot_in_a_pattern_is_a_dot() -> None:
    # (moto's matcher reads it as a regex wildcard)
    assert not matches("arn:aws:s3:::my.bucket", "arn:aws:s3:::myxbucket")


def test_a_table_grant_does_not_reach_its_index() -> None:
    table_only = role(allow("dynamodb:Query", table_arn("T")))
    assert not table_only.evaluate(Need("dynamodb:Query", table_arn("T") + "/index/I")).allowed


def test_an_s3_prefix_condition_does_not_apply_to_a_request_without_a_prefix() -> None:
    # Given ListBucket conditioned on a prefix
    conditioned = role(allow("s3:ListBucket", bucket_arn("b"), Condition={"StringLike": {"s3:prefix": ["snapshots/*"]}}))
    # Then a listing under the prefix is allowed, another prefix and no prefix at all are not
    assert conditioned.evaluate(Need("s3:ListBucket", bucket_arn("b"), (("s3:prefix", "snapshots/s1/"),))).allowed
    assert not conditioned.evaluate(Need("s3:ListBucket", bucket_arn("b"), (("s3:prefix", "payloads/"),))).allowed
    assert not conditioned.evaluate(Need("s3:ListBucket", bucket_arn("b"))).allowed


def test_a_condition_that_does_not_hold_makes_an_allow_not_apply_rather_than_deny() -> None:
    # Given a conditioned allow and an unconditioned one of the same action
    both = role(
        allow("s3:ListBucket", bucket_arn("b"), Condition={"StringLike": {"s3:prefix": ["snapshots/*"]}}),
        allow("s3:ListBucket", bucket_arn("b")),
    )
    # Then the unconditioned one still allows (moto's evaluator would deny here)
    assert both.evaluate(Need("s3:ListBucket", bucket_arn("b"))).allowed


@pytest.mark.parametrize(
    ("condition", "context", "holds"),
    [
        ({"StringEquals": {"k": "v"}}, {"k": "v"}, True),
        ({"StringEquals": {"k": ["a", "v"]}}, {"k": "v"}, True),
        ({"StringEquals": {"k": "v"}}, {}, False),
        ({"StringEqualsIfExists": {"k": "v"}}, {}, True),
        ({"StringNotEquals": {"k": "v"}}, {}, True),
        ({"StringNotEquals": {"k": "v"}}, {"k": "v"}, False),
        ({"StringLike": {"k": "a*"}}, {"K": "abc"}, True),
        ({"Bool": {"aws:SecureTransport": "true"}}, {"aws:SecureTransport": "True"}, True),
        ({"StringEquals": {"a": "1"}, "StringLike": {"b": "x*"}}, {"a": "1", "b": "y"}, False),
    ],
)
def test_condition_operators(condition: dict[str, Any], context: dict[str, str], holds: bool) -> None:
    assert condition_holds(condition, context) is holds


def test_an_operator_that_is_not_modelled_is_refused() -> None:
    with pytest.raises(UnsupportedPolicy, match="NumericLessThan"):
        condition_holds({"NumericLessThan": {"s3:max-keys": "10"}}, {"s3:max-keys": "5"})


def test_not_action_allows_everything_else() -> None:
    everything_but_delete = role({"Effect": "Allow", "NotAction": "dynamodb:DeleteItem", "Resource": "*"})
    assert everything_but_delete.evaluate(Need("dynamodb:PutItem", table_arn("T"))).allowed
    assert not everything_but_delete.evaluate(Need("dynamodb:DeleteItem", table_arn("T"))).allowed


def test_template_values_resolve_to_the_embedded_clouds_arns() -> None:
    # Given the kinds of values CDK writes in a policy
    resources = {
        "Table": {"Type": "AWS::DynamoDB::Table"},
        "Bucket": {"Type": "AWS::S3::Bucket"},
        "Machine": {"Type": "AWS::StepFunctions::StateMachine"},
    }
    # Then each resolves as the embedded cloud names the resource
    assert resolve({"Fn::GetAtt": ["Table", "StreamArn"]}, resources) == table_arn("Table") + "/stream/*"
    assert resolve({"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/payloads/*"]]}, resources) == "arn:aws:s3:::bucket/payloads/*"
    execution = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":states:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":execution:",
                {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": "Machine"}]}]},
                ":*",
            ],
        ]
    }
    assert resolve(execution, resources) == "arn:aws:states:us-east-1:123456789012:execution:Machine:*"


def test_a_role_is_read_from_every_policy_attached_to_it() -> None:
    # Given a function whose role has one attached policy and another role's policy beside it
    template = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["FnRole", "Arn"]}}},
            "FnRole": {"Type": "AWS::IAM::Role", "Properties": {}},
            "T": {"Type": "AWS::DynamoDB::Table"},
            "Mine": {
                "Type": "AWS::IAM::Policy",
                "Properties": {
                    "Roles": [{"Ref": "FnRole"}],
                    "PolicyDocument": {"Statement": [allow("dynamodb:GetItem", {"Fn::GetAtt": ["T", "Arn"]})]},
                },
            },
            "Theirs": {
                "Type": "AWS::IAM::Policy",
                "Properties": {"Roles": [{"Ref": "Other"}], "PolicyDocument": {"Statement": [allow("dynamodb:PutItem", "*")]}},
            },
        }
    }
    fn_role = Role.of_function(template, "Fn")
    # Then only its own policy counts
    assert fn_role.evaluate(Need("dynamodb:GetItem", table_arn("T"))).allowed
    assert not fn_role.evaluate(Need("dynamodb:PutItem", table_arn("T"))).allowed
    assert [grant.action for grant in fn_role.grants()] == ["dynamodb:GetItem"]


def test_a_managed_policy_is_refused_rather_than_assumed() -> None:
    template = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["FnRole", "Arn"]}}},
            "FnRole": {"Type": "AWS::IAM::Role", "Properties": {"ManagedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]}},
        }
    }
    with pytest.raises(UnsupportedPolicy, match="managed policies"):
        Role.of_function(template, "Fn")
