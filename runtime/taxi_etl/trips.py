"""The pure row logic of the taxi ETL: validate a raw CSV line, transform it, and build the stored item.

Everything here is a function of its arguments: no AWS, no I/O, no environment. The saga's
handlers call these functions and persist what they return, so a redelivered message yields the
same tuple byte for byte.

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

TLC records carry New York wall-clock times. The transform converts them to UTC by the US DST
rule in force since 2007 rather than through zoneinfo: the Lambda asset ships no third-party
packages (no tzdata) and the function must not depend on the OS time-zone database.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import IntEnum, StrEnum
from typing import Any, Final, NamedTuple, TypeVar

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
_INDEX: Final = {name: index for index, name in enumerate(COLUMNS)}
_Value = TypeVar("_Value")

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


# Names back to codes, over every edition (no name means two codes).
_VENDOR_IDS: Final = {name: code for _, table in VENDOR_EDITIONS for code, name in table.items()}
_RATE_CODE_IDS: Final = {name: code for code, name in RATE_CODES.items()}
_PAYMENT_TYPE_IDS: Final = {name: code for _, table in PAYMENT_EDITIONS for code, name in table.items()}

_HEADER_FIRST_CELLS: Final = frozenset({"vendorid", "vendor_id", "vendor_name"})
_CENT: Final = Decimal("0.01")
_MAX_SHOWN = 40
_UTC_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"


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


class Schema(StrEnum):
    """The yellow-trip record layouts, by the years that used them."""

    YELLOW_2017 = "yellow 2017-2018 (17 columns)"
    YELLOW_2019 = "yellow 2019-2021 (18 columns, congestion_surcharge)"
    YELLOW_2022 = "yellow 2022-2024 (19 columns, airport_fee)"
    YELLOW_2025 = "yellow 2025 and later (20 columns, cbd_congestion_fee)"
    YELLOW_2009 = "yellow 2009-2014 (18 columns, coordinates, no zone ids)"
    YELLOW_2015 = "yellow 2015-2016 (19 columns, coordinates, no zone ids)"

    @property
    def mapped(self) -> bool:
        return self not in (Schema.YELLOW_2009, Schema.YELLOW_2015)


SCHEMA_BY_COLUMNS: Final = {17: Schema.YELLOW_2017, 18: Schema.YELLOW_2019, 19: Schema.YELLOW_2022, 20: Schema.YELLOW_2025}
LEGACY_BY_COLUMNS: Final = {18: Schema.YELLOW_2009, 19: Schema.YELLOW_2015}
LEGACY_VENDOR_NAMES: Final = frozenset({"VTS", "CMT", "DDS"})  # the 2009 files name the vendor
# Patterns are kept as text and matched through re's own cache, which compiles each on its first use:
# compiling them all at import cost every cold start ~0.5 ms, most of it for patterns the function never uses.
_NUMBER: Final = r"[+-]?\d+(?:\.\d*)?"


def header_schema(columns: list[str]) -> Schema | None:
    """The schema a CSV header names; None for a header of no yellow-trip layout."""
    names = [column.strip().lstrip("\ufeff").strip().lower() for column in columns]
    if any("longitude" in name or name.endswith("_lon") for name in names):
        return LEGACY_BY_COLUMNS.get(len(names))
    return SCHEMA_BY_COLUMNS.get(len(names)) if "pulocationid" in names else None


def row_schema(columns: list[str]) -> Schema | None:
    """The schema of a data record, by its shape: in the 2009-2016 layouts a coordinate stands where
    store_and_fwd_flag is, and the 2009 files name their vendor (VTS, CMT, DDS) instead of coding it."""
    if len(columns) in LEGACY_BY_COLUMNS:
        flag_cell, vendor = columns[6].strip(), columns[0].strip().lstrip("\ufeff")
        if (flag_cell not in STORE_AND_FWD_FLAGS and re.fullmatch(_NUMBER, flag_cell)) or vendor in LEGACY_VENDOR_NAMES:
            return LEGACY_BY_COLUMNS[len(columns)]
    return SCHEMA_BY_COLUMNS.get(len(columns))


def is_header(columns: list[str]) -> bool:
    return bool(columns) and columns[0].strip().lstrip("\ufeff").strip().lower() in _HEADER_FIRST_CELLS


class Reason(IntEnum):
    """StatusReason codes stored in the status tables."""

    OK = 0  # the phase wrote its row and has not failed (or passed)
    VALIDATION = 1
    TRANSFORMATION = 2
    STORE = 3


_Names = tuple[str, ...]  # an alias, because the field named `tuple` below shadows the builtin in the class body


@dataclass(frozen=True, slots=True)
class Accepted:
    tuple: str  # the output line of the phase
    blanked: _Names = ()  # names of unimportant columns blanked by validation


@dataclass(frozen=True, slots=True)
class Rejected:
    rule: Rule
    message: str  # human-readable, names the column and the offending value (values truncated to 40 chars)


# --- Eastern time by rule ---------------------------------------------------------------------

_EST: Final = timedelta(hours=5)  # UTC-5
_EDT: Final = timedelta(hours=4)  # UTC-4


def _nth_sunday(year: int, month: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7 + 7 * (n - 1))


def dst_bounds(year: int) -> tuple[datetime, datetime]:
    """The local wall-clock instants DST starts and ends in `year` (Energy Policy Act of 2005, in force since 2007).

    Starts the second Sunday of March at 02:00 EST (clocks jump to 03:00 EDT);
    ends the first Sunday of November at 02:00 EDT (clocks fall back to 01:00 EST).
    """
    if year < 2007:
        raise ValueError(f"the US DST rule implemented here applies from 2007, not {year}")
    start, end = _nth_sunday(year, 3, 2), _nth_sunday(year, 11, 1)
    return datetime(start.year, start.month, start.day, 2), datetime(end.year, end.month, end.day, 2)


def eastern_to_utc(local: datetime) -> datetime | None:
    """New York wall-clock time → aware UTC datetime; None if `local` falls in the spring-forward gap.

    In the fall-back hour (01:00-01:59 on the first Sunday of November) a wall-clock time happens
    twice; the TLC files do not say which, so this takes the first occurrence (EDT, like fold=0).
    `local.fold` is ignored so the result depends only on the text of the record.
    """
    if local.tzinfo is not None:
        raise ValueError("eastern_to_utc expects a naive wall-clock datetime")
    start, end = dst_bounds(local.year)
    naive = local.replace(fold=0)
    if start <= naive < start + timedelta(hours=1):
        return None
    # EDT from 03:00 on the start day up to (not including) 02:00 wall-clock on the end day; 01:xx there is EDT (first occurrence).
    offset = _EDT if start + timedelta(hours=1) <= naive < end else _EST
    return (naive + offset).replace(tzinfo=UTC)


# --- cell parsers -----------------------------------------------------------------------------

_ISO_DATETIME: Final = r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.\d{1,6})?"
_US_DATETIME: Final = r"(\d{1,2})/(\d{1,2})/(\d{4}) (\d{1,2}):(\d{2}):(\d{2}) ([AaPp])[Mm]"
_CODE: Final = r"\d{1,9}(?:\.0*)?"  # "1", and "1.0" as float columns of parquet-derived exports write it
_DECIMAL: Final = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"  # no exponents, NaN or Infinity
_DISTANCE: Final = r"(?:\d+(?:\.\d{0,20})?|\.\d{1,20})"  # bounded places so DynamoDB's 38 digits always suffice


def parse_local_datetime(text: str) -> datetime | None:
    """One of the TLC date formats → naive wall-clock datetime (fractions of a second dropped); None if unparseable.

    Accepts `2019-10-23T16:39:42.000` (NYC Open Data export), `2019-10-23 16:39:42` (TLC files)
    and `10/23/2019 04:39:42 PM` (older exports).
    """
    try:
        if match := re.fullmatch(_ISO_DATETIME, text):
            year, month, day, hour, minute, second = (int(group) for group in match.groups())
            return datetime(year, month, day, hour, minute, second)
        if match := re.fullmatch(_US_DATETIME, text):
            month, day, year, hour12, minute, second = (int(group) for group in match.groups()[:6])
            if not 1 <= hour12 <= 12:
                return None
            hour = hour12 % 12 + (12 if match.group(7) in "Pp" else 0)
            return datetime(year, month, day, hour, minute, second)
    except ValueError:  # a day or hour out of range, e.g. 2019-02-30
        return None
    return None


def _parse_code(text: str) -> int | None:
    return int(Decimal(text)) if re.fullmatch(_CODE, text) else None


def _parse_amount(text: str) -> Decimal | str:
    """A decimal with at most 2 places within ±MAX_ABS_AMOUNT, or the reason it is not."""
    if not re.fullmatch(_DECIMAL, text):
        return "is not a decimal number"
    try:
        value = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid literals
        return "is not a decimal number"
    if abs(value) > MAX_ABS_AMOUNT:  # checked first, so quantize below never exceeds the context's precision
        return f"is outside ±{MAX_ABS_AMOUNT}"
    if value != value.quantize(_CENT):
        return "has more than 2 decimal places"
    return value


def _show(text: str) -> str:
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")


def _cents(value: Decimal) -> str:
    value = value.quantize(_CENT)
    return format(value if value else Decimal("0.00"), "f")  # no "-0.00"


def line_columns(raw: str) -> list[str]:
    """CSV-split one line (quotes handled by the csv module). Raises ValueError unless it is exactly one well-formed record."""
    try:
        records = list(csv.reader([raw], delimiter=INPUT_SEPARATOR, strict=True))
    except csv.Error as error:
        raise ValueError(f"not a well-formed CSV line: {error}") from error
    if not records:
        return []
    if len(records) > 1:  # pragma: no cover - a single string is a single csv input line
        raise ValueError("more than one CSV record")
    return records[0]


# --- the row ----------------------------------------------------------------------------------


class _Row(NamedTuple):  # not a dataclass: creating one costs each cold start ~0.5 ms more
    """A row that passed validation: its output cells and the typed values the transform needs."""

    cells: tuple[str, ...]  # stripped, with blanked cells empty; as many as the input had
    blanked: _Names
    vendor_id: int | None  # None: unknown (an empty code)
    pickup: datetime
    dropoff: datetime
    passenger_count: int | None
    trip_distance: Decimal | None
    rate_code: int | None
    store_and_fwd: str  # "Y", "N" or ""
    pu_location_id: int
    do_location_id: int
    payment_type: int | None  # None: unknown (an empty code, or 0 before the 2025 edition)
    amounts: dict[str, Decimal]  # every name in AMOUNTS; absent or empty optional fees are 0


class _Draft:
    """A row while the checks run: stripped cells, the unimportant columns blanked so far, and the
    typed values each check found. Each check reads cells, records values, and rejects or not.

    A plain class, not a dataclass: creating a dataclass costs each cold start ~0.3 ms more."""

    __slots__ = ("amounts", "blanked", "cells", "locations", "passenger_count", "payment_type", "rate_code", "trip_distance", "vendor_id")

    def __init__(self, cells: list[str]) -> None:
        self.cells = cells
        self.blanked: list[str] = []
        self.vendor_id: int | None = None
        self.passenger_count: int | None = None
        self.trip_distance: Decimal | None = None
        self.rate_code: int | None = None
        self.locations: list[int] = []
        self.payment_type: int | None = None
        self.amounts: dict[str, Decimal] = {}

    def cell(self, name: str) -> str:
        index = _INDEX[name]
        return self.cells[index] if index < len(self.cells) else ""

    def keep_or_blank(self, name: str, parse: Callable[[str], _Value | None]) -> _Value | None:
        """An unimportant column: an unusable value is blanked and the trip kept; empty stays empty."""
        text = self.cell(name)
        value = parse(text) if text else None
        if text and value is None:
            self.cells[_INDEX[name]] = ""
            self.blanked.append(name)
        return value

    def row(self, pickup: datetime, dropoff: datetime) -> _Row:
        return _Row(
            cells=tuple(self.cells),
            blanked=tuple(self.blanked),
            vendor_id=self.vendor_id,
            pickup=pickup,
            dropoff=dropoff,
            passenger_count=self.passenger_count,
            trip_distance=self.trip_distance,
            rate_code=self.rate_code,
            store_and_fwd=self.cell("store_and_fwd_flag"),
            pu_location_id=self.locations[0],
            do_location_id=self.locations[1],
            payment_type=self.payment_type,
            amounts=self.amounts,
        )


def _code_in(allowed: Container[int]) -> Callable[[str], int | None]:
    def parse(text: str) -> int | None:
        code = _parse_code(text)
        return code if code is not None and code in allowed else None

    return parse


def _distance(text: str) -> Decimal | None:
    return Decimal(text) if re.fullmatch(_DISTANCE, text) and Decimal(text) < MAX_TRIP_DISTANCE else None


def _store_and_fwd(text: str) -> str | None:
    return text if text in STORE_AND_FWD_FLAGS else None


def _check_layout(columns: list[str]) -> Rejected | None:
    if is_header(columns):
        return Rejected(Rule.HEADER_LINE, f"vendor_id: {_show(columns[0])} is a CSV header cell, not a vendor code")
    schema = row_schema(columns)
    if schema is None:
        return Rejected(Rule.COLUMN_COUNT, f"expected 17 to 20 columns, got {len(columns)}")
    if not schema.mapped:
        return Rejected(Rule.UNSUPPORTED_SCHEMA, f"the record has the {schema} layout, whose columns are not mapped")
    return None


_MOMENTS: Final = (("pickup_datetime", Rule.PICKUP_DATETIME), ("dropoff_datetime", Rule.DROPOFF_DATETIME))


def _check_moments(draft: _Draft) -> tuple[datetime, datetime] | Rejected:
    moments: list[datetime] = []
    for name, rule in _MOMENTS:
        moment = parse_local_datetime(draft.cell(name))
        if moment is None:
            return Rejected(rule, f"{name}: {_show(draft.cell(name))} is not a date-time in a TLC format")
        if not EARLIEST_LOCAL <= moment < LATEST_LOCAL_EXCLUSIVE:
            return Rejected(rule, f"{name}: {_show(draft.cell(name))} is outside 2009-01-01..2100-12-31")
        moments.append(moment)
    return moments[0], moments[1]


def _check_vendor(draft: _Draft, year: int) -> Rejected | None:
    text = draft.cell("vendor_id")
    vendors = vendors_in(year)
    draft.vendor_id = _parse_code(text) if text else None
    if text and (draft.vendor_id is None or draft.vendor_id not in vendors):
        return Rejected(Rule.VENDOR, f"vendor_id: {_show(text)} is not a vendor code of {year} {sorted(vendors)}")
    return None


def _check_unimportant(draft: _Draft, year: int) -> Rejected | None:
    # In column order, which is the order `blanked` names them.
    draft.passenger_count = draft.keep_or_blank("passenger_count", _code_in(PASSENGER_COUNTS))
    draft.trip_distance = draft.keep_or_blank("trip_distance", _distance)
    draft.rate_code = draft.keep_or_blank("rate_code_id", _code_in(RATE_CODES))
    draft.keep_or_blank("store_and_fwd_flag", _store_and_fwd)
    return None


_LOCATIONS: Final = (("pu_location_id", Rule.PICKUP_LOCATION), ("do_location_id", Rule.DROPOFF_LOCATION))


def _check_locations(draft: _Draft, year: int) -> Rejected | None:
    for name, rule in _LOCATIONS:
        location = _parse_code(draft.cell(name))
        if location is None or location not in LOCATION_IDS:
            return Rejected(rule, f"{name}: {_show(draft.cell(name))} is not a taxi zone id 1..265")
        draft.locations.append(location)
    return None


def _check_payment(draft: _Draft, year: int) -> Rejected | None:
    text = draft.cell("payment_type")
    payments = payment_types_in(year)
    draft.payment_type = _parse_code(text) if text else None
    if draft.payment_type == UNKNOWN_PAYMENT_BEFORE_2025 and draft.payment_type not in payments:
        draft.payment_type = None
    elif text and (draft.payment_type is None or draft.payment_type not in payments):
        return Rejected(Rule.PAYMENT_TYPE, f"payment_type: {_show(text)} is not a payment type of {year} {sorted(payments)}")
    return None


def _check_amounts(draft: _Draft, year: int) -> Rejected | None:
    for name in AMOUNTS:
        text = draft.cell(name)
        if not text and name in OPTIONAL_AMOUNTS:
            draft.amounts[name] = Decimal(0)
            continue
        parsed = _parse_amount(text)
        if isinstance(parsed, str):
            return Rejected(Rule.AMOUNT, f"{name}: {_show(text)} {parsed}")
        draft.amounts[name] = parsed
    return None


def _check_duration(draft: _Draft, pickup: datetime, dropoff: datetime) -> Rejected | None:
    # Wall-clock order equals UTC order: taking the first occurrence of ambiguous times keeps local→UTC strictly increasing.
    # A drop-off equal to the pick-up is a real (charged) trip with a finding; one before it cannot be a trip.
    shown_pickup, shown_dropoff = _show(draft.cell("pickup_datetime")), _show(draft.cell("dropoff_datetime"))
    if dropoff < pickup:
        return Rejected(Rule.DROPOFF_BEFORE_PICKUP, f"dropoff_datetime: {shown_dropoff} is before pickup_datetime {shown_pickup}")
    pickup_utc, dropoff_utc = eastern_to_utc(pickup), eastern_to_utc(dropoff)
    # The elapsed time across a DST change is the UTC difference; a gap time (rejected by the transform) falls back to wall-clock.
    duration = dropoff_utc - pickup_utc if pickup_utc and dropoff_utc else dropoff - pickup
    if duration > MAX_TRIP:
        return Rejected(
            Rule.TRIP_TOO_LONG,
            f"dropoff_datetime: {shown_dropoff} is {duration} after pickup_datetime {shown_pickup}, more than 24 h",
        )
    return None


# The checks after the moments, in the order a row's first failing rule is reported; each takes the pick-up year.
_FIELD_CHECKS: Final[tuple[Callable[[_Draft, int], Rejected | None], ...]] = (
    _check_vendor,
    _check_unimportant,
    _check_locations,
    _check_payment,
    _check_amounts,
)


def _check(columns: list[str]) -> _Row | Rejected:
    """Validate split columns. Shared by validate_line and transform_tuple, so a validated tuple is a fixed point."""
    if (rejected := _check_layout(columns)) is not None:
        return rejected
    draft = _Draft(cells=[cell.strip() for cell in columns])  # stray blanks around a value do not change its meaning
    moments = _check_moments(draft)
    if isinstance(moments, Rejected):
        return moments
    pickup, dropoff = moments
    for check in _FIELD_CHECKS:
        if (rejected := check(draft, pickup.year)) is not None:
            return rejected
    if (rejected := _check_duration(draft, pickup, dropoff)) is not None:
        return rejected
    return draft.row(pickup, dropoff)


class _CsvLine:
    """A csv.writer target that keeps the one line written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)


def _csv_line(cells: tuple[str, ...]) -> str:
    target = _CsvLine()
    csv.writer(target, delimiter=INPUT_SEPARATOR, lineterminator="", quoting=csv.QUOTE_MINIMAL).writerow(cells)
    return target.text


# --- the phases -------------------------------------------------------------------------------


def validate_line(raw: str) -> Accepted | Rejected:
    """Validate one raw CSV line of TLC yellow-taxi data.

    Accepted.tuple is the line re-written as CSV with the same column count, cells stripped,
    blanked unimportant cells empty, and dates as received (the transform normalizes them).
    """
    line = raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith(("\n", "\r")) else raw
    if len(line) > MAX_LINE_BYTES or len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        return Rejected(Rule.LINE_TOO_LONG, f"the line is longer than {MAX_LINE_BYTES} utf-8 bytes: {_show(line)}")
    line = line.removeprefix("\ufeff")  # a byte-order mark left on the first line of a file
    if "\n" in line or "\r" in line:
        return Rejected(Rule.COLUMN_COUNT, f"the line contains an embedded line break: {_show(line)}")
    try:
        columns = line_columns(line)
    except ValueError as error:
        return Rejected(Rule.COLUMN_COUNT, f"{error}: {_show(line)}")
    checked = _check(columns)
    if isinstance(checked, Rejected):
        return checked
    return Accepted(tuple=_csv_line(checked.cells), blanked=checked.blanked)


_CANONICAL_DATETIME: Final = "%Y-%m-%dT%H:%M:%S.000"  # the NYC Open Data spelling, so most lines are canonical as sent
_CODE_COLUMNS: Final = ("vendor_id", "passenger_count", "rate_code_id", "pu_location_id", "do_location_id", "payment_type")
_DISTANCE_PLACES: Final = Decimal("0.01")
# The canonical line has the 2019-2021 layout's 18 columns, plus a later fee only when one is charged:
# the layout of the data set this project is proven on, so an NYC Open Data 2019 row is its own canonical
# spelling and its content id is the one it had before amounts were normalized.
_CANONICAL_MIN_COLUMNS: Final = 18


def _canonical_amount(text: str) -> str:
    """The shortest spelling of a validated amount: 7.50 and 7.5 -> "7.5", 9.00 and +9 -> "9", -0 -> "0"."""
    value = Decimal(text) if text else Decimal(0)
    return format((value + 0).normalize(), "f")  # + 0 turns -0 into 0; "f" keeps 1E+1 as "10"


def _canonical_distance(text: str) -> str:
    """A validated distance with at least two places, as the TLC exports write it: 1.5 and 1.500 -> "1.50"."""
    value = Decimal(text).normalize()
    return format(value.quantize(_DISTANCE_PLACES) if value.as_tuple().exponent > -2 else value, "f")  # type: ignore[operator]


def canonical_line(raw: str) -> str | None:
    """The one spelling of the trip a line describes, or None when the line does not validate.

    A trip's content id is the hash of this text, so it must depend on the parsed values alone:
    a byte-order mark, CRLF, quoting, blanks around values, any TLC date format (the same wall-clock
    second, which is one instant), codes written as floats ("1.0") or with leading zeros, amounts
    with more or fewer trailing zeros or a leading "+", an empty fee (0), and the fee columns a file's
    layout has or leaves out all give the same text. Dates are written as NYC Open Data writes them,
    amounts in their shortest form and distances with two places, so an Open Data line is canonical as sent.
    """
    validated = validate_line(raw)
    if isinstance(validated, Rejected):
        return None
    cells = line_columns(validated.tuple)
    cells += [""] * (len(COLUMNS) - len(cells))  # absent fees are empty, as validation reads them (0)
    for name in ("pickup_datetime", "dropoff_datetime"):
        moment = parse_local_datetime(cells[_INDEX[name]])
        assert moment is not None  # validated
        cells[_INDEX[name]] = moment.strftime(_CANONICAL_DATETIME)
    for name in _CODE_COLUMNS:
        code = _parse_code(cells[_INDEX[name]]) if cells[_INDEX[name]] else None
        if code is not None:
            cells[_INDEX[name]] = str(code)
    if cells[_INDEX["trip_distance"]]:
        cells[_INDEX["trip_distance"]] = _canonical_distance(cells[_INDEX["trip_distance"]])
    for name in AMOUNTS:
        cells[_INDEX[name]] = _canonical_amount(cells[_INDEX[name]])
    while len(cells) > _CANONICAL_MIN_COLUMNS and cells[-1] == "0":
        cells.pop()
    return _csv_line(tuple(cells))


def transform_tuple(validated: str) -> Accepted | Rejected:
    """Transform a validated tuple into the tab-separated 20-column row the store phase reads.

    Codes become their names in the pick-up year's data-dictionary edition (an unknown code stays
    empty), wall-clock times become UTC (`2019-10-23T20:39:42Z`),
    passenger_count an integer, trip_distance a plain decimal, and every amount two decimal places.
    Empty or absent congestion_surcharge, airport_fee and cbd_congestion_fee become "0.00": the fee
    was not charged, and the store phase then always has ten amounts.
    """
    try:
        columns = line_columns(validated)
    except ValueError as error:
        return Rejected(Rule.MALFORMED_TUPLE, f"{error}: {_show(validated)}")
    row = _check(columns)
    if isinstance(row, Rejected):
        return Rejected(Rule.MALFORMED_TUPLE, f"not a validated tuple ({row.rule}: {row.message})")
    if row.blanked or _csv_line(row.cells) != validated:
        return Rejected(Rule.MALFORMED_TUPLE, f"not a validated tuple (validation would rewrite it): {_show(validated)}")

    moments: list[str] = []
    for name, local in (("pickup_datetime", row.pickup), ("dropoff_datetime", row.dropoff)):
        utc = eastern_to_utc(local)
        if utc is None:
            return Rejected(
                Rule.NONEXISTENT_LOCAL_TIME,
                f"{name}: {_show(row.cells[_INDEX[name]])} falls in the spring-forward gap; that New York wall-clock time never happened",
            )
        moments.append(utc.strftime(_UTC_FORMAT))

    year = row.pickup.year
    cells = [
        "" if row.vendor_id is None else vendors_in(year)[row.vendor_id],
        moments[0],
        moments[1],
        "" if row.passenger_count is None else str(row.passenger_count),
        "" if row.trip_distance is None else format(row.trip_distance, "f"),
        "" if row.rate_code is None else RATE_CODES[row.rate_code],
        row.store_and_fwd,
        str(row.pu_location_id),
        str(row.do_location_id),
        "" if row.payment_type is None else payment_types_in(year)[row.payment_type],
        *(_cents(row.amounts[name]) for name in AMOUNTS),
    ]
    return Accepted(tuple=OUTPUT_SEPARATOR.join(cells))


# --- the stored item --------------------------------------------------------------------------

_UTC_TEXT: Final = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"
_CENTS_TEXT: Final = r"-?\d{1,5}\.\d{2}"
_INT_TEXT: Final = r"\d{1,3}"
_NAMED_CODES: Final = {"vendor_id": _VENDOR_IDS, "rate_code_id": _RATE_CODE_IDS, "payment_type": _PAYMENT_TYPE_IDS}


def _named_code(name: str, text: str) -> int:
    try:
        return _NAMED_CODES[name][text]
    except KeyError:
        raise ValueError(f"{name}: {_show(text)} is not a known name") from None


def _utc(name: str, text: str) -> datetime:
    if not re.fullmatch(_UTC_TEXT, text):
        raise ValueError(f"{name}: {_show(text)} is not a UTC time like 2019-10-23T20:39:42Z")
    return datetime.strptime(text, _UTC_FORMAT).replace(tzinfo=UTC)


def _integer(name: str, text: str, allowed: range) -> int:
    if not re.fullmatch(_INT_TEXT, text) or int(text) not in allowed:
        raise ValueError(f"{name}: {_show(text)} is not an integer in {allowed.start}..{allowed.stop - 1}")
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
            raise ValueError(f"trip_distance: {_show(value['trip_distance'])} is not a non-negative decimal")
        item["trip_distance"] = Decimal(value["trip_distance"])
    if value["store_and_fwd_flag"]:
        if value["store_and_fwd_flag"] not in STORE_AND_FWD_FLAGS:
            raise ValueError(f"store_and_fwd_flag: {_show(value['store_and_fwd_flag'])} is not Y or N")
        item["store_and_fwd"] = STORE_AND_FWD_FLAGS[value["store_and_fwd_flag"]]
    item["pu_location_id"] = _integer("pu_location_id", value["pu_location_id"], LOCATION_IDS)
    item["do_location_id"] = _integer("do_location_id", value["do_location_id"], LOCATION_IDS)
    amounts: dict[str, Decimal] = {}
    for name in AMOUNTS:
        if not re.fullmatch(_CENTS_TEXT, value[name]):
            raise ValueError(f"{name}: {_show(value[name])} is not an amount with 2 decimal places")
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
