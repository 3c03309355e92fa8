"""The taxi saga handlers' settings (the settings classes of runtime/taxi_etl/*_wiring.py): read once from a plain dict, validated.

Nothing here reads os.environ.
"""

from __future__ import annotations

import pytest

from runtime.shared.settings import SettingsError
from runtime.taxi_etl.api_wiring import ApiSettings
from runtime.taxi_etl.authorizer_wiring import AuthorizerSettings
from runtime.taxi_etl.flag_wiring import FlagSettings
from runtime.taxi_etl.phase_wiring import PhaseSettings
from runtime.taxi_etl.row_state_wiring import RowStateSettings
from runtime.taxi_etl.store_wiring import StoreSettings

STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:onceflow-dev-taxi"
PHASE_ENV = {"STATUS_TABLE": "onceflow-dev-validation-status"}
STORE_ENV = {"STATUS_TABLE": "onceflow-dev-store-status", "FINAL_TABLE": "onceflow-dev-trips"}
FLAG_ENV = {
    "VALIDATION_STATUS_TABLE": "onceflow-dev-validation-status",
    "TRANSFORMATION_STATUS_TABLE": "onceflow-dev-transformation-status",
    "STORE_STATUS_TABLE": "onceflow-dev-store-status",
    "FINAL_TABLE": "onceflow-dev-trips",
}
# The API reads the row's four tables (as GET /trips/{id} does) before a single unkeyed row starts.
API_ENV = {"STATE_MACHINE_ARN": STATE_MACHINE_ARN, "WORKFLOW_TYPE": "STANDARD"} | FLAG_ENV
AUTHORIZER_ENV = {"API_KEY_SECRET_ID": "onceflow/dev/taxi-api-key"}


def without(env: dict[str, str], name: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key != name}


# --- PhaseSettings, StoreSettings, FlagSettings ---------------------------------------------------


def test_phase_settings_read_the_status_table() -> None:
    # Given the validate/transform environment, the name with stray blanks
    # When it is read
    settings = PhaseSettings.from_env({"STATUS_TABLE": "  onceflow-dev-validation-status "})
    # Then the table name is kept, trimmed
    assert settings == PhaseSettings(status_table="onceflow-dev-validation-status")


@pytest.mark.parametrize("env", [{}, {"STATUS_TABLE": ""}, {"STATUS_TABLE": "   "}])
def test_phase_settings_without_a_status_table_name_the_variable(env: dict[str, str]) -> None:
    # Given no status table, or a blank one
    # When the settings are read
    # Then the error names the variable
    with pytest.raises(SettingsError, match="STATUS_TABLE"):
        PhaseSettings.from_env(env)


def test_store_settings_read_both_tables() -> None:
    # Given the store environment
    # When it is read
    # Then both tables land in their fields
    assert StoreSettings.from_env(STORE_ENV) == StoreSettings(status_table="onceflow-dev-store-status", final_table="onceflow-dev-trips")


@pytest.mark.parametrize("name", sorted(STORE_ENV))
def test_store_settings_missing_a_table_name_it(name: str) -> None:
    # Given the store environment without one table
    # When it is read
    # Then the error names the missing variable
    with pytest.raises(SettingsError, match=name):
        StoreSettings.from_env(without(STORE_ENV, name))


def test_flag_settings_read_the_four_tables() -> None:
    # Given the flag environment
    # When it is read
    # Then each table lands in its field
    assert FlagSettings.from_env(FLAG_ENV) == FlagSettings(
        validation_table="onceflow-dev-validation-status",
        transformation_table="onceflow-dev-transformation-status",
        store_table="onceflow-dev-store-status",
        final_table="onceflow-dev-trips",
    )


@pytest.mark.parametrize("name", sorted(FLAG_ENV))
def test_flag_settings_missing_a_table_name_it(name: str) -> None:
    # Given the flag environment without one table
    # When it is read
    with pytest.raises(SettingsError) as raised:
        FlagSettings.from_env(without(FLAG_ENV, name))
    # Then the error names exactly that variable
    assert str(raised.value) == f"environment variable {name} is required and must not be empty"


# --- ApiSettings ----------------------------------------------------------------------------------


def test_api_settings_with_only_the_required_variables_use_the_defaults() -> None:
    # Given only the state machine and the workflow type
    # When the settings are read
    settings = ApiSettings.from_env(API_ENV)
    # Then the limits have their defaults
    assert settings == ApiSettings(
        state_machine_arn=STATE_MACHINE_ARN,
        workflow_type="STANDARD",
        batch_max_lines=100,
        batch_max_bytes=64 * 1024,
        max_line_bytes=4096,
        rows=RowStateSettings.from_env(FLAG_ENV),
    )


def test_api_settings_read_every_variable() -> None:
    # Given every API variable, as infra writes them (strings), the type in lower case
    env = API_ENV | {"WORKFLOW_TYPE": "express", "BATCH_MAX_LINES": "25", "BATCH_MAX_BYTES": "10000", "MAX_LINE_BYTES": "2048"}
    # When they are read
    settings = ApiSettings.from_env(env)
    # Then each lands in its field, the type upper-cased
    assert (settings.workflow_type, settings.batch_max_lines, settings.batch_max_bytes, settings.max_line_bytes) == (
        "EXPRESS",
        25,
        10000,
        2048,
    )


@pytest.mark.parametrize("name", sorted(API_ENV))
def test_api_settings_missing_a_required_variable_name_it(name: str) -> None:
    # Given the API environment without one required variable
    # When it is read
    # Then the error names it
    with pytest.raises(SettingsError, match=name):
        ApiSettings.from_env(without(API_ENV, name))


@pytest.mark.parametrize("workflow_type", ["STANDARDS", "sync", "EXPRESS_SYNC"])
def test_an_unknown_workflow_type_is_refused(workflow_type: str) -> None:
    # Given a workflow type that is neither STANDARD nor EXPRESS
    # When the settings are read
    # Then the error names the variable and the allowed values
    with pytest.raises(SettingsError) as raised:
        ApiSettings.from_env(API_ENV | {"WORKFLOW_TYPE": workflow_type})
    assert str(raised.value) == "WORKFLOW_TYPE must be one of STANDARD, EXPRESS"


def test_a_line_limit_above_the_body_limit_is_refused() -> None:
    # Given a line limit larger than the batch body limit
    env = API_ENV | {"BATCH_MAX_BYTES": "1000", "MAX_LINE_BYTES": "1001"}
    # When the settings are read
    # Then the error names both variables
    with pytest.raises(SettingsError, match="MAX_LINE_BYTES must not exceed BATCH_MAX_BYTES"):
        ApiSettings.from_env(env)


def test_a_line_limit_equal_to_the_body_limit_is_accepted() -> None:
    # Given equal limits
    # When the settings are read
    settings = ApiSettings.from_env(API_ENV | {"BATCH_MAX_BYTES": "1000", "MAX_LINE_BYTES": "1000"})
    # Then they are kept
    assert settings.max_line_bytes == settings.batch_max_bytes == 1000


@pytest.mark.parametrize(
    ("name", "value"), [("BATCH_MAX_LINES", "0"), ("BATCH_MAX_LINES", "ten"), ("BATCH_MAX_BYTES", "-1"), ("MAX_LINE_BYTES", "1.5")]
)
def test_a_limit_that_is_not_a_positive_integer_is_refused(name: str, value: str) -> None:
    # Given a limit that is zero, negative or not an integer
    # When the settings are read
    # Then the error names the variable
    with pytest.raises(SettingsError, match=name):
        ApiSettings.from_env(API_ENV | {name: value})


@pytest.mark.parametrize(
    ("workflow_type", "deduplicates"), [("STANDARD", True), ("standard", True), ("EXPRESS", False), ("Express", False)]
)
def test_only_standard_workflows_deduplicate_starts(workflow_type: str, deduplicates: bool) -> None:
    # Given a workflow type, in any case
    # When the settings are read
    settings = ApiSettings.from_env(API_ENV | {"WORKFLOW_TYPE": workflow_type})
    # Then only Standard refuses a second execution with the same name
    assert settings.deduplicates_starts is deduplicates


# --- AuthorizerSettings ---------------------------------------------------------------------------


def test_authorizer_settings_with_only_the_secret_use_the_defaults() -> None:
    # Given only the secret id
    # When the settings are read
    # Then the cache lasts 300 s and forced refreshes are at least 10 s apart
    assert AuthorizerSettings.from_env(AUTHORIZER_ENV) == AuthorizerSettings(
        secret_id="onceflow/dev/taxi-api-key", cache_seconds=300, refresh_floor_seconds=10
    )


def test_authorizer_settings_read_every_variable() -> None:
    # Given every authorizer variable
    env = AUTHORIZER_ENV | {"SECRET_CACHE_SECONDS": "60", "SECRET_REFRESH_FLOOR_SECONDS": "5"}
    # When they are read
    settings = AuthorizerSettings.from_env(env)
    # Then each lands in its field as an integer
    assert (settings.cache_seconds, settings.refresh_floor_seconds) == (60, 5)


def test_authorizer_settings_without_the_secret_name_it() -> None:
    # Given no secret id
    # When the settings are read
    # Then the error names the variable
    with pytest.raises(SettingsError, match="API_KEY_SECRET_ID"):
        AuthorizerSettings.from_env({})


@pytest.mark.parametrize(("cache", "floor"), [("60", "61"), ("5", "10")])
def test_a_refresh_floor_above_the_cache_age_is_refused(cache: str, floor: str) -> None:
    # Given a refresh floor longer than the cache age
    env = AUTHORIZER_ENV | {"SECRET_CACHE_SECONDS": cache, "SECRET_REFRESH_FLOOR_SECONDS": floor}
    # When the settings are read
    # Then the error names both variables
    with pytest.raises(SettingsError, match="SECRET_REFRESH_FLOOR_SECONDS must not exceed SECRET_CACHE_SECONDS"):
        AuthorizerSettings.from_env(env)


def test_the_default_floor_over_a_short_cache_is_refused() -> None:
    # Given a cache of 5 s and the default floor of 10 s
    # When the settings are read
    # Then the combination is refused
    with pytest.raises(SettingsError, match="must not exceed"):
        AuthorizerSettings.from_env(AUTHORIZER_ENV | {"SECRET_CACHE_SECONDS": "5"})


def test_a_refresh_floor_equal_to_the_cache_age_is_accepted() -> None:
    # Given a floor equal to the cache age
    # When the settings are read
    settings = AuthorizerSettings.from_env(AUTHORIZER_ENV | {"SECRET_CACHE_SECONDS": "30", "SECRET_REFRESH_FLOOR_SECONDS": "30"})
    # Then it is kept
    assert settings.refresh_floor_seconds == settings.cache_seconds == 30
