"""Queries on synthesized templates that the stack-property tests share: resources, functions,
their roles and log groups, IAM grants as (resource, condition) -> actions, an environment
that records which variables a settings class reads, and the handlers the three pipelines deploy."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from devtools.aws.template_resources import find_function
from runtime.event_log import contract as event_log_contract
from runtime.runner_stats import contract as runner_stats_contract
from runtime.taxi_etl import contract as taxi_etl_contract

Grants = dict[tuple[str, str | None], set[str]]

# Every function's handler ("module.function") in the three pipelines' templates.
EVERY_HANDLER = frozenset(
    {
        runner_stats_contract.HANDLER,
        event_log_contract.HANDLER_API,
        event_log_contract.HANDLER_ROUTER,
        event_log_contract.HANDLER_WORKER,
        event_log_contract.HANDLER_FINALIZER,
        event_log_contract.HANDLER_PENDING_CHECK,
        taxi_etl_contract.HANDLER_API,
        taxi_etl_contract.HANDLER_ROW_STATE,
        taxi_etl_contract.HANDLER_AUTHORIZER,
        taxi_etl_contract.HANDLER_FLAG,
        *taxi_etl_contract.PHASE_HANDLERS.values(),
        taxi_etl_contract.HANDLER_BULK_PLAN,
        taxi_etl_contract.HANDLER_BULK_CHUNK,
        taxi_etl_contract.HANDLER_BULK_REPORT,
        taxi_etl_contract.HANDLER_LOADS_API,
        taxi_etl_contract.HANDLER_LOAD_STARTER,
    }
)


def arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def ref(logical_id: str) -> dict[str, Any]:
    return {"Ref": logical_id}


def sdk_layer_ref(template_json: dict[str, Any]) -> dict[str, Any]:
    """The reference to the stack's one layer version, the SDK layer (lambda_factory.sdk_layer), as a function's Layers holds it."""
    (logical_id,) = [logical_id for logical_id, body in template_json["Resources"].items() if body["Type"] == "AWS::Lambda::LayerVersion"]
    return ref(logical_id)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def key(value: Any) -> str:
    """A hashable, order-independent form of a template value (a resource ARN expression, a condition)."""
    return json.dumps(value, sort_keys=True)


def resource(template_json: dict[str, Any], logical_id: str, resource_type: str) -> dict[str, Any]:
    found = template_json["Resources"].get(logical_id)
    assert found is not None, f"no resource {logical_id}"
    assert found["Type"] == resource_type, f"{logical_id} is a {found['Type']}, not a {resource_type}"
    return dict(found)


def function(template_json: dict[str, Any], handler: str) -> tuple[str, dict[str, Any]]:
    logical_id = find_function(template_json, handler)
    return logical_id, template_json["Resources"][logical_id]


def variables_of(template_json: dict[str, Any], handler: str) -> dict[str, Any]:
    """The function's environment variables as synthesized (values may be Ref / Fn::GetAtt)."""
    return dict(function(template_json, handler)[1]["Properties"]["Environment"]["Variables"])


def resolved_environment(template_json: dict[str, Any], handler: str) -> dict[str, str]:
    """The function's environment with every Ref / Fn::GetAtt replaced by a dummy string."""
    return {
        name: value if isinstance(value, str) else f"dummy-{name.lower()}" for name, value in variables_of(template_json, handler).items()
    }


def log_group_of(template_json: dict[str, Any], handler: str) -> str:
    _, fn = function(template_json, handler)
    return str(fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"])


def role_of(template_json: dict[str, Any], handler: str) -> str:
    _, fn = function(template_json, handler)
    return str(fn["Properties"]["Role"]["Fn::GetAtt"][0])


def unconditional(*grants: tuple[Any, set[str]]) -> Grants:
    """(resource, actions) pairs as grants without a condition; each resource named once."""
    result: Grants = {(key(res), None): set(actions) for res, actions in grants}
    assert len(result) == len(grants), "a resource listed twice"
    return result


class RecordingEnvironment(dict[str, str]):
    """An environment that remembers every name it was asked for."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(name)
        return super().get(name, default)

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        self.read.add(str(name))
        return super().__contains__(name)

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("a settings class must read its variables by name, not iterate the environment")
