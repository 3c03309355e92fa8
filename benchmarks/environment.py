"""The environment every benchmark runs in: the embedded cloud's fake credentials, and Powertools
quiet (no tracing, no metrics output, critical logs only). Set it before a handler module is
imported: Powertools reads these variables at import."""

from __future__ import annotations

import os
from typing import Final

AWS_ENV: Final = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "POWERTOOLS_METRICS_NAMESPACE": "onceflow-bench",
    "POWERTOOLS_METRICS_DISABLED": "true",
}


def apply(*, keep_existing: bool = False) -> None:
    """Set the benchmark environment; `keep_existing` leaves variables already set alone."""
    os.environ.update({name: os.environ.get(name, value) if keep_existing else value for name, value in AWS_ENV.items()})
