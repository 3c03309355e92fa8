"""What CloudWatch Logs and X-Ray bill for the taxi saga, from what a run produced (pure helpers of `make bench`).

Step Functions logs: one CloudWatch log event per execution-history event the configured level
lets through, shaped as Step Functions writes them (`id`, `type`, `details`, `previous_event_id`,
`event_timestamp`, `execution_arn`, `redrive_count`). Without execution data, `details` keeps no
input, output or task parameters. ERROR lets through only the failure events (a `*Failed`,
`*TimedOut` or `*Aborted` event, and entering a Fail state); FATAL only the execution's own end in
failure. CloudWatch Logs counts each event as its UTF-8 bytes plus 26.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CLOUDWATCH_EVENT_OVERHEAD_BYTES = 26  # what PutLogEvents counts per event on top of its message
LOG_LEVELS = ("ALL", "ERROR", "FATAL", "OFF")
FATAL_EVENTS = frozenset({"ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"})
# Execution data: what the state machine was given and produced (rows, verdicts, parameters).
DATA_FIELDS = frozenset({"input", "inputDetails", "output", "outputDetails", "parameters"})
GIB = 1024**3
DAYS_PER_MONTH = 30.4


def is_error_event(event_type: str) -> bool:
    """What Step Functions logs at level ERROR: failures, time-outs, aborts and entering a Fail state."""
    return event_type == "FailStateEntered" or event_type.endswith(("Failed", "TimedOut", "Aborted"))


def is_logged(level: str, event_type: str) -> bool:
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    if level == "ALL":
        return True
    if level == "ERROR":
        return is_error_event(event_type)
    if level == "FATAL":
        return event_type in FATAL_EVENTS
    return False


def _details(event: Mapping[str, Any], include_data: bool) -> dict[str, Any]:
    details: dict[str, Any] = {}
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, Mapping):
            details.update(value)
    if not include_data:
        details = {key: value for key, value in details.items() if key not in DATA_FIELDS}
    return details


def _milliseconds(timestamp: Any) -> str:
    if hasattr(timestamp, "timestamp"):
        return str(int(timestamp.timestamp() * 1000))
    return str(timestamp)


def execution_log_messages(history: Iterable[Mapping[str, Any]], execution_arn: str, level: str, include_data: bool) -> list[str]:
    """The CloudWatch log messages one execution's history becomes at `level`, with or without its data."""
    return [
        json.dumps(
            {
                "id": str(event["id"]),
                "type": event["type"],
                "details": _details(event, include_data),
                "previous_event_id": str(event.get("previousEventId", 0)),
                "event_timestamp": _milliseconds(event.get("timestamp", 0)),
                "execution_arn": execution_arn,
                "redrive_count": "0",
            },
            separators=(",", ":"),
        )
        for event in history
        if is_logged(level, str(event["type"]))
    ]


def ingested_bytes(messages: Iterable[str]) -> int:
    """What CloudWatch Logs bills as ingested for these log events."""
    return sum(len(message.encode("utf-8")) + CLOUDWATCH_EVENT_OVERHEAD_BYTES for message in messages)


_CONTEXT_VARIABLE = re.compile(r"\$context\.[A-Za-z.]+")


def access_log_line(log_format: str, values: Mapping[str, str]) -> str:
    """One API access-log line: the stage's format with each `$context.*` variable replaced (`-` when unknown)."""
    return _CONTEXT_VARIABLE.sub(lambda match: values.get(match.group(0), "-"), log_format)


@dataclass(frozen=True)
class LogPrices:
    ingestion_per_gib: float  # CloudWatch Logs (and vended logs' first tier)
    storage_per_gib_month: float  # billed on the compressed size; priced here on the raw size, an upper bound

    def cost(self, ingested: float, retention_days: float) -> float:
        """Ingesting `ingested` bytes and keeping them for `retention_days`."""
        gib = ingested / GIB
        return gib * (self.ingestion_per_gib + self.storage_per_gib_month * retention_days / DAYS_PER_MONTH)


@dataclass(frozen=True)
class TracePrices:
    recorded: float  # per trace
    retrieved: float  # per trace, each counted as retrieved once

    def cost(self, traces: float, sampled: float = 1.0) -> float:
        """`traces` requests traced, of which the share `sampled` is recorded."""
        if not 0.0 <= sampled <= 1.0:
            raise ValueError(f"a sampled share is 0..1, not {sampled}")
        return traces * sampled * (self.recorded + self.retrieved)


def default_sampling_share(requests_per_second: float, reservoir: float = 1.0, rate: float = 0.05) -> float:
    """The share X-Ray's default rule records: the first request each second, then 5 % of the rest."""
    if requests_per_second <= reservoir:
        return 1.0
    return (reservoir + rate * (requests_per_second - reservoir)) / requests_per_second


def resent_requests(requests: int, rows_per_request: int, share: float) -> int:
    """How many whole requests to send again so that exactly `share` of the rows are re-sent.

    Raises ValueError when no whole number of requests makes that share (say 5 % of 10 requests).
    """
    rows = requests * rows_per_request
    wanted_rows = share * rows
    count = round(wanted_rows / rows_per_request)
    if count < 1 or abs(count * rows_per_request - wanted_rows) > 1e-9 * rows:
        raise ValueError(
            f"{share:.1%} of {rows} rows is not a whole number of requests of {rows_per_request} rows "
            f"({wanted_rows / rows_per_request:g} requests); choose another row count"
        )
    return count
