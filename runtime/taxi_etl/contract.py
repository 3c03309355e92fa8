"""The taxi ETL saga's contract: every name that crosses layers (infra, runtime, ops, devtools,
benchmarks, tests), defined once. Constants only; it imports nothing from the project."""

from __future__ import annotations

from typing import Final

HANDLER_VALIDATE: Final = "runtime.taxi_etl.validate_handler.handler"
HANDLER_TRANSFORM: Final = "runtime.taxi_etl.transform_handler.handler"
HANDLER_STORE: Final = "runtime.taxi_etl.store_handler.handler"
HANDLER_FLAG: Final = "runtime.taxi_etl.flag_handler.handler"
HANDLER_API: Final = "runtime.taxi_etl.api_handler.handler"
HANDLER_ROW_STATE: Final = "runtime.taxi_etl.row_state_handler.handler"
HANDLER_AUTHORIZER: Final = "runtime.taxi_etl.authorizer_handler.handler"
# The bulk route (a file in the ingest bucket -> the bulk state machine: plan, a Distributed Map of chunks, report).
HANDLER_BULK_PLAN: Final = "runtime.taxi_etl.bulk_plan_handler.handler"
HANDLER_BULK_CHUNK: Final = "runtime.taxi_etl.bulk_chunk_handler.handler"
HANDLER_BULK_REPORT: Final = "runtime.taxi_etl.bulk_report_handler.handler"
HANDLER_LOADS_API: Final = "runtime.taxi_etl.loads_api_handler.handler"  # POST /loads, GET /loads/{LoadId}
HANDLER_LOAD_STARTER: Final = "runtime.taxi_etl.load_starter_handler.handler"  # SQS of the bucket's ObjectCreated events

# StoreRequestIds as requests.py makes them and row_state.py parses them: k-<Idempotency-Key>, kb-<key>-<line>, c-<hash>.
IDEMPOTENCY_KEY_PATTERN: Final = r"[A-Za-z0-9_-]{1,64}"
CONTENT_ID_HEX_CHARS: Final = 32  # c-<hash>: deterministic_id's default length

# The saga's phases as the state machine and the stack outputs name them (runtime.taxi_etl.models.Phase, title-cased).
PHASE_VALIDATION: Final = "Validation"
PHASE_TRANSFORMATION: Final = "Transformation"
PHASE_STORE: Final = "Store"
PHASES: Final = (PHASE_VALIDATION, PHASE_TRANSFORMATION, PHASE_STORE)
PHASE_HANDLERS: Final = {PHASE_VALIDATION: HANDLER_VALIDATE, PHASE_TRANSFORMATION: HANDLER_TRANSFORM, PHASE_STORE: HANDLER_STORE}

# POWERTOOLS_SERVICE_NAME of each function, the `service` dimension of its metrics.
SERVICE_VALIDATE: Final = "taxi-etl-validation"
SERVICE_TRANSFORM: Final = "taxi-etl-transformation"
SERVICE_STORE: Final = "taxi-etl-store"
SERVICE_FLAG: Final = "taxi-etl-flag"
SERVICE_API: Final = "taxi-etl-api"
SERVICE_ROW_STATE: Final = "taxi-etl-row-state"
SERVICE_AUTHORIZER: Final = "taxi-etl-authorizer"
SERVICE_BULK_PLAN: Final = "taxi-etl-bulk-plan"
SERVICE_BULK_CHUNK: Final = "taxi-etl-bulk-chunk"
SERVICE_BULK_REPORT: Final = "taxi-etl-bulk-report"
SERVICE_LOADS_API: Final = "taxi-etl-loads-api"
SERVICE_LOAD_STARTER: Final = "taxi-etl-load-starter"
PHASE_SERVICES: Final = {PHASE_VALIDATION: SERVICE_VALIDATE, PHASE_TRANSFORMATION: SERVICE_TRANSFORM, PHASE_STORE: SERVICE_STORE}

# The functions' environment (the settings classes of runtime/taxi_etl/*_wiring.py read them; the construct sets them).
ENV_STATUS_TABLE: Final = "STATUS_TABLE"
ENV_FINAL_TABLE: Final = "FINAL_TABLE"
ENV_VALIDATION_STATUS_TABLE: Final = "VALIDATION_STATUS_TABLE"
ENV_TRANSFORMATION_STATUS_TABLE: Final = "TRANSFORMATION_STATUS_TABLE"
ENV_STORE_STATUS_TABLE: Final = "STORE_STATUS_TABLE"
ENV_STATE_MACHINE_ARN: Final = "STATE_MACHINE_ARN"
ENV_WORKFLOW_TYPE: Final = "WORKFLOW_TYPE"
ENV_BATCH_MAX_LINES: Final = "BATCH_MAX_LINES"
ENV_BATCH_MAX_BYTES: Final = "BATCH_MAX_BYTES"
ENV_MAX_LINE_BYTES: Final = "MAX_LINE_BYTES"
ENV_API_KEY_SECRET_ID: Final = "API_KEY_SECRET_ID"
ENV_SECRET_CACHE_SECONDS: Final = "SECRET_CACHE_SECONDS"
ENV_SECRET_REFRESH_FLOOR_SECONDS: Final = "SECRET_REFRESH_FLOOR_SECONDS"
ENV_INGEST_BUCKET: Final = "INGEST_BUCKET"
ENV_BULK_STATE_MACHINE_ARN: Final = "BULK_STATE_MACHINE_ARN"
ENV_CHUNK_ROWS: Final = "CHUNK_ROWS"  # rows per chunk, the plan's cut

# The handlers' EMF counts (namespace from the Lambda factory, dimension `service`, plus their own where named).
METRIC_ROWS_VALIDATED: Final = "RowsValidated"
METRIC_ROWS_REJECTED_BY_VALIDATION: Final = "RowsRejectedByValidation"
METRIC_ROWS_TRANSFORMED: Final = "RowsTransformed"
METRIC_ROWS_REJECTED_BY_TRANSFORMATION: Final = "RowsRejectedByTransformation"
METRIC_ROWS_STORED: Final = "RowsStored"
METRIC_ROWS_ALREADY_STORED: Final = "RowsAlreadyStored"
METRIC_ROWS_STORED_WITH_FINDING: Final = "RowsStoredWithFinding"  # dimension `finding`
METRIC_EXECUTIONS_FLAGGED: Final = "ExecutionsFlagged"  # dimension `phase`
METRIC_ROWS_FLAGGED: Final = "RowsFlagged"  # dimensions `phase`, `reason`
METRIC_REQUESTS_DENIED: Final = "RequestsDenied"
METRIC_REQUESTS_REFUSED: Final = "RequestsRefused"
METRIC_DUPLICATE_REQUESTS: Final = "DuplicateRequests"
METRIC_EXECUTIONS_STARTED: Final = "ExecutionsStarted"
METRIC_ROWS_SUBMITTED: Final = "RowsSubmitted"
METRIC_ROW_STATES_READ: Final = "RowStatesRead"
# Rows a phase could not process for an infrastructure failure (connection, throttle, 5xx) after its retries.
METRIC_ROWS_AWAITING_REDRIVE: Final = "RowsAwaitingRedrive"  # dimension `phase`: flagged retryable, redriven after a wait
METRIC_ROWS_STILL_RETRYABLE: Final = "RowsStillRetryable"  # dimension `phase`: still failing after that one redrive (alarmed)

# Every table's key: the status tables and the trips table are keyed by the row's id.
KEY_STORE_REQUEST_ID: Final = "StoreRequestId"
ROUTE_TRIP: Final = "/trips"  # one CSV line
ROUTE_TRIP_BATCH: Final = "/trips/batch"  # a batch of lines
ROUTE_ROW_STATE: Final = "/trips/{StoreRequestId}"  # what became of one row
ROUTE_LOADS: Final = "/loads"  # start (or join) the bulk load of a file in the ingest bucket
ROUTE_LOAD: Final = "/loads/{LoadId}"  # a load's progress, then its report
KEY_LOAD_ID: Final = "LoadId"
# The ingest bucket's layout: files arrive under INGEST_PREFIX (its ObjectCreated events start loads); a load
# keeps its manifest, its chunks' summaries and its report under LOADS_PREFIX<LoadId>/.
INGEST_PREFIX: Final = "incoming/"
LOADS_PREFIX: Final = "loads/"
# The bulk state machine's state and its Chunk task's event, as the construct builds them and the bulk handlers read
# them: Plan's output is at BULK_STATE_PLAN; a chunk's event (the Distributed Map's ItemSelector) holds the load's
# fields, the file's layout at BULK_CHUNK_LAYOUT and the chunk's manifest item at BULK_CHUNK_ITEM.
BULK_STATE_PLAN: Final = "plan"
BULK_CHUNK_LAYOUT: Final = "layout"
BULK_CHUNK_ITEM: Final = "chunk"
# A load's Fail state: one static error name (a Fail state cannot re-raise a States.* name).
ERROR_LOAD_FAILED: Final = "LoadFailed"
# A file the plan cannot cut into chunks (missing, not CSV text, no trip layout): no retry can fix it.
ERROR_LOAD_INPUT: Final = "LoadInputError"
# The error a phase raises for input that is not rows; the state machine never retries it.
ERROR_PHASE_INPUT: Final = "PhaseInputError"
# The error a task raises when AWS itself failed it (a closed connection, a timeout, a throttle, a 5xx,
# unprocessed keys): not a verdict on the rows. The state machine retries it longer, then flags the
# rows retryable and redrives them once (runtime/taxi_etl/transient.py classifies; errors.py has the class).
ERROR_TRANSIENT: Final = "TransientInfrastructureError"
# StatusDetail of a row flagged for such an error (the caught error's name follows): unlike `error:<name>`
# and the rules, it is no verdict on the row, and a redrive of the same line may store it.
DETAIL_RETRYABLE_PREFIX: Final = "retryable:"
# What the state machine adds to a flag step's input: `retryable` flags the rows for the automatic
# redrive; `redriven` says that redrive has run (the rows are flagged for good); `clear` clears the flags.
FLAG_MODE_KEY: Final = "flagMode"
FLAG_MODE_RETRYABLE: Final = "retryable"
FLAG_MODE_REDRIVEN: Final = "redriven"
FLAG_MODE_CLEAR: Final = "clear"

# Stack outputs (what ops/ reads from the deployed stack); each phase's status table is "<Phase>StatusTableName".
OUTPUT_DASHBOARD: Final = "DashboardName"
OUTPUT_API_URL: Final = "ApiUrl"
OUTPUT_API_KEY_SECRET_ARN: Final = "ApiKeySecretArn"
OUTPUT_STATE_MACHINE_ARN: Final = "StateMachineArn"
OUTPUT_BULK_STATE_MACHINE_ARN: Final = "BulkStateMachineArn"
OUTPUT_INGEST_BUCKET: Final = "IngestBucketName"
OUTPUT_TRIPS_TABLE: Final = "TripsTableName"
OUTPUT_STATUS_TABLES: Final = {
    PHASE_VALIDATION: "ValidationStatusTableName",
    PHASE_TRANSFORMATION: "TransformationStatusTableName",
    PHASE_STORE: "StoreStatusTableName",
}
