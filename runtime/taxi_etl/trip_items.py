"""The stored item of a trip: the DynamoDB item built from a transformed tuple, the charges that
add up to its total, its findings, and when a stored item is the same trip. Pure, like
runtime/taxi_etl/trips.py, whose columns and code tables it uses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from runtime.taxi_etl.trips import (
    AMOUNTS,
    CHARGES,
    COLUMNS,
    CONGESTION_IN_EXTRA_VENDOR,
    ITEM_VERSION,
    LOCATION_IDS,
    MAX_TRIP,
    OUTPUT_SEPARATOR,
    PASSENGER_COUNTS,
    PAYMENT_EDITIONS,
    RATE_CODES,
    STORE_AND_FWD_FLAGS,
    UNEXPLAINED,
    UTC_FORMAT,
    VENDOR_EDITIONS,
    Finding,
    show,
)

# Names back to codes, over every edition (no name means two codes).
_VENDOR_IDS: Final = {name: code for _, table in VENDOR_EDITIONS for code, name in table.items()}
_RATE_CODE_IDS: Final = {name: code for code, name in RATE_CODES.items()}
_PAYMENT_TYPE_IDS: Final = {name: code for _, table in PAYMENT_EDITIONS for code, name in table.items()}
# Patterns are matched through re's own cache, compiled on first use (see trip_lines.py).
_DISTANCE: Final = r"(?:\d+(?:\.\d{0,20})?|\.\d{1,20})"  # bounded places so DynamoDB's 38 digits always suffice
_UTC_TEXT: Final = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"
_CENTS_TEXT: Final = r"-?\d{1,5}\.\d{2}"
_INT_TEXT: Final = r"\d{1,3}"
_NAMED_CODES: Final = {"vendor_id": _VENDOR_IDS, "rate_code_id": _RATE_CODE_IDS, "payment_type": _PAYMENT_TYPE_IDS}


def _named_code(name: str, text: str) -> int:
    try:
        return _NAMED_CODES[name][text]
    except KeyError:
        raise ValueError(f"{name}: {show(text)} is not a known name") from None


def _utc(name: str, text: str) -> datetime:
    if not re.fullmatch(_UTC_TEXT, text):
        raise ValueError(f"{name}: {show(text)} is not a UTC time like 2019-10-23T20:39:42Z")
    return datetime.strptime(text, UTC_FORMAT).replace(tzinfo=UTC)


def _integer(name: str, text: str, allowed: range) -> int:
    if not re.fullmatch(_INT_TEXT, text) or int(text) not in allowed:
        raise ValueError(f"{name}: {show(text)} is not an integer in {allowed.start}..{allowed.stop - 1}")
    return int(text)


def charges(amounts: dict[str, Decimal], vendor_id: int | None) -> dict[str, Decimal]:
    """The charges of a trip as they add up to its total_amount: every name in CHARGES plus UNEXPLAINED,
    summing to total_amount exactly.

    The TLC data dictionary ("Data Dictionary - Yellow Taxi Trip Records") defines `extra` as the
    rush-hour and overnight charges, and congestion_surcharge as its own column. Vendor 1 (Creative
    Mobile Technologies) also folds the 2.50 congestion surcharge into `extra` (3.50 = 1.00 + 2.50)
    and fills the surcharge column as well, so its columns exceed the total by the surcharge; the
    2019 sample shows this for vendor 1 only. So for vendor 1 alone, when the columns exceed the total
    by exactly congestion_surcharge and `extra` holds that much (same sign), the surcharge is taken
    out of `extra`. Any other shortfall, for any vendor, is UNEXPLAINED: 0 when the columns add up.
    """
    parts = {name: amounts[name] for name in CHARGES}
    total, congestion, extra = amounts["total_amount"], parts["congestion_surcharge"], parts["extra"]
    folds = vendor_id == CONGESTION_IN_EXTRA_VENDOR
    if folds and congestion and sum(parts.values()) - total == congestion and (extra - congestion) * congestion >= 0:
        parts["extra"] = extra - congestion
    parts[UNEXPLAINED] = total - sum(parts.values())
    return parts


def findings_of(breakdown: dict[str, Decimal], trip_seconds: int) -> tuple[Finding, ...]:
    found = []
    if breakdown[UNEXPLAINED]:
        found.append(Finding.TOTAL_AMOUNT_MISMATCH)
    if trip_seconds == 0:
        found.append(Finding.DROPOFF_EQUALS_PICKUP)
    return tuple(sorted(found))


# What identifies a stored trip across item layouts: an item stored by an older layout is the same trip
# when these agree (its other attributes were derived differently, not from another row).
TRIP_IDENTITY: tuple[str, ...] = ("StoreRequestId", "pickup_at", "dropoff_at", "pu_location_id", "do_location_id", *AMOUNTS)


def same_trip(stored: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    """`stored` is `item` already written: equal whole in the same layout, equal in TRIP_IDENTITY across layouts."""
    if stored.get("item_version") == item.get("item_version"):
        return dict(stored) == dict(item)
    return all(stored.get(name) == item.get(name) for name in TRIP_IDENTITY)


def final_item(store_request_id: str, transformed: str) -> dict[str, Any]:
    """The DynamoDB item (TypeSerializer-ready: str, int, bool, Decimal; never float) of one transformed tuple.

    Amounts are kept as the file gave them; `charges` is the normalized breakdown that sums to
    total_amount, `findings` (omitted when none) what is odd about the trip, and
    `unexplained_amount` (omitted when 0) the part of the total no column explains. Codes are kept
    beside their names. Blank unimportant columns are omitted rather than stored as nulls. Raises
    ValueError when `transformed` is not a tuple transform_tuple produced.
    """
    if not store_request_id:
        raise ValueError("store_request_id must not be empty")
    cells = transformed.split(OUTPUT_SEPARATOR)
    if len(cells) != len(COLUMNS):
        raise ValueError(f"expected {len(COLUMNS)} tab-separated columns, got {len(cells)}")
    value = dict(zip(COLUMNS, cells, strict=True))

    pickup = _utc("pickup_datetime", value["pickup_datetime"])
    dropoff = _utc("dropoff_datetime", value["dropoff_datetime"])
    trip_seconds = int((dropoff - pickup).total_seconds())
    if not 0 <= trip_seconds <= MAX_TRIP.total_seconds():
        raise ValueError(f"trip_seconds {trip_seconds} is not in 0..{int(MAX_TRIP.total_seconds())}")

    item: dict[str, Any] = {
        "StoreRequestId": store_request_id,
        "item_version": ITEM_VERSION,
        "pickup_at": value["pickup_datetime"],
        "dropoff_at": value["dropoff_datetime"],
    }
    for name, named, code in (("vendor_id", "vendor", "vendor_id"), ("rate_code_id", "rate_code", "rate_code_id")):
        if value[name]:
            item[named], item[code] = value[name], _named_code(name, value[name])
    if value["payment_type"]:
        item["payment_type"], item["payment_type_id"] = value["payment_type"], _named_code("payment_type", value["payment_type"])
    if value["passenger_count"]:
        item["passenger_count"] = _integer("passenger_count", value["passenger_count"], PASSENGER_COUNTS)
    if value["trip_distance"]:
        if not re.fullmatch(_DISTANCE, value["trip_distance"]):
            raise ValueError(f"trip_distance: {show(value['trip_distance'])} is not a non-negative decimal")
        item["trip_distance"] = Decimal(value["trip_distance"])
    if value["store_and_fwd_flag"]:
        if value["store_and_fwd_flag"] not in STORE_AND_FWD_FLAGS:
            raise ValueError(f"store_and_fwd_flag: {show(value['store_and_fwd_flag'])} is not Y or N")
        item["store_and_fwd"] = STORE_AND_FWD_FLAGS[value["store_and_fwd_flag"]]
    item["pu_location_id"] = _integer("pu_location_id", value["pu_location_id"], LOCATION_IDS)
    item["do_location_id"] = _integer("do_location_id", value["do_location_id"], LOCATION_IDS)
    amounts: dict[str, Decimal] = {}
    for name in AMOUNTS:
        if not re.fullmatch(_CENTS_TEXT, value[name]):
            raise ValueError(f"{name}: {show(value[name])} is not an amount with 2 decimal places")
        amounts[name] = item[name] = Decimal(value[name])
    breakdown = charges(amounts, item.get("vendor_id"))
    item["charges"] = breakdown
    found = findings_of(breakdown, trip_seconds)
    if found:
        item["findings"] = [finding.value for finding in found]
    if breakdown[UNEXPLAINED]:
        item["unexplained_amount"] = breakdown[UNEXPLAINED]
    item["trip_seconds"] = trip_seconds
    return item
