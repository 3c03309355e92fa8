"""Logger, Tracer and Metrics, created once for the whole package.

Every handler is wrapped with :func:`instrumented`, so the decorators are always stacked in
the same order: logging context outermost (so even a tracer or metrics failure is logged with
the request id), then tracing, then metrics flushing innermost (so metrics are flushed before
the trace segment closes). Service name and metrics namespace come from the standard
POWERTOOLS_* variables that the Lambda factory sets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

logger = Logger()
# botocore only: the handlers make no other calls worth a subsegment, and patching every library the X-Ray
# SDK supports imports each one (http.client, sqlite3, requests...) at every cold start.
tracer = Tracer(patch_modules=("botocore",))
metrics = Metrics()

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])

__all__ = ["MetricUnit", "add_dimensioned_metric", "count_metric", "instrumented", "logger", "metrics", "tracer"]


def instrumented(handler: HandlerT) -> HandlerT:
    """Apply the package's observability decorators in the one agreed order."""
    wrapped = metrics.log_metrics(handler)
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
