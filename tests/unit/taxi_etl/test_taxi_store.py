"""The status table's DynamoDB adapter (runtime/taxi_etl/store.py) on moto: the automatic redrive's
clear of a retryable flag, and how it tells its own applied write from a row it did not clear."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.aws.clients import new_client
from devtools.aws.faults import LostResponse
from runtime.shared.dynamo import from_attributes, to_attributes
from runtime.taxi_etl.store import CLEAR_TOKEN, KEY, RAW_TUPLE, STATUS_DETAIL, STATUS_MESSAGE, STATUS_REASON, DynamoStatusTable
from runtime.taxi_etl.trips import Reason

TABLE = "store-status"
ROW = "c-0123456789abcdef0123456789abcdef"
RETRYABLE = {STATUS_REASON: int(Reason.STORE), STATUS_DETAIL: "retryable:TransientInfrastructureError", STATUS_MESSAGE: "closed"}


@pytest.fixture
def client(moto_aws: None) -> Any:
    dynamodb = new_client("dynamodb")
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb


def given_row(client: Any, **attributes: Any) -> None:
    client.put_item(TableName=TABLE, Item=to_attributes({KEY: ROW, RAW_TUPLE: "1,2,3", **attributes}))


def row(client: Any) -> dict[str, Any] | None:
    item = client.get_item(TableName=TABLE, Key=to_attributes({KEY: ROW}), ConsistentRead=True).get("Item")
    return from_attributes(item) if item else None


def test_a_retryable_flag_is_cleared_and_the_row_carries_the_clears_token(client: Any) -> None:
    # Given a row the store flagged retryable
    given_row(client, **RETRYABLE)
    # When its flag is cleared
    cleared = DynamoStatusTable(TABLE, client).clear_retryable(ROW, Reason.STORE)
    # Then it was, the row is back at reason 0 without detail or message, its raw tuple kept, and the clear's token on it
    assert cleared is True
    found = row(client)
    assert found is not None
    assert {name: value for name, value in found.items() if name != CLEAR_TOKEN} == {KEY: ROW, RAW_TUPLE: "1,2,3", STATUS_REASON: 0}
    assert len(str(found[CLEAR_TOKEN])) == 32


def test_a_clear_applied_whose_response_is_lost_is_its_own_success(client: Any) -> None:
    # Given a row flagged retryable, and the clear's update applied, its response lost and sent again by botocore
    given_row(client, **RETRYABLE)
    lost = LostResponse(at=1).attach(client)
    # When its flag is cleared
    cleared = DynamoStatusTable(TABLE, client).clear_retryable(ROW, Reason.STORE)
    # Then the retry failed its condition against the first update, and the clear took that for its own: cleared
    assert lost.retried and lost.second_answer == "ConditionalCheckFailedException"
    assert cleared is True
    found = row(client)
    assert found is not None and found[STATUS_REASON] == 0 and STATUS_DETAIL not in found


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({STATUS_REASON: 0}, id="never-flagged"),  # e.g. a stored row the retryable flag step skipped
        pytest.param({STATUS_REASON: 0, CLEAR_TOKEN: "another clear's token"}, id="cleared-by-another-clear"),
        pytest.param({STATUS_REASON: int(Reason.STORE), STATUS_DETAIL: "error:StoreConflict", STATUS_MESSAGE: "m"}, id="flagged-for-good"),
        pytest.param({**RETRYABLE, STATUS_REASON: int(Reason.TRANSFORMATION)}, id="retryable-in-another-phase"),
    ],
)
def test_a_row_this_clear_did_not_clear_is_not_counted_and_is_left_as_it_was(client: Any, attributes: dict[str, Any]) -> None:
    # Given a row at reason 0 that this clear never touched, or flagged otherwise than retryable by the store
    given_row(client, **attributes)
    before = row(client)
    # When the store's retryable flag is cleared on it
    cleared = DynamoStatusTable(TABLE, client).clear_retryable(ROW, Reason.STORE)
    # Then nothing was cleared, and the row is unchanged (a row at reason 0 is not taken for this clear's own)
    assert cleared is False
    assert row(client) == before


def test_a_missing_row_is_not_cleared_nor_created(client: Any) -> None:
    # Given no status row for the id
    # When its flag is cleared
    cleared = DynamoStatusTable(TABLE, client).clear_retryable(ROW, Reason.STORE)
    # Then nothing was cleared, and no row was written
    assert cleared is False
    assert row(client) is None
