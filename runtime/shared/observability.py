"""Logger, Metrics and (in the `sdk` tracing mode only) Tracer, created once for the whole package.

Every handler is wrapped with :func:`instrumented`, so the decorators are always stacked in
the same order: logging context outermost (so even a tracer or metrics failure is logged with
the request id), then tracing when the SDK is on, then metrics flushing innermost (so metrics are
flushed before the trace segment closes). Service name and metrics namespace come from the standard
POWERTOOLS_* variables that the Lambda factory sets, the tracing mode from ONCEFLOW_TRACING
(runtime/shared/contract.py).

Only the `sdk` mode creates Powertools' Tracer, and with it imports the X-Ray SDK (end of support
2027-02-25) and patches botocore. In the default `active` mode Lambda records the invocation's
segment itself, the logs still carry its trace id (Logger reads _X_AMZN_TRACE_ID), and the
function pays nothing for tracing at cold start.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from runtime.shared.contract import TracingMode
from runtime.shared.settings import tracing_mode

logger = Logger()
metrics = Metrics()
# The mode is the deployment's (the factory sets it per function), read once here like Powertools' own variables.
TRACING_MODE = tracing_mode(os.environ)


def _sdk_tracer() -> Tracer | None:
    if TRACING_MODE is not TracingMode.SDK:
        return None
    # botocore only: the handlers make no other calls worth a subsegment, and patching every library the X-Ray
    # SDK supports imports each one (http.client, sqlite3, requests...) at every cold start.
    return Tracer(patch_modules=("botocore",))


tracer = _sdk_tracer()

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

__all__ = ["TRACING_MODE", "MetricUnit", "add_dimensioned_metric", "count_metric", "instrumented", "logger", "metrics", "tracer"]


def instrumented(handler: HandlerT) -> HandlerT:
    """Apply the package's observability decorators in the one agreed order."""
    wrapped = metrics.log_metrics(handler)
    if tracer is not None:
        wrapped = tracer.capture_lambda_handler(wrapped)
    wrapped = logger.inject_lambda_context(wrapped)
    return cast(HandlerT, wrapped)  # Powertools' decorators return untyped wrappers


def add_dimensioned_metric(name: str, value: float, **dimensions: str) -> None:
    """A count with its own dimensions besides `service` (say, per phase and reason), written at once.

    `metrics` puts one dimension set on everything it flushes; a metric that alarms and
    dashboards split by other dimensions is emitted as its own EMF record instead.
    """
    if is_metrics_disabled():  # `metrics` honours POWERTOOLS_METRICS_DISABLED; single_metric prints regardless
        return
    with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=metrics.namespace) as metric:
        for dimension, dimension_value in dimensions.items():
            metric.add_dimension(name=dimension, value=dimension_value)


def count_metric(name: str, value: int) -> None:
    """A count on the package's Metrics, flushed when the instrumented handler returns."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
