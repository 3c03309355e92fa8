"""The taxi trip's record: the TLC columns and code tables, and the rules and findings the row logic reports.

The row logic is pure, a function of its arguments (no AWS, no I/O, no environment), in three
modules, so that each function imports only its part: this one, what every part shares;
runtime/taxi_etl/trip_lines.py validates a raw CSV line and transforms it (Validate, Transform,
the API); runtime/taxi_etl/trip_items.py builds the stored item from a transformed tuple (Store,
the flag step, GET /trips/{id}). The saga's handlers call these functions and persist what they
return, so a redelivered message yields the same tuple byte for byte.

The column meanings and code tables follow the NYC Taxi & Limousine Commission's
"Data Dictionary - Yellow Taxi Trip Records", by the edition in force in the trip's year. Real
TLC data has quirks that are not errors: negative amounts (refunds and disputes), passenger_count
0, empty codes in 2020 and later (unknown, not wrong), vendor 1 folding the 2.50 congestion
surcharge into `extra`, and totals that the columns do not add up to. A row that is a real,
charged trip is stored, and what is odd about it is recorded on the item as findings. Only a row
that cannot be a trip is rejected: a drop-off strictly before the pick-up, an unparseable field,
an impossible code, or a schema whose columns are not mapped (the 2009-2016 files with
coordinates). Columns the rest of the pipeline does not depend on (passenger_count,
trip_distance, rate_code_id, store_and_fwd_flag) are blanked rather than rejected when their
value is unusable, so one bad cell does not lose a trip.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Final

INPUT_SEPARATOR = ","
OUTPUT_SEPARATOR = "\t"
MAX_LINE_BYTES = 4096  # a raw line longer than this (utf-8) is rejected

# Canonical names, in TLC column order. 17 columns for 2017-2018, +congestion_surcharge for 2019-2021,
# +airport_fee from 2022, +cbd_congestion_fee from 2025.
COLUMNS: tuple[str, ...] = (
    "vendor_id",
    "pickup_datetime",
    "dropoff_datetime",
    "passenger_count",
    "trip_distance",
    "rate_code_id",
    "store_and_fwd_flag",
    "pu_location_id",
    "do_location_id",
    "payment_type",
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
    "congestion_surcharge",
    "airport_fee",
    "cbd_congestion_fee",
)
COLUMN_COUNTS: tuple[int, ...] = (17, 18, 19, 20)

# Amounts that must be present, then the surcharges later schemas added or that older rows leave empty (read as 0).
REQUIRED_AMOUNTS: tuple[str, ...] = (
    "fare_amount",
    "extra",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "improvement_surcharge",
    "total_amount",
)
OPTIONAL_AMOUNTS: tuple[str, ...] = ("congestion_surcharge", "airport_fee", "cbd_congestion_fee")
AMOUNTS: tuple[str, ...] = REQUIRED_AMOUNTS + OPTIONAL_AMOUNTS
MAX_ABS_AMOUNT = Decimal(10000)
# What a passenger is charged for, in column order: together they make total_amount (see `charges`).
CHARGES: tuple[str, ...] = tuple(name for name in AMOUNTS if name != "total_amount")
UNEXPLAINED = "unexplained"  # the part of total_amount that no charge column explains
# The layout of the stored item: 1 (absent) before charges, findings and codes beside names; 3 since
# only vendor 1's congestion surcharge is taken out of `extra` (a vendor-2 item may differ in `charges`).
ITEM_VERSION = 3
CONGESTION_IN_EXTRA_VENDOR = 1  # the vendor whose `extra` includes the congestion surcharge (see `charges`)
MAX_TRIP = timedelta(hours=24)
MAX_TRIP_DISTANCE = Decimal(1000)
# TLC yellow data starts in 2009; anything after 2100 is a corrupt year, not a trip.
EARLIEST_LOCAL = datetime(2009, 1, 1)
LATEST_LOCAL_EXCLUSIVE = datetime(2101, 1, 1)
LOCATION_IDS = range(1, 266)  # taxi zones 1..263, plus 264 "Unknown" and 265 "Outside of NYC"
PASSENGER_COUNTS = range(0, 10)

# Code tables of the TLC data dictionary, in the wording of the edition in force from a pick-up year on.
# An empty code is unknown (2020 and later files leave codes empty), never an error.
VENDOR_EDITIONS: tuple[tuple[int, dict[int, str]], ...] = (
    (2009, {1: "Creative Mobile Technologies, LLC", 2: "VeriFone Inc."}),
    (2024, {1: "Creative Mobile Technologies, LLC", 2: "Curb Mobility, LLC", 6: "Myle Technologies Inc", 7: "Helix"}),
)
RATE_CODES: dict[int, str] = {
    1: "Standard rate",
    2: "JFK",
    3: "Newark",
    4: "Nassau or Westchester",
    5: "Negotiated fare",
    6: "Group ride",
    99: "Null/unknown",
}
_PAYMENTS: Final = {1: "Credit card", 2: "Cash", 3: "No charge", 4: "Dispute", 5: "Unknown", 6: "Voided trip"}
# Before the 2025 edition, 0 is no code: parquet exports write it for an empty payment_type.
PAYMENT_EDITIONS: tuple[tuple[int, dict[int, str]], ...] = ((2009, _PAYMENTS), (2025, {0: "Flex Fare trip", **_PAYMENTS}))
UNKNOWN_PAYMENT_BEFORE_2025 = 0
STORE_AND_FWD_FLAGS: dict[str, bool] = {"Y": True, "N": False}


def vendors_in(year: int) -> dict[int, str]:
    """The vendor codes and names of the data-dictionary edition in force in `year`."""
    return _edition(VENDOR_EDITIONS, year)


def payment_types_in(year: int) -> dict[int, str]:
    """The payment codes and names of the data-dictionary edition in force in `year`."""
    return _edition(PAYMENT_EDITIONS, year)


def _edition(editions: tuple[tuple[int, dict[int, str]], ...], year: int) -> dict[int, str]:
    return next(table for since, table in reversed(editions) if year >= since)


_MAX_SHOWN = 40
UTC_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"  # how the transformed tuple and the item write a UTC time


class Rule(StrEnum):
    """Why a row was rejected or failed; the values are the documented detail strings."""

    # validation (reason code 1)
    COLUMN_COUNT = "column_count"  # not 17 to 20 columns (also: not one well-formed CSV record)
    LINE_TOO_LONG = "line_too_long"  # more than MAX_LINE_BYTES utf-8 bytes
    HEADER_LINE = "header_line"  # the line is a CSV header (first cell vendorid/VendorID)
    UNSUPPORTED_SCHEMA = "unsupported_schema"  # a 2009-2016 record with coordinates: its columns are not mapped
    VENDOR = "vendor"  # vendor_id is not a vendor code of the pick-up year's data dictionary
    PICKUP_DATETIME = "pickup_datetime"  # unparseable, or outside 2009-01-01..2100-12-31
    DROPOFF_DATETIME = "dropoff_datetime"  # unparseable, or outside 2009-01-01..2100-12-31
    PICKUP_LOCATION = "pickup_location"  # pu_location_id is not a taxi zone 1..265
    DROPOFF_LOCATION = "dropoff_location"  # do_location_id is not a taxi zone 1..265
    PAYMENT_TYPE = "payment_type"  # payment_type is not a payment code of the pick-up year's data dictionary
    AMOUNT = "amount"  # an amount column is not a decimal with <=2 places within +-10000
    DROPOFF_BEFORE_PICKUP = "dropoff_before_pickup"  # the drop-off is strictly before the pick-up
    TRIP_TOO_LONG = "trip_too_long"  # longer than 24 h
    # transformation (reason code 2)
    NONEXISTENT_LOCAL_TIME = "nonexistent_local_time"  # falls in the spring-forward gap (e.g. 2019-03-10 02:30)
    MALFORMED_TUPLE = "malformed_tuple"  # the transform input isn't a validated tuple


class Finding(StrEnum):
    """What is odd about a stored trip. A finding never loses the trip; it is kept on the item and counted."""

    TOTAL_AMOUNT_MISMATCH = "total_amount_mismatch"  # total_amount is not the sum of the charges; the rest is `unexplained`
    DROPOFF_EQUALS_PICKUP = "dropoff_equals_pickup"  # zero duration, to the second (a fare was still charged)


class Reason(IntEnum):
    """StatusReason codes stored in the status tables."""

    OK = 0  # the phase wrote its row and has not failed (or passed)
    VALIDATION = 1
    TRANSFORMATION = 2
    STORE = 3


def show(text: str) -> str:
    """A cell as messages quote it: repr, cut at 40 characters."""
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")
