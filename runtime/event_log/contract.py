"""The event-log contract: every name that crosses layers (infra, runtime, ops, devtools,
benchmarks, tests), defined once. Constants only; it imports nothing from the project."""

from __future__ import annotations

from typing import Final

HANDLER_API: Final = "runtime.event_log.api_handler.handler"
HANDLER_ROUTER: Final = "runtime.event_log.router_handler.handler"
HANDLER_WORKER: Final = "runtime.event_log.worker_handler.handler"
HANDLER_FINALIZER: Final = "runtime.event_log.finalizer_handler.handler"
HANDLER_PENDING_CHECK: Final = "runtime.event_log.pending_check_handler.handler"

# POWERTOOLS_SERVICE_NAME of each function, the `service` dimension of its metrics.
SERVICE_API: Final = "event-log-api"
SERVICE_ROUTER: Final = "event-log-router"
SERVICE_WORKER: Final = "event-log-snapshots"
SERVICE_FINALIZER: Final = "event-log-payloads"
SERVICE_PENDING_CHECK: Final = "event-log-pending-check"

# The functions' environment (each function's runtime/event_log/<function>_wiring.py reads them; the construct sets them).
ENV_LOG_TABLE: Final = "LOG_TABLE"
ENV_PENDING_TABLE: Final = "PENDING_TABLE"
ENV_BUCKET: Final = "BUCKET"
ENV_SNAPSHOT_QUEUE_URL: Final = "SNAPSHOT_QUEUE_URL"
ENV_PAYLOAD_QUEUE_URL: Final = "PAYLOAD_QUEUE_URL"
ENV_SNAPSHOT_EVERY: Final = "SNAPSHOT_EVERY"
ENV_MAX_VALUE_BYTES: Final = "MAX_VALUE_BYTES"
ENV_MAX_BODY_BYTES: Final = "MAX_BODY_BYTES"
ENV_PAYLOAD_MAX_BYTES: Final = "PAYLOAD_MAX_BYTES"
ENV_PENDING_TAG: Final = "PENDING_TAG"
ENV_URL_EXPIRY_SECONDS: Final = "URL_EXPIRY_SECONDS"
ENV_READ_PAGE_LIMIT: Final = "READ_PAGE_LIMIT"
ENV_CHUNK_BYTES: Final = "CHUNK_BYTES"
ENV_LEASE_SECONDS: Final = "LEASE_SECONDS"
# A snapshot worker's claim lease when LEASE_SECONDS is unset; the stuck-pending check assumes the same.
DEFAULT_LEASE_SECONDS: Final = 600
ENV_HANDOFF_MARGIN_MS: Final = "HANDOFF_MARGIN_MS"
ENV_BACKOFF_BASE_SECONDS: Final = "BACKOFF_BASE_SECONDS"
ENV_BACKOFF_CAP_SECONDS: Final = "BACKOFF_CAP_SECONDS"
ENV_STUCK_AFTER_SECONDS: Final = "STUCK_AFTER_SECONDS"
ENV_RESEND_STUCK_SNAPSHOTS: Final = "RESEND_STUCK_SNAPSHOTS"
ENV_MAX_CLAIMS_TO_RESEND: Final = "MAX_CLAIMS_TO_RESEND"

# The handlers' EMF counts and measures (namespace from the Lambda factory, dimension `service`).
METRIC_APPENDS: Final = "Appends"
METRIC_DUPLICATE_APPENDS: Final = "DuplicateAppends"
METRIC_INVALID_REQUESTS: Final = "InvalidRequests"
METRIC_APPEND_CONFLICTS: Final = "AppendConflicts"
METRIC_SIDE_EFFECTS_SENT: Final = "SideEffectsSent"
METRIC_POISON_MESSAGES: Final = "PoisonMessages"
METRIC_PAYLOADS_FINALIZED: Final = "PayloadsFinalized"
METRIC_SNAPSHOT_CHUNKS_WRITTEN: Final = "SnapshotChunksWritten"
METRIC_SNAPSHOT_BUILD_SECONDS: Final = "SnapshotBuildSeconds"
METRIC_OLDEST_PENDING_SNAPSHOT_AGE: Final = "OldestPendingSnapshotAgeSeconds"
METRIC_PENDING_SNAPSHOTS: Final = "PendingSnapshots"
METRIC_STUCK_PENDING_SNAPSHOTS: Final = "StuckPendingSnapshots"
METRIC_STUCK_SNAPSHOTS_RESENT: Final = "StuckSnapshotsResent"
# The worker's count per message outcome (runtime.event_log.snapshots.Outcome value -> metric).
METRIC_SNAPSHOT_OUTCOMES: Final = {
    "built": "SnapshotsBuilt",
    "already_built": "SnapshotsAlreadyBuilt",
    "duplicate": "SnapshotsDuplicate",
    "deferred": "SnapshotsDeferred",
    "handed_off": "SnapshotsHandedOff",
    "superseded": "SnapshotsSuperseded",
}

# Tables: the log (log_id, seq) with its segment index (segment_key, cell_order); pending snapshots (log_id, seq).
KEY_LOG_ID: Final = "log_id"
KEY_SEQ: Final = "seq"
INDEX_SEGMENT_EVENTS: Final = "SegmentEvents"
KEY_SEGMENT: Final = "segment_key"
KEY_CELL_ORDER: Final = "cell_order"
# The log entries whose stream records reach the router (runtime.event_log.entries.SIDE_EFFECT_KINDS).
SIDE_EFFECT_KINDS: Final = ("Snapshot", "LargePayload")
# The bucket's prefixes: large payloads and snapshot chunks.
PAYLOADS_PREFIX: Final = "payloads/"
SNAPSHOTS_PREFIX: Final = "snapshots/"

# Stack outputs (what ops/ reads from the deployed stack).
OUTPUT_DASHBOARD: Final = "DashboardName"
OUTPUT_API_URL: Final = "ApiUrl"
OUTPUT_LOG_TABLE: Final = "LogTableName"
OUTPUT_BUCKET: Final = "BucketName"
OUTPUT_PENDING_TABLE: Final = "PendingTableName"
OUTPUT_SNAPSHOT_QUEUE_URL: Final = "SnapshotQueueUrl"
OUTPUT_PAYLOAD_QUEUE_URL: Final = "PayloadQueueUrl"

# Limits both the config (at synth) and the settings (at cold start) enforce.
SQS_MAX_VISIBILITY_SECONDS: Final = 12 * 3600  # SQS's longest visibility timeout: the worker's backoff ceiling
