"""The HTTP APIs' timeouts against API Gateway's quotas, in every environment's synthesized stacks.

"Quotas for configuring and running an HTTP API" (docs.aws.amazon.com/apigateway/latest/developerguide/
http-api-quotas.html): maximum integration timeout 30 seconds (not adjustable; 30,000 ms when the integration
sets none), Lambda authorizer response timeout 10,000 ms. A function behind an integration must end before
API Gateway stops waiting for it, or the caller gets a 503 while the function goes on writing.
"""

from __future__ import annotations

from typing import Any

from devtools.aws import template_resources
from devtools.aws.service_limits import HTTP_API_INTEGRATION_TIMEOUT_SECONDS

INTEGRATION_TIMEOUT_MAX_MS = HTTP_API_INTEGRATION_TIMEOUT_SECONDS * 1000
AUTHORIZER_TIMEOUT_MAX_MS = 10_000


def function_behind(template: dict[str, Any], uri: Any) -> dict[str, Any]:
    """The Lambda function an integration or authorizer URI invokes (its ARN, or with SnapStart its alias's)."""
    return dict(template["Resources"][template_resources.function_behind(template, uri)])


def resources(templates: dict[str, dict[str, Any]], resource_type: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (f"{stack}/{logical_id}", resource["Properties"], template)
        for stack, template in templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == resource_type
    ]


def test_every_integration_waits_at_most_30_s_and_its_function_ends_before(env_templates: dict[str, dict[str, Any]]) -> None:
    # Given every HTTP API integration of the environment
    integrations = resources(env_templates, "AWS::ApiGatewayV2::Integration")
    assert integrations
    for name, properties, template in integrations:
        # When its timeout and its function's are read
        waits_ms = int(properties.get("TimeoutInMillis", INTEGRATION_TIMEOUT_MAX_MS))
        function_ms = int(function_behind(template, properties["IntegrationUri"])["Properties"]["Timeout"]) * 1000
        # Then API Gateway waits at most its 30 s, and the function times out before API Gateway gives up on it
        assert waits_ms <= INTEGRATION_TIMEOUT_MAX_MS, name
        assert function_ms < waits_ms, f"{name}: the function may run {function_ms} ms, API Gateway waits {waits_ms} ms"


def test_every_lambda_authorizer_answers_within_10_s(env_templates: dict[str, dict[str, Any]]) -> None:
    # Given every HTTP API authorizer backed by a Lambda function
    authorizers = [entry for entry in resources(env_templates, "AWS::ApiGatewayV2::Authorizer") if "AuthorizerUri" in entry[1]]
    for name, properties, template in authorizers:
        # When its function's timeout is read
        function_ms = int(function_behind(template, properties["AuthorizerUri"])["Properties"]["Timeout"]) * 1000
        # Then it is within API Gateway's 10 s for an authorizer's answer
        assert function_ms <= AUTHORIZER_TIMEOUT_MAX_MS, name
