"""Cold start: importing a handler module leaves Powertools' event handler out (the HTTP handlers
route with runtime/shared/http.py's router); in the default tracing mode (`active`: Lambda traces, no SDK in the function) no handler
imports the X-Ray SDK; in the `sdk` mode the Tracer is created, and botocore patched, at import (in
Lambda's init phase, which provisioned concurrency and SnapStart pay ahead of any request), and every
invocation of an instrumented handler is traced through the same layers in the same order (logging
context, tracing, metrics flushing innermost).

Each check that depends on what is imported runs in a fresh interpreter, so sys.modules starts empty.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode
from tests.unit.test_entry_points import handler_paths

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MARK = "@@result "
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

IMPORT_PROBE = """
import importlib, json, sys
module = importlib.import_module(sys.argv[1])
from runtime.shared import observability
print(MARK + json.dumps({
    "xray": sorted(name for name in sys.modules if name.split(".")[0] == "aws_xray_sdk"),
    "tracer_created": type(observability.tracer).__name__ == "Tracer",
    "mode": observability.TRACING_MODE.value,
    "event_handler": "aws_lambda_powertools.event_handler" in sys.modules,
}))
"""

# Every handler module given, imported one after the other into one interpreter; what was loaded
# after each. For what must NOT be imported, this finds what one fresh interpreter per module would:
# a module's import loads what it needs that is not loaded yet, so whatever a handler would pull in
# on its own is present right after its own import at the latest (and the first handler that pulls
# it in is named).
IMPORTS_PROBE = """
import importlib, json, sys
after = {}
for module in sys.argv[1:]:
    importlib.import_module(module)
    from runtime.shared import observability
    after[module] = {
        "xray": sorted(name for name in sys.modules if name.split(".")[0] == "aws_xray_sdk"),
        "tracer_created": type(observability.tracer).__name__ == "Tracer",
        "mode": observability.TRACING_MODE.value,
        "event_handler": "aws_lambda_powertools.event_handler" in sys.modules,
    }
print(MARK + json.dumps(after))
"""

# A handler wrapped by `instrumented`, invoked twice. The X-Ray recorder sends to a list instead of
# the daemon; the handler body makes one (stubbed) SQS call through boto3.
INVOCATION_PROBE = """
import json, sys
from runtime.shared import observability
from runtime.shared.observability import instrumented, logger, metrics

seen = {"body": [], "flushed_inside": []}

def body(event, context):
    import boto3
    from botocore.stub import Stubber
    from aws_xray_sdk.core import xray_recorder
    entity = xray_recorder.get_trace_entity()
    seen["body"].append({"trace_entity": entity.name, "request_id": logger.get_current_keys().get("function_request_id")})
    client = boto3.client("sqs", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_response("list_queues", {"QueueUrls": []})
        client.list_queues()
    metrics.add_metric(name="Probe", unit="Count", value=1)
    return {"ok": True}

handler = instrumented(body)
before = {
    "xray_imported": "aws_xray_sdk.core" in sys.modules,
    "tracer_created": type(observability.tracer).__name__ == "Tracer",
}
layers = [handler, handler.__wrapped__, handler.__wrapped__.__wrapped__]
layer_files = [layer.__code__.co_filename.replace("\\\\", "/") for layer in layers]
innermost_is_body = handler.__wrapped__.__wrapped__.__wrapped__ is body

from aws_xray_sdk.core import patcher, xray_recorder

class Emitted:
    def __init__(self):
        self.entities = []
    def send_entity(self, entity):
        self.entities.append(json.loads(entity.serialize()))
    def set_daemon_address(self, address):
        pass

emitted = Emitted()
xray_recorder.configure(emitter=emitted)
before["patched"] = sorted(patcher._PATCHED_MODULES)

flush = metrics.provider.flush_metrics
def flush_and_note(*args, **kwargs):
    seen["flushed_inside"].append(xray_recorder.get_trace_entity().name)
    return flush(*args, **kwargs)
metrics.provider.flush_metrics = flush_and_note

class Context:
    function_name = "probe"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:probe"
    aws_request_id = "request-1"

handler({}, Context())
first_tracer = observability.tracer
after_first = {"tracer_created": True, "patched": sorted(patcher._PATCHED_MODULES)}
handler({}, Context())
print(MARK + json.dumps({
    "before": before,
    "after_first": after_first,
    "same_tracer": observability.tracer is first_tracer,
    "tracer_disabled": bool(first_tracer.disabled),
    "tracer_provider": type(first_tracer.provider).__module__,
    "layer_files": layer_files,
    "innermost_is_body": innermost_is_body,
    "seen": seen,
    "entities": emitted.entities,
}))
"""


# The default mode's handler: logging context, then metrics, then the body; no tracing layer.
ACTIVE_MODE_PROBE = """
import json, os, sys
from runtime.shared import observability
from runtime.shared.observability import instrumented, logger

import io, logging
captured = io.StringIO()
logger.addHandler(logging.StreamHandler(captured))
for handler_ in logger.handlers:
    handler_.setFormatter(logger.registered_formatter)

def body(event, context):
    logger.warning("probe-line")
    line = json.loads([text for text in captured.getvalue().splitlines() if "probe-line" in text][-1])
    return {"trace_id": line.get("xray_trace_id"), "request_id": line.get("function_request_id")}

handler = instrumented(body)
layers = [handler, handler.__wrapped__]

class Context:
    function_name = "probe"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:probe"
    aws_request_id = "request-1"

print(MARK + json.dumps({
    "mode": observability.TRACING_MODE.value,
    "tracer": observability.tracer is not None,
    "layer_files": [layer.__code__.co_filename.replace("\\\\", "/") for layer in layers],
    "innermost_is_body": handler.__wrapped__.__wrapped__ is body,
    "result": handler({}, Context()),
    "xray": sorted(name for name in sys.modules if name.split(".")[0] == "aws_xray_sdk"),
}))
"""


def lambda_like_environment(*, tracing: bool, mode: TracingMode | str | None = TracingMode.SDK) -> dict[str, str]:
    """This process's environment as Lambda would have it; without POWERTOOLS_TRACE_DISABLED when tracing, and
    with the factory's tracing-mode variable (none at all when `mode` is None)."""
    dropped = ("POWERTOOLS_TRACE_DISABLED", "PYTHONPATH", TRACING_MODE_VARIABLE)
    env = {name: value for name, value in os.environ.items() if name not in dropped}
    env.update(
        {
            "PYTHONPATH": str(PROJECT_ROOT),
            "LAMBDA_TASK_ROOT": str(PROJECT_ROOT),
            "AWS_LAMBDA_FUNCTION_NAME": "probe",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "_X_AMZN_TRACE_ID": TRACE_HEADER,
            "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "POWERTOOLS_SERVICE_NAME": "probe",
            "POWERTOOLS_METRICS_NAMESPACE": "onceflow-tests",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )
    if not tracing:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    if mode is not None:
        env[TRACING_MODE_VARIABLE] = str(mode.value if isinstance(mode, TracingMode) else mode)
    return env


def run_probe(code: str, *argv: str, tracing: bool, mode: TracingMode | None = TracingMode.SDK) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", f"MARK = {MARK!r}\n{code}", *argv],
        capture_output=True,
        text=True,
        env=lambda_like_environment(tracing=tracing, mode=mode),
        cwd=PROJECT_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [line[len(MARK) :] for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert len(results) == 1, done.stdout[-3000:]
    return json.loads(results[0])  # type: ignore[no-any-return]


NO_SDK_MODES = [None, TracingMode.ACTIVE, TracingMode.OTEL, TracingMode.OFF]


@pytest.mark.parametrize("mode", NO_SDK_MODES, ids=lambda mode: getattr(mode, "value", "unset"))
def test_no_handler_imports_the_xray_sdk_outside_the_sdk_mode(mode: TracingMode | None) -> None:
    # Given a fresh interpreter in a Lambda-like environment, tracing not disabled for Powertools, in the default
    # mode as the factory sets it (or with no mode variable at all, as a function built elsewhere), or OTEL or OFF
    modules = [path.rpartition(".")[0] for path in handler_paths()]
    # When every handler module is imported, as Lambda's init phase does, one after the other
    imported = run_probe(IMPORTS_PROBE, *modules, tracing=True, mode=mode)
    assert list(imported) == modules
    for module, after in imported.items():
        # Then, after each, no module of the X-Ray SDK was imported, and no Tracer created
        assert after["xray"] == [], module
        assert after["tracer_created"] is False, module
        assert after["mode"] == (mode or TracingMode.ACTIVE).value, module
        # And Powertools' event handler is not loaded, not even by the HTTP handlers (runtime/shared/http.py routes)
        assert after["event_handler"] is False, module


@pytest.mark.parametrize("path", handler_paths())
def test_in_the_sdk_mode_importing_a_handler_module_creates_the_tracer(path: str) -> None:
    # Given a fresh interpreter in a Lambda-like environment in the SDK mode
    module = path.rpartition(".")[0]
    # When the handler module is imported
    imported = run_probe(IMPORT_PROBE, module, tracing=True, mode=TracingMode.SDK)
    # Then the Tracer exists, with the X-Ray SDK: tracing is ready before the first request
    assert imported["tracer_created"] is True
    assert "aws_xray_sdk.core" in imported["xray"]
    assert imported["mode"] == "sdk"


def test_in_the_default_mode_the_handler_is_wrapped_by_logging_and_metrics_and_logs_the_trace_id() -> None:
    # Given an instrumented handler in a fresh interpreter in the default mode, with Lambda's trace header set
    # When it is invoked
    result = run_probe(ACTIVE_MODE_PROBE, tracing=True, mode=TracingMode.ACTIVE)
    # Then there is no tracer and no tracing layer: Powertools' logging context, its metrics flush, the body
    assert result["mode"] == "active"
    assert result["tracer"] is False
    logging_layer, metrics_layer = result["layer_files"]
    assert logging_layer.endswith("aws_lambda_powertools/logging/logger.py")
    assert metrics_layer.endswith("aws_lambda_powertools/metrics/provider/base.py")
    assert result["innermost_is_body"] is True
    # And the logs still carry Lambda's trace id, so a log line leads to its trace in X-Ray
    assert result["result"] == {"trace_id": "1-5759e988-bd862e3fe1be46a994272793", "request_id": "request-1"}
    # And nothing of the X-Ray SDK was imported, invocation included
    assert result["xray"] == []


def test_an_unknown_tracing_mode_stops_the_cold_start_with_a_clear_error() -> None:
    # Given a function whose tracing-mode variable holds no mode
    done = subprocess.run(
        [sys.executable, "-c", "import runtime.shared.observability"],
        capture_output=True,
        text=True,
        env=lambda_like_environment(tracing=True, mode="xray"),
        cwd=PROJECT_ROOT,
        timeout=120,
        check=False,
    )
    # When the package's observability is imported, Then the import fails naming the variable and the choices
    assert done.returncode != 0
    assert f"environment variable {TRACING_MODE_VARIABLE} must be one of active, sdk, otel, off, got 'xray'" in done.stderr


def test_every_invocation_is_traced_with_botocore_patched_at_import() -> None:
    # Given an instrumented handler in a fresh interpreter in the SDK mode with tracing on, whose body calls SQS once
    # When it is invoked twice
    result = run_probe(INVOCATION_PROBE, tracing=True)
    # Then before the first invocation the Tracer existed, enabled, on the X-Ray recorder, with botocore patched
    assert result["before"]["xray_imported"] is True
    assert result["before"]["tracer_created"] is True
    assert "botocore" in result["before"]["patched"]
    assert result["tracer_disabled"] is False
    assert result["tracer_provider"].startswith("aws_xray_sdk")
    assert result["same_tracer"] is True
    # And each invocation ran inside its own `## body` subsegment, with the request id in the logging context
    assert result["seen"]["body"] == [{"trace_entity": "## body", "request_id": "request-1"}] * 2
    handler_segments = [entity for entity in result["entities"] if entity["name"] == "## body"]
    assert [entity["annotations"]["ColdStart"] for entity in handler_segments] == [True, False]
    assert all(entity["trace_id"] == "1-5759e988-bd862e3fe1be46a994272793" for entity in handler_segments)
    # And each SQS call was traced by the patched botocore, as a subsegment of that invocation's
    sqs_calls = [entity for entity in result["entities"] if entity.get("namespace") == "aws"]
    assert [call["aws"]["operation"] for call in sqs_calls] == ["ListQueues", "ListQueues"]
    assert [call["parent_id"] for call in sqs_calls] == [entity["id"] for entity in handler_segments]
    # And metrics were flushed inside the trace subsegment (metrics innermost, tracing around them)
    assert result["seen"]["flushed_inside"] == ["## body", "## body"]


def test_the_layers_stay_in_the_agreed_order() -> None:
    # Given an instrumented handler in a fresh interpreter in the SDK mode, with POWERTOOLS_TRACE_DISABLED set
    # When it is invoked twice
    result = run_probe(INVOCATION_PROBE, tracing=False)
    # Then the wrappers are, outside in: Powertools' logging context, its tracer, its metrics flush, the body
    logging_layer, tracing_layer, metrics_layer = result["layer_files"]
    assert logging_layer.endswith("aws_lambda_powertools/logging/logger.py")
    assert tracing_layer.endswith("aws_lambda_powertools/tracing/tracer.py")
    assert metrics_layer.endswith("aws_lambda_powertools/metrics/provider/base.py")
    assert result["innermost_is_body"] is True
    # And the one Tracer is disabled, as POWERTOOLS_TRACE_DISABLED asks: it patched nothing and sent nothing,
    # while the logging context was still set
    assert result["tracer_disabled"] is True
    assert result["same_tracer"] is True
    assert result["before"]["patched"] == []
    assert result["entities"] == []
    assert [seen["request_id"] for seen in result["seen"]["body"]] == ["request-1", "request-1"]
