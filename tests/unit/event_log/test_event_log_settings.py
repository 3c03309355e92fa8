"""The event-log handlers' settings (runtime/event_log/<function>_wiring.py): read once from the environment, validated.

Every environment is a plain dict: nothing here reads os.environ.
"""

from __future__ import annotations

import pytest

from runtime.event_log.api_wiring import ApiSettings
from runtime.event_log.contract import SQS_MAX_VISIBILITY_SECONDS
from runtime.event_log.finalizer_wiring import FinalizerSettings
from runtime.event_log.pending_check import StuckRules
from runtime.event_log.pending_check_wiring import PendingCheckSettings
from runtime.event_log.router_wiring import RouterSettings
from runtime.event_log.service import LogOptions
from runtime.event_log.side_effects import RouterQueues
from runtime.event_log.snapshots import WorkerOptions
from runtime.event_log.worker_wiring import WorkerSettings
from runtime.shared.settings import SettingsError

SNAPSHOT_QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/onceflow-dev-snapshots"
PAYLOAD_QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/onceflow-dev-payloads"

API_ENV = {"LOG_TABLE": "onceflow-dev-log", "BUCKET": "onceflow-dev-logs-bucket", "PENDING_TAG": "onceflow-pending=true"}
ROUTER_ENV = {"SNAPSHOT_QUEUE_URL": SNAPSHOT_QUEUE, "PAYLOAD_QUEUE_URL": PAYLOAD_QUEUE}
WORKER_ENV = {"LOG_TABLE": "onceflow-dev-log", "PENDING_TABLE": "onceflow-dev-pending", "BUCKET": "onceflow-dev-logs-bucket"}
WORKER_ENV |= {"SNAPSHOT_QUEUE_URL": SNAPSHOT_QUEUE}
FINALIZER_ENV = {"BUCKET": "onceflow-dev-logs-bucket", "PAYLOAD_QUEUE_URL": PAYLOAD_QUEUE}
CHECK_ENV = {
    "PENDING_TABLE": "onceflow-dev-pending",
    "SNAPSHOT_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/onceflow-dev-snapshots",
    "MAX_CLAIMS_TO_RESEND": "48",
}


def without(env: dict[str, str], name: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key != name}


# --- ApiSettings --------------------------------------------------------------------------------


def test_api_settings_with_only_the_required_variables_use_the_defaults() -> None:
    # Given an environment with only the required variables
    # When the API settings are read
    settings = ApiSettings.from_env(API_ENV)
    # Then the names are kept and every tunable has its default
    assert settings == ApiSettings(
        log_table="onceflow-dev-log",
        bucket="onceflow-dev-logs-bucket",
        options=LogOptions(pending_tag="onceflow-pending=true"),
        max_value_bytes=4096,
        max_body_bytes=16_384,
        read_page_limit=1000,
    )


def test_api_settings_read_every_variable() -> None:
    # Given an environment setting every variable the API reads, as infra writes them (strings)
    env = API_ENV | {
        "SNAPSHOT_EVERY": "250",
        "MAX_VALUE_BYTES": "1000",
        "MAX_BODY_BYTES": "2000",
        "PAYLOAD_MAX_BYTES": "1048576",
        "URL_EXPIRY_SECONDS": "300",
        "READ_PAGE_LIMIT": "50",
        "PENDING_TAG": " state=pending ",
    }
    # When the settings are read
    settings = ApiSettings.from_env(env)
    # Then each value lands in its field, as an integer (the tag trimmed)
    assert settings.options == LogOptions(
        snapshot_every=250, payload_max_bytes=1_048_576, pending_tag="state=pending", url_expiry_seconds=300
    )
    assert (settings.max_value_bytes, settings.max_body_bytes, settings.read_page_limit) == (1000, 2000, 50)


def test_an_empty_optional_variable_means_its_default() -> None:
    # Given optional variables present but blank
    # When the settings are read
    settings = ApiSettings.from_env(API_ENV | {"SNAPSHOT_EVERY": "", "READ_PAGE_LIMIT": "  "})
    # Then the defaults apply
    assert settings.options.snapshot_every == LogOptions().snapshot_every and settings.read_page_limit == 1000


@pytest.mark.parametrize("name", ["LOG_TABLE", "BUCKET", "PENDING_TAG"])
def test_api_settings_require_their_variables(name: str) -> None:
    # Given the API environment without one required variable, or with it blank
    for env in (without(API_ENV, name), API_ENV | {name: ""}, API_ENV | {name: "   "}):
        # When the settings are read
        # Then SettingsError names the variable
        with pytest.raises(SettingsError, match=f"environment variable {name} is required"):
            ApiSettings.from_env(env)


@pytest.mark.parametrize(
    "tag",
    ["onceflow-pending", "=true", "onceflow-pending=", "a=1&b=2", "onceflow-pending=true&", "&a=1", "="],
    ids=["no-equals", "empty-name", "empty-value", "two-tags", "trailing-ampersand", "leading-ampersand", "only-equals"],
)
def test_a_bad_pending_tag_is_refused(tag: str) -> None:
    # Given a pending tag that is not exactly one name=value tag
    # When the API settings are read
    # Then SettingsError names PENDING_TAG and shows the value
    with pytest.raises(SettingsError) as raised:
        ApiSettings.from_env(API_ENV | {"PENDING_TAG": tag})
    assert str(raised.value) == f"PENDING_TAG must be one tag as name=value, got {tag!r}"


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("SNAPSHOT_EVERY", "0", "SNAPSHOT_EVERY must be >= 1, got 0"),
        ("SNAPSHOT_EVERY", "-5", "SNAPSHOT_EVERY must be >= 1, got -5"),
        ("SNAPSHOT_EVERY", "1000.0", "SNAPSHOT_EVERY must be an integer, got '1000.0'"),
        ("READ_PAGE_LIMIT", "many", "READ_PAGE_LIMIT must be an integer, got 'many'"),
        ("URL_EXPIRY_SECONDS", "15m", "URL_EXPIRY_SECONDS must be an integer, got '15m'"),
        ("PAYLOAD_MAX_BYTES", "0", "PAYLOAD_MAX_BYTES must be >= 1, got 0"),
    ],
)
def test_api_integers_are_validated(name: str, raw: str, message: str) -> None:
    # Given an integer setting that is not a positive integer
    # When the settings are read
    # Then SettingsError names the variable and the value
    with pytest.raises(SettingsError, match=f"environment variable {message}"):
        ApiSettings.from_env(API_ENV | {name: raw})


@pytest.mark.parametrize(
    "env",
    [
        {"MAX_VALUE_BYTES": "16384"},  # equal to the default body limit
        {"MAX_VALUE_BYTES": "20000"},  # above the default body limit
        {"MAX_BODY_BYTES": "4096"},  # the default value limit equals the body limit
        {"MAX_VALUE_BYTES": "3000", "MAX_BODY_BYTES": "2999"},
    ],
    ids=["value-equals-default-body", "value-above-default-body", "body-equals-default-value", "value-above-body"],
)
def test_the_value_limit_must_be_below_the_body_limit(env: dict[str, str]) -> None:
    # Given a value limit that leaves no room in the body for the rest of the request
    # When the API settings are read
    # Then SettingsError names both variables
    with pytest.raises(SettingsError, match="MAX_VALUE_BYTES must be below MAX_BODY_BYTES"):
        ApiSettings.from_env(API_ENV | env)


def test_a_value_limit_one_below_the_body_limit_is_accepted() -> None:
    # Given a value limit one byte under the body limit
    # When the settings are read
    settings = ApiSettings.from_env(API_ENV | {"MAX_VALUE_BYTES": "2047", "MAX_BODY_BYTES": "2048"})
    # Then they are kept
    assert (settings.max_value_bytes, settings.max_body_bytes) == (2047, 2048)


# --- RouterSettings -----------------------------------------------------------------------------


def test_router_settings_name_both_queues() -> None:
    # Given the router's environment
    # When its settings are read
    settings = RouterSettings.from_env(ROUTER_ENV)
    # Then each side effect goes to its own queue
    assert settings == RouterSettings(RouterQueues(snapshots=SNAPSHOT_QUEUE, payloads=PAYLOAD_QUEUE))


@pytest.mark.parametrize("name", ["SNAPSHOT_QUEUE_URL", "PAYLOAD_QUEUE_URL"])
def test_router_settings_require_both_queues(name: str) -> None:
    # Given the router's environment without one queue URL
    # When its settings are read
    # Then SettingsError names the missing variable
    with pytest.raises(SettingsError, match=f"environment variable {name} is required"):
        RouterSettings.from_env(without(ROUTER_ENV, name))


# --- WorkerSettings -----------------------------------------------------------------------------


def test_worker_settings_with_only_the_required_variables_use_the_defaults() -> None:
    # Given the worker's required variables
    # When its settings are read
    settings = WorkerSettings.from_env(WORKER_ENV)
    # Then the names are kept and the options are WorkerOptions' defaults
    assert settings == WorkerSettings(
        log_table="onceflow-dev-log",
        pending_table="onceflow-dev-pending",
        bucket="onceflow-dev-logs-bucket",
        options=WorkerOptions(queue_url=SNAPSHOT_QUEUE),
    )


def test_worker_settings_read_every_variable() -> None:
    # Given every worker variable set, as infra writes them
    env = WORKER_ENV | {
        "CHUNK_BYTES": "256",
        "LEASE_SECONDS": "120",
        "HANDOFF_MARGIN_MS": "45000",
        "BACKOFF_BASE_SECONDS": "3",
        "BACKOFF_CAP_SECONDS": str(SQS_MAX_VISIBILITY_SECONDS),
    }
    # When the settings are read
    options = WorkerSettings.from_env(env).options
    # Then each lands in its option (the smallest chunk and the longest backoff are allowed)
    assert options == WorkerOptions(
        queue_url=SNAPSHOT_QUEUE,
        chunk_bytes=256,
        lease_seconds=120,
        handoff_margin_ms=45_000,
        backoff_base_seconds=3,
        backoff_cap_seconds=43_200,
    )


@pytest.mark.parametrize("name", ["LOG_TABLE", "PENDING_TABLE", "BUCKET", "SNAPSHOT_QUEUE_URL"])
def test_worker_settings_require_their_variables(name: str) -> None:
    # Given the worker's environment without one required variable
    # When its settings are read
    # Then SettingsError names the variable
    with pytest.raises(SettingsError, match=f"environment variable {name} is required"):
        WorkerSettings.from_env(without(WORKER_ENV, name))


@pytest.mark.parametrize("cap", ["43201", "86400", "1000000"])
def test_a_backoff_cap_over_the_longest_visibility_timeout_is_refused(cap: str) -> None:
    # Given a backoff cap longer than SQS allows a message to stay hidden (12 hours)
    # When the worker settings are read
    # Then SettingsError names BACKOFF_CAP_SECONDS and the limit
    with pytest.raises(SettingsError, match=f"BACKOFF_CAP_SECONDS must be at most {SQS_MAX_VISIBILITY_SECONDS}"):
        WorkerSettings.from_env(WORKER_ENV | {"BACKOFF_CAP_SECONDS": cap})
    assert SQS_MAX_VISIBILITY_SECONDS == 43_200


@pytest.mark.parametrize("chunk_bytes", ["255", "1", "0", "-256"])
def test_chunk_bytes_below_256_are_refused(chunk_bytes: str) -> None:
    # Given a chunk size under 256 bytes
    # When the worker settings are read
    # Then SettingsError names CHUNK_BYTES and its minimum
    with pytest.raises(SettingsError, match=f"environment variable CHUNK_BYTES must be >= 256, got {chunk_bytes}"):
        WorkerSettings.from_env(WORKER_ENV | {"CHUNK_BYTES": chunk_bytes})


@pytest.mark.parametrize(
    ("name", "raw"), [("LEASE_SECONDS", "0"), ("HANDOFF_MARGIN_MS", "soon"), ("BACKOFF_BASE_SECONDS", "1.5"), ("BACKOFF_CAP_SECONDS", "-1")]
)
def test_worker_integers_are_validated(name: str, raw: str) -> None:
    # Given a worker tunable that is not a positive integer
    # When the settings are read
    # Then SettingsError names it
    with pytest.raises(SettingsError, match=f"environment variable {name} must be"):
        WorkerSettings.from_env(WORKER_ENV | {name: raw})


# --- FinalizerSettings --------------------------------------------------------------------------


def test_finalizer_settings() -> None:
    # Given the finalizer's environment (surrounding blanks are trimmed)
    # When its settings are read
    settings = FinalizerSettings.from_env({"BUCKET": " onceflow-dev-logs-bucket ", "PAYLOAD_QUEUE_URL": PAYLOAD_QUEUE})
    # Then it knows its bucket and the queue it changes visibility on
    assert settings == FinalizerSettings(bucket="onceflow-dev-logs-bucket", queue_url=PAYLOAD_QUEUE)


@pytest.mark.parametrize("name", ["BUCKET", "PAYLOAD_QUEUE_URL"])
def test_finalizer_settings_require_their_variables(name: str) -> None:
    # Given the finalizer's environment without one variable
    # When its settings are read
    # Then SettingsError names it
    with pytest.raises(SettingsError, match=f"environment variable {name} is required"):
        FinalizerSettings.from_env(without(FINALIZER_ENV, name))


# --- PendingCheckSettings ----------------------------------------------------------------------


def test_pending_check_settings_with_only_the_table_queue_and_cap_use_the_defaults() -> None:
    # Given the check's three required variables
    # When its settings are read
    settings = PendingCheckSettings.from_env(CHECK_ENV)
    # Then the lease is the worker's default, the threshold an hour, and stuck rows are re-sent
    assert settings == PendingCheckSettings(
        pending_table="onceflow-dev-pending",
        rules=StuckRules(lease_seconds=600, stuck_after_seconds=3600),
        resend_queue_url=CHECK_ENV["SNAPSHOT_QUEUE_URL"],
        max_claims_to_resend=48,
    )


def test_pending_check_settings_read_every_variable() -> None:
    # Given every variable the check reads, re-sending switched on
    env = CHECK_ENV | {
        "LEASE_SECONDS": "1200",
        "STUCK_AFTER_SECONDS": "6600",
        "RESEND_STUCK_SNAPSHOTS": " TRUE ",
        "SNAPSHOT_QUEUE_URL": SNAPSHOT_QUEUE,
    }
    # When the settings are read
    settings = PendingCheckSettings.from_env(env)
    # Then each lands in its field
    assert settings.rules == StuckRules(lease_seconds=1200, stuck_after_seconds=6600)
    assert settings.resend_queue_url == SNAPSHOT_QUEUE
    assert settings.max_claims_to_resend == 48


def test_the_resend_cap_is_required_while_re_sending_and_ignored_when_off() -> None:
    # Given re-sending on without the cap, or with a cap that is not a positive integer
    # Then SettingsError names the variable (infra always sets it: two queues' worth of receives)
    with pytest.raises(SettingsError, match="environment variable MAX_CLAIMS_TO_RESEND is required"):
        PendingCheckSettings.from_env(without(CHECK_ENV, "MAX_CLAIMS_TO_RESEND"))
    for bad in ("0", "-3", "lots"):
        with pytest.raises(SettingsError, match="MAX_CLAIMS_TO_RESEND must be"):
            PendingCheckSettings.from_env(CHECK_ENV | {"MAX_CLAIMS_TO_RESEND": bad})
    # Given re-sending off: no cap is needed
    off = PendingCheckSettings.from_env(without(CHECK_ENV, "MAX_CLAIMS_TO_RESEND") | {"RESEND_STUCK_SNAPSHOTS": "false"})
    assert off.resend_queue_url is None
    assert off.max_claims_to_resend == 0


def test_a_lease_longer_than_the_default_threshold_raises_the_default() -> None:
    # Given a lease over an hour and no threshold
    # When the settings are read
    rules = PendingCheckSettings.from_env(CHECK_ENV | {"LEASE_SECONDS": "5000"}).rules
    # Then the threshold is the lease (never below it)
    assert rules == StuckRules(lease_seconds=5000, stuck_after_seconds=5000)


def test_the_queue_is_only_read_when_re_sending_is_on() -> None:
    # Given re-sending switched off, with a queue URL present or not
    for env in (without(CHECK_ENV, "SNAPSHOT_QUEUE_URL"), CHECK_ENV):
        # When the settings are read
        # Then no queue is kept
        assert PendingCheckSettings.from_env(env | {"RESEND_STUCK_SNAPSHOTS": "false"}).resend_queue_url is None
    # Given re-sending on (explicitly, or by default) without a queue
    for env in (without(CHECK_ENV, "SNAPSHOT_QUEUE_URL"), without(CHECK_ENV, "SNAPSHOT_QUEUE_URL") | {"RESEND_STUCK_SNAPSHOTS": "true"}):
        # Then SettingsError names the queue variable
        with pytest.raises(SettingsError, match="environment variable SNAPSHOT_QUEUE_URL is required"):
            PendingCheckSettings.from_env(env)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "environment variable PENDING_TABLE is required"),
        ({"STUCK_AFTER_SECONDS": "599"}, r"STUCK_AFTER_SECONDS must be at least LEASE_SECONDS \(600\)"),
        ({"LEASE_SECONDS": "1200", "STUCK_AFTER_SECONDS": "900"}, r"STUCK_AFTER_SECONDS must be at least LEASE_SECONDS \(1200\)"),
        ({"STUCK_AFTER_SECONDS": "1h"}, "environment variable STUCK_AFTER_SECONDS must be an integer, got '1h'"),
        ({"LEASE_SECONDS": "0"}, "environment variable LEASE_SECONDS must be >= 1, got 0"),
        ({"RESEND_STUCK_SNAPSHOTS": "yes"}, "environment variable RESEND_STUCK_SNAPSHOTS must be true or false, got 'yes'"),
    ],
    ids=["no-table", "threshold-below-default-lease", "threshold-below-lease", "not-an-integer", "no-lease", "not-a-boolean"],
)
def test_pending_check_settings_are_validated(env: dict[str, str], message: str) -> None:
    # Given a missing table, a threshold shorter than the lease, or a malformed value
    # When the settings are read
    # Then SettingsError says which variable and why
    with pytest.raises(SettingsError, match=message):
        PendingCheckSettings.from_env((CHECK_ENV if "PENDING_TABLE" not in message else {}) | env)


def test_settings_do_not_read_unrelated_variables() -> None:
    # Given environments full of other handlers' variables with invalid values
    noise = {"CHUNK_BYTES": "1", "BACKOFF_CAP_SECONDS": "999999", "MAX_VALUE_BYTES": "x", "PENDING_TAG": "bad"}
    # When the router's and the finalizer's settings are read
    # Then they succeed: each handler validates only what it reads
    assert RouterSettings.from_env(ROUTER_ENV | noise).queues.snapshots == SNAPSHOT_QUEUE
    assert FinalizerSettings.from_env(FINALIZER_ENV | noise).bucket == "onceflow-dev-logs-bucket"
    assert PendingCheckSettings.from_env(CHECK_ENV | noise).pending_table == "onceflow-dev-pending"
