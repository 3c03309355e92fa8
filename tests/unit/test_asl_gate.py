"""The state machine definition gate's pure parts (devtools/asl_gate.py): resolving a DefinitionString's
tokens to placeholders of the right shape, and the project's own checks on small hand-written
definitions, nested scopes included. asl-validator and the synthesized templates are in
tests/infra/test_asl_gate.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.asl_gate import (
    WHOLE_DEFINITION,
    Problem,
    UnresolvedToken,
    definition_text,
    resolve,
    state_at,
    state_machines,
    structure_problems,
)

TEMPLATE: dict[str, Any] = {
    "Resources": {
        "Fn1": {"Type": "AWS::Lambda::Function"},
        "Live": {"Type": "AWS::Lambda::Alias"},
        "Table1": {"Type": "AWS::DynamoDB::Table"},
        "Queue1": {"Type": "AWS::SQS::Queue"},
        "Topic1": {"Type": "AWS::SNS::Topic"},
        "Bucket1": {"Type": "AWS::S3::Bucket"},
        "Machine1": {"Type": "AWS::StepFunctions::StateMachine"},
        "Role1": {"Type": "AWS::IAM::Role"},
    }
}


# --- placeholders -------------------------------------------------------------------------------------


def test_a_join_around_a_function_arn_resolves_to_a_lambda_arn() -> None:
    # Given a Fn::Join as CDK writes a Task's Resource
    joined = {"Fn::Join": ["", ['{"Resource":"', {"Fn::GetAtt": ["Fn1", "Arn"]}, '"}']]}
    # When it is resolved, Then the token is a Lambda function ARN named after the logical id
    assert json.loads(resolve(joined, TEMPLATE)) == {"Resource": "arn:aws:lambda:us-east-1:123456789012:function:Fn1"}


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ({"Ref": "Fn1"}, "Fn1"),
        ({"Ref": "Live"}, "arn:aws:lambda:us-east-1:123456789012:function:Live:live"),
        ({"Ref": "Table1"}, "Table1"),
        ({"Fn::GetAtt": ["Table1", "Arn"]}, "arn:aws:dynamodb:us-east-1:123456789012:table/Table1"),
        ({"Ref": "Queue1"}, "https://sqs.us-east-1.amazonaws.com/123456789012/Queue1"),
        ({"Fn::GetAtt": ["Queue1", "Arn"]}, "arn:aws:sqs:us-east-1:123456789012:Queue1"),
        ({"Ref": "Topic1"}, "arn:aws:sns:us-east-1:123456789012:Topic1"),
        ({"Ref": "Bucket1"}, "bucket1"),
        ({"Fn::GetAtt": "Bucket1.Arn"}, "arn:aws:s3:::bucket1"),
        ({"Ref": "Machine1"}, "arn:aws:states:us-east-1:123456789012:stateMachine:Machine1"),
        ({"Ref": "AWS::Partition"}, "aws"),
    ],
)
def test_each_token_gets_a_placeholder_of_its_resource_types_shape(token: dict[str, Any], expected: str) -> None:
    # Given a Ref or Fn::GetAtt of a resource type the gate knows, When resolved, Then it has CloudFormation's shape
    assert resolve(token, TEMPLATE) == expected


@pytest.mark.parametrize(
    "token",
    [{"Fn::GetAtt": ["Role1", "Arn"]}, {"Ref": "Missing"}, {"Fn::ImportValue": "Shared"}, {"Fn::GetAtt": ["Fn1", "SnapStartResponse"]}],
)
def test_a_token_without_a_placeholder_is_refused_by_name(token: dict[str, Any]) -> None:
    # Given a token the gate has no placeholder for, When resolved, Then it fails naming the token (nothing is guessed)
    with pytest.raises(UnresolvedToken, match="no placeholder for " + json.dumps(token).replace("[", r"\[")):
        resolve(token, TEMPLATE)


def test_sub_in_both_forms_and_its_literal_escape() -> None:
    # Given Fn::Sub as a string (Ref and GetAtt by name, ${!x} escaped) and with its own variables
    plain = {"Fn::Sub": "${Fn1}|${Table1.Arn}|${AWS::Region}|${!Literal}"}
    with_variables = {"Fn::Sub": ["${Target}", {"Target": {"Fn::GetAtt": ["Fn1", "Arn"]}}]}
    # When resolved, Then each variable has its placeholder and the escape is a literal ${...}
    assert resolve(plain, TEMPLATE) == "Fn1|arn:aws:dynamodb:us-east-1:123456789012:table/Table1|us-east-1|${Literal}"
    assert resolve(with_variables, TEMPLATE) == "arn:aws:lambda:us-east-1:123456789012:function:Fn1"


def test_definition_substitutions_are_applied_after_the_join() -> None:
    # Given a DefinitionString with a ${key} that DefinitionSubstitutions fills with a token
    properties = {
        "DefinitionString": {"Fn::Join": ["", ['{"Resource":"${Worker}","Next":"', "B", '"}']]},
        "DefinitionSubstitutions": {"Worker": {"Fn::GetAtt": ["Fn1", "Arn"]}},
    }
    # When the definition is resolved, Then the key is replaced by the token's placeholder
    assert json.loads(definition_text(properties, TEMPLATE)) == {
        "Resource": "arn:aws:lambda:us-east-1:123456789012:function:Fn1",
        "Next": "B",
    }


def test_a_definition_the_gate_cannot_resolve_or_parse_is_a_finding(tmp_path: Path) -> None:
    # Given a template with four state machines: one resolvable, one with an unknown token, one whose
    # join is not JSON, one whose definition is in S3
    def machine(definition: Any) -> dict[str, Any]:
        return {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionString": definition}}

    template = {
        "Resources": {
            "Fn1": {"Type": "AWS::Lambda::Function"},
            "Role1": {"Type": "AWS::IAM::Role"},
            "Good": machine('{"StartAt":"A","States":{"A":{"Type":"Succeed"}}}'),
            "Unresolved": machine({"Fn::Join": ["", ['{"Resource":"', {"Fn::GetAtt": ["Role1", "Arn"]}, '"}']]}),
            "NotJson": machine({"Fn::Join": ["", ['{"StartAt":', {"Ref": "Fn1"}, "}"]]}),
            "FromS3": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionS3Location": {}}},
        }
    }
    template_file = tmp_path / "Stack.template.json"
    template_file.write_text(json.dumps(template))
    # When its state machines are read
    found, findings = state_machines(template_file)
    # Then the good one is returned, and each other one is a finding naming it
    assert [machine.logical_id for machine in found] == ["Good"]
    assert {(finding.state_machine, finding.state) for finding in findings} == {
        ("Unresolved", WHOLE_DEFINITION),
        ("NotJson", WHOLE_DEFINITION),
        ("FromS3", WHOLE_DEFINITION),
    }
    problems = {finding.state_machine: finding.problem for finding in findings}
    assert problems["Unresolved"].startswith('no placeholder for {"Fn::GetAtt": ["Role1", "Arn"]}')
    assert problems["NotJson"].startswith("the resolved DefinitionString is not JSON")
    assert problems["FromS3"] == "no DefinitionString: the gate checks only those"


# --- the project's own checks, scope by scope ----------------------------------------------------------


def task(next_state: str | None = None, **fields: Any) -> dict[str, Any]:
    state = {"Type": "Task", "Resource": "arn:aws:lambda:us-east-1:123456789012:function:F", **fields}
    return {**state, "Next": next_state} if next_state else {**state, "End": True}


def test_a_valid_nested_definition_has_no_problems() -> None:
    # Given a definition with a Parallel branch, a Map, a Choice with nested rules, retriers and catchers
    definition = {
        "StartAt": "Fan",
        "States": {
            "Fan": {
                "Type": "Parallel",
                "Branches": [{"StartAt": "B1", "States": {"B1": task("B2"), "B2": {"Type": "Succeed"}}}],
                "Retry": [{"ErrorEquals": ["Custom"], "MaxAttempts": 1}, {"ErrorEquals": ["States.ALL"], "JitterStrategy": "FULL"}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Failed"}],
                "Next": "Each",
            },
            "Each": {"Type": "Map", "ItemProcessor": {"StartAt": "M1", "States": {"M1": task()}}, "Next": "Pick"},
            "Pick": {
                "Type": "Choice",
                "Choices": [
                    {"And": [{"Variable": "$.a", "IsPresent": True}, {"Not": {"Variable": "$.b", "BooleanEquals": True}}], "Next": "Done"}
                ],
                "Default": "Failed",
            },
            "Done": {"Type": "Succeed"},
            "Failed": {"Type": "Fail", "Error": "Failed"},
        },
    }
    # When checked, Then nothing is found
    assert structure_problems(definition) == []


def test_a_transition_cannot_leave_its_parallel_branch() -> None:
    # Given a branch whose state goes to a top-level state (asl-validator's target check is not scoped)
    definition = {
        "StartAt": "Fan",
        "States": {
            "Fan": {"Type": "Parallel", "Branches": [{"StartAt": "B1", "States": {"B1": task("Done")}}], "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
    # When checked, Then the branch's Next names no state of its scope
    assert structure_problems(definition) == [Problem("Fan/Branches[0]/B1", 'Next "Done" names no state of its scope')]


def test_reachability_is_per_scope_and_a_self_loop_does_not_reach_a_state() -> None:
    # Given a Map's item processor with a state only itself transitions to, and a bad StartAt in an Iterator
    definition = {
        "StartAt": "Each",
        "States": {
            "Each": {
                "Type": "Map",
                "ItemProcessor": {"StartAt": "M1", "States": {"M1": task(), "Loop": {"Type": "Wait", "Seconds": 1, "Next": "Loop"}}},
                "End": True,
            },
            "Old": {"Type": "Map", "Iterator": {"StartAt": "Nope", "States": {"I1": task()}}, "End": True},
        },
    }
    # When checked
    problems = structure_problems(definition)
    # Then the self-looping state, the state no StartAt reaches, and the bad StartAt are found, each in its scope
    assert problems == [
        Problem("Each/ItemProcessor/Loop", 'unreachable: no transition leads to it from StartAt "M1"'),
        Problem("Old/Iterator", 'StartAt "Nope" names no state of this scope'),
        Problem("Old/Iterator/I1", 'unreachable: no transition leads to it from StartAt "Nope"'),
        Problem("Old", 'unreachable: no transition leads to it from StartAt "Each"'),
    ]


def test_unknown_fields_are_named_wherever_they_are() -> None:
    # Given unknown fields at the top level, in a state, a retrier, a catcher, a Choice rule, a nested rule and a branch
    definition = {
        "StartAt": "Fan",
        "Timeout": 5,
        "States": {
            "Fan": {
                "Type": "Parallel",
                "Branches": [{"StartAt": "B1", "States": {"B1": task()}, "QueryLanguage": "JSONata"}],
                "Retry": [{"ErrorEquals": ["E"], "Backoff": 2}],
                "Catch": [{"ErrorEquals": ["E"], "Next": "Pick", "MaxAttempts": 1}],
                "Next": "Pick",
            },
            "Pick": {
                "Type": "Choice",
                "Choices": [
                    {"Variable": "$.a", "StringEquals": "x", "Next": "Done", "Else": "Done"},
                    {"Not": {"Variable": "$.b", "Next": "Done"}, "Next": "Done"},
                ],
                "Default": "Done",
                "End": True,
            },
            "Done": {"Type": "Succeed", "Result": {}},
        },
    }
    # When checked, Then each is named with where it is (End is not a Choice state's field)
    assert structure_problems(definition) == [
        Problem(WHOLE_DEFINITION, 'unknown field "Timeout"'),
        Problem("Fan", 'unknown field "Backoff" in Retry[0]'),
        Problem("Fan", 'unknown field "MaxAttempts" in Catch[0]'),
        Problem("Fan/Branches[0]", 'unknown field "QueryLanguage"'),
        Problem("Pick", 'unknown field "End" for a Choice state'),
        Problem("Pick", 'unknown field "Else" in Choices[0]'),
        Problem("Pick", 'unknown field "Next" in Choices[1].Not'),
        Problem("Done", 'unknown field "Result" for a Succeed state'),
    ]


def test_states_all_must_be_alone_and_last_in_retry_and_catch() -> None:
    # Given States.ALL first of two retriers, and beside another error in the last catcher
    definition = {
        "StartAt": "Work",
        "States": {
            "Work": task(
                "Done",
                Retry=[{"ErrorEquals": ["States.ALL"]}, {"ErrorEquals": ["Custom"]}],
                Catch=[{"ErrorEquals": ["Custom"], "Next": "Done"}, {"ErrorEquals": ["States.ALL", "States.Timeout"], "Next": "Done"}],
            ),
            "Done": {"Type": "Succeed"},
        },
    }
    # When checked, Then both are found
    assert structure_problems(definition) == [
        Problem("Work", "Retry[0]: States.ALL must be in the last entry of Retry, not 1 of 2"),
        Problem("Work", 'Catch[1]: States.ALL must be alone in its ErrorEquals, not with ["States.ALL", "States.Timeout"]'),
    ]


def test_malformed_shapes_do_not_crash_the_checks() -> None:
    # Given shapes asl-validator refuses (States a list, a state a string, Catch an object, no Type)
    for definition in (
        [],
        {"StartAt": "A", "States": []},
        {"StartAt": "A", "States": {"A": "Succeed"}},
        {"StartAt": "A", "States": {"A": {"Type": "Task", "Catch": {"Next": "A"}, "Retry": ["x"], "End": True}}},
    ):
        # When checked, Then the checks return (asl-validator reports the shape)
        structure_problems(definition)
    assert structure_problems({"StartAt": "A", "States": {"A": {"Next": "A"}}}) == [Problem("A", "unknown state Type null")]


@pytest.mark.parametrize(
    ("pointer", "state"),
    [
        ("", WHOLE_DEFINITION),
        ("/States", WHOLE_DEFINITION),
        ("/States/Validation", "Validation"),
        ("/States/Validation/Catch/0/ErrorEquals", "Validation"),
        ("/States/Fan/Branches/1/States/B~11/Retry/0", "Fan/Branches[1]/B/1"),
        ("/States/Each/ItemProcessor/States/M1", "Each/ItemProcessor/M1"),
        ("/States/Each/ItemProcessor/ProcessorConfig", "Each"),
        ("/States/Pass/Parameters/States/x", "Pass"),
    ],
)
def test_an_asl_validator_error_is_placed_in_its_state(pointer: str, state: str) -> None:
    # Given the JSON pointer of an asl-validator error, When its state is named, Then it is the gate's name for that state
    assert state_at(pointer) == state
