"""The runner-stats contract: every name that crosses layers (infra, runtime, ops, devtools,
benchmarks, tests), defined once. Constants only; it imports nothing from the project."""

from __future__ import annotations

from typing import Final

HANDLER: Final = "runtime.runner_stats.handler.handler"
SERVICE: Final = "runner-stats"  # POWERTOOLS_SERVICE_NAME, the `service` dimension of its metrics

# The function's environment (runtime/runner_stats/settings.py reads them; the construct sets them).
ENV_RUN_STATS_TABLE: Final = "RUN_STATS_TABLE"
ENV_TENDENCY_TABLE: Final = "TENDENCY_TABLE"
ENV_MESSAGES_TABLE: Final = "MESSAGES_TABLE"
ENV_REJECTS_TABLE: Final = "REJECTS_TABLE"
ENV_GAP_MAX_LAG: Final = "GAP_MAX_LAG"
ENV_GAP_MAX_OPEN: Final = "GAP_MAX_OPEN"
ENV_ARCHIVE_CHUNK_SIZE: Final = "ARCHIVE_CHUNK_SIZE"
ENV_COMMIT_ATTEMPTS: Final = "COMMIT_ATTEMPTS"
ENV_MAX_MESSAGE_BYTES: Final = "MAX_MESSAGE_BYTES"
ENV_REJECT_PAYLOAD_MAX_BYTES: Final = "REJECT_PAYLOAD_MAX_BYTES"
ENV_TIMESTAMP_MAX_AGE_SECONDS: Final = "TIMESTAMP_MAX_AGE_SECONDS"
ENV_TIMESTAMP_MAX_AHEAD_SECONDS: Final = "TIMESTAMP_MAX_AHEAD_SECONDS"
ENV_IO_CONCURRENCY: Final = "IO_CONCURRENCY"

# The handler's EMF counts (namespace from the Lambda factory, dimension `service`).
METRIC_ACCEPTED_MESSAGES: Final = "AcceptedMessages"
METRIC_DUPLICATE_MESSAGES: Final = "DuplicateMessages"
METRIC_STALE_MESSAGES: Final = "StaleMessages"
METRIC_SUSPECT_JUMPS: Final = "SuspectJumps"
METRIC_REJECTED_RECORDS: Final = "RejectedRecords"
METRIC_COMMIT_RETRIES: Final = "CommitRetries"
METRIC_GAPS_CLOSED: Final = "GapsClosed"

# Table keys: run stats (user_id, run_id); tendency (user_id); messages archive (run_key, chunk); rejects (record_id).
KEY_USER_ID: Final = "user_id"
KEY_RUN_ID: Final = "run_id"
KEY_RUN_KEY: Final = "run_key"
KEY_CHUNK: Final = "chunk"
KEY_RECORD_ID: Final = "record_id"

# Stack outputs (what ops/ reads from the deployed stack).
OUTPUT_STREAM_NAME: Final = "StreamName"
OUTPUT_RUN_STATS_TABLE: Final = "RunStatsTableName"
OUTPUT_TENDENCY_TABLE: Final = "TendencyTableName"
OUTPUT_MESSAGES_TABLE: Final = "MessagesTableName"
OUTPUT_DASHBOARD: Final = "DashboardName"

# Limits both the config (at synth) and the settings (at cold start) enforce.
ARCHIVE_CHUNK_SIZE_MAX: Final = 40  # messages per archive chunk; keeps the run item near 1 KB
IO_CONCURRENCY_MAX: Final = 64  # users processed at once in one invocation (threads, and connections per client)
