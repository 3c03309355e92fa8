"""A raw CSV line of TLC yellow-taxi data: its validation, its transform into the tuple the store
phase reads, and its one canonical spelling (the API's content id); Accepted and Rejected are what a
check returns. Pure, like runtime/taxi_etl/trips.py, whose columns, code tables and rules it uses.

TLC records carry New York wall-clock times. The transform converts them to UTC by the US DST
rule in force since 2007 rather than through zoneinfo: the Lambda asset ships no third-party
packages (no tzdata) and the function must not depend on the OS time-zone database.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from enum import StrEnum
from typing import Final, NamedTuple, TypeVar

# Relative: the clients import this module as onceflow.runtime.taxi_etl.trip_lines from the installed
# wheel, which has no top-level `runtime` package (Lambda's name for the same folder).
from .trips import (
    AMOUNTS,
    COLUMN_COUNTS,
    COLUMNS,
    EARLIEST_LOCAL,
    INPUT_SEPARATOR,
    LATEST_LOCAL_EXCLUSIVE,
    LOCATION_IDS,
    MAX_ABS_AMOUNT,
    MAX_LINE_BYTES,
    MAX_TRIP,
    MAX_TRIP_DISTANCE,
    OPTIONAL_AMOUNTS,
    OUTPUT_SEPARATOR,
    PASSENGER_COUNTS,
    RATE_CODES,
    STORE_AND_FWD_FLAGS,
    UNKNOWN_PAYMENT_BEFORE_2025,
    UTC_FORMAT,
    Rule,
    payment_types_in,
    show,
    vendors_in,
)

_INDEX: Final = {name: index for index, name in enumerate(COLUMNS)}
_Value = TypeVar("_Value")
_HEADER_FIRST_CELLS: Final = frozenset({"vendorid", "vendor_id", "vendor_name"})
_CENT: Final = Decimal("0.01")


_Names = tuple[str, ...]  # an alias, because the field named `tuple` below shadows the builtin in the class body


@dataclass(frozen=True, slots=True)
class Accepted:
    """A row a phase passed, as the next phase reads it."""

    tuple: str  # the output line of the phase
    blanked: _Names = ()  # names of unimportant columns blanked by validation


@dataclass(frozen=True, slots=True)
class Rejected:
    """A row a phase rejected: the rule it broke (the verdict's detail) and why."""

    rule: Rule
    message: str  # human-readable, names the column and the offending value (values truncated to 40 chars)


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


def headerless_layout(field_counts: Sequence[int | None]) -> tuple[int, int] | None:
    """The field count that decides the layout of headerless lines with these counts (None: not one CSV record), and
    how many lines have it: the first line's, unless more lines have one other count of a trip's shape; so a first
    line cut short (a 2019 row at 17 fields passes for a 2017 one) is refused, not every good line after it.
    None when no line has a trip's shape."""
    shaped = Counter(count for count in field_counts if count in COLUMN_COUNTS)
    if not shaped:
        return None
    first = field_counts[0]
    most, agreeing = shaped.most_common(1)[0]
    if first is not None and shaped[first] >= agreeing:
        return first, shaped[first]
    return most, agreeing


def is_header(columns: list[str]) -> bool:
    return bool(columns) and columns[0].strip().lstrip("\ufeff").strip().lower() in _HEADER_FIRST_CELLS


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
_ANY_LENGTH_CODE: Final = re.compile(r"(\d+)(?:\.0*)?")  # a code's spelling at any length, for a blanked one's id
_DECIMAL: Final = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"  # no exponents, NaN or Infinity
# A "+" is read as amounts read it; bounded places so DynamoDB's 38 digits always suffice.
_DISTANCE: Final = r"\+?(?:\d+(?:\.\d{0,20})?|\.\d{1,20})"


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
    blanked_values: _Names  # the stripped values of the blanked cells, in the order `blanked` names them
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

    __slots__ = (
        "amounts",
        "blanked",
        "blanked_values",
        "cells",
        "locations",
        "passenger_count",
        "payment_type",
        "rate_code",
        "trip_distance",
        "vendor_id",
    )

    def __init__(self, cells: list[str]) -> None:
        self.cells = cells
        self.blanked: list[str] = []
        self.blanked_values: list[str] = []
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
            self.blanked_values.append(text)
        return value

    def row(self, pickup: datetime, dropoff: datetime) -> _Row:
        return _Row(
            cells=tuple(self.cells),
            blanked=tuple(self.blanked),
            blanked_values=tuple(self.blanked_values),
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
        return Rejected(Rule.HEADER_LINE, f"vendor_id: {show(columns[0])} is a CSV header cell, not a vendor code")
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
            return Rejected(rule, f"{name}: {show(draft.cell(name))} is not a date-time in a TLC format")
        if not EARLIEST_LOCAL <= moment < LATEST_LOCAL_EXCLUSIVE:
            return Rejected(rule, f"{name}: {show(draft.cell(name))} is outside 2009-01-01..2100-12-31")
        moments.append(moment)
    return moments[0], moments[1]


def _check_vendor(draft: _Draft, year: int) -> Rejected | None:
    text = draft.cell("vendor_id")
    vendors = vendors_in(year)
    draft.vendor_id = _parse_code(text) if text else None
    if text and (draft.vendor_id is None or draft.vendor_id not in vendors):
        return Rejected(Rule.VENDOR, f"vendor_id: {show(text)} is not a vendor code of {year} {sorted(vendors)}")
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
            return Rejected(rule, f"{name}: {show(draft.cell(name))} is not a taxi zone id 1..265")
        draft.locations.append(location)
    return None


def _check_payment(draft: _Draft, year: int) -> Rejected | None:
    text = draft.cell("payment_type")
    payments = payment_types_in(year)
    draft.payment_type = _parse_code(text) if text else None
    if draft.payment_type == UNKNOWN_PAYMENT_BEFORE_2025 and draft.payment_type not in payments:
        draft.payment_type = None
    elif text and (draft.payment_type is None or draft.payment_type not in payments):
        return Rejected(Rule.PAYMENT_TYPE, f"payment_type: {show(text)} is not a payment type of {year} {sorted(payments)}")
    return None


def _check_amounts(draft: _Draft, year: int) -> Rejected | None:
    for name in AMOUNTS:
        text = draft.cell(name)
        if not text and name in OPTIONAL_AMOUNTS:
            draft.amounts[name] = Decimal(0)
            continue
        parsed = _parse_amount(text)
        if isinstance(parsed, str):
            return Rejected(Rule.AMOUNT, f"{name}: {show(text)} {parsed}")
        draft.amounts[name] = parsed
    return None


def _check_duration(draft: _Draft, pickup: datetime, dropoff: datetime) -> Rejected | None:
    # Wall-clock order equals UTC order: taking the first occurrence of ambiguous times keeps local→UTC strictly increasing.
    # A drop-off equal to the pick-up is a real (charged) trip with a finding; one before it cannot be a trip.
    shown_pickup, shown_dropoff = show(draft.cell("pickup_datetime")), show(draft.cell("dropoff_datetime"))
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
    checked = _validated(raw)
    if isinstance(checked, Rejected):
        return checked
    return Accepted(tuple=_csv_line(checked.cells), blanked=checked.blanked)


def _validated(raw: str) -> _Row | Rejected:
    line = raw[:-2] if raw.endswith("\r\n") else raw[:-1] if raw.endswith(("\n", "\r")) else raw
    if len(line) > MAX_LINE_BYTES or len(line.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
        return Rejected(Rule.LINE_TOO_LONG, f"the line is longer than {MAX_LINE_BYTES} utf-8 bytes: {show(line)}")
    line = line.removeprefix("\ufeff")  # a byte-order mark left on the first line of a file
    if "\n" in line or "\r" in line:
        return Rejected(Rule.COLUMN_COUNT, f"the line contains an embedded line break: {show(line)}")
    try:
        columns = line_columns(line)
    except ValueError as error:
        return Rejected(Rule.COLUMN_COUNT, f"{error}: {show(line)}")
    return _check(columns)


_CANONICAL_DATETIME: Final = "%Y-%m-%dT%H:%M:%S.000"  # the NYC Open Data spelling, so most lines are canonical as sent
_CODE_COLUMNS: Final = ("vendor_id", "passenger_count", "rate_code_id", "pu_location_id", "do_location_id", "payment_type")
_DISTANCE_PLACES: Final = Decimal("0.01")
_EXACT: Final = Context(prec=2 * MAX_LINE_BYTES)  # more digits than any cell of a line can have: no rounding
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


def _blanked_spelling(name: str, text: str) -> str:
    """The normalized spelling of a value validation blanked (stripped): codes as integers, at any length ("0100000000"
    and "100000000.0" are 100000000), decimal distances with two places, as valid ones are written; anything else as
    sent. Exact, at any length: two values that differ never share a spelling. canonical_line keeps it only if the
    cell is still blanked with it."""
    if name == "trip_distance" and re.fullmatch(_DECIMAL, text):
        value = Decimal(text).normalize(_EXACT)
        places = value.quantize(_DISTANCE_PLACES, context=_EXACT) if value.as_tuple().exponent > -2 else value  # type: ignore[operator]
        return format(places, "f")
    if name in _CODE_COLUMNS and (digits := _ANY_LENGTH_CODE.fullmatch(text)):
        return digits.group(1).lstrip("0") or "0"
    return text


def _still_blanked(row: _Row, name: str, spelled: str) -> bool:
    """Whether validation blanks `name` with `spelled` in it: a value blanked for its length alone ("0000000001" in a
    code column) can mean a valid one, and must then keep its spelling as sent, or the line would be another trip."""
    cells = list(row.cells)
    cells[_INDEX[name]] = spelled
    checked = _check(cells)
    return not isinstance(checked, Rejected) and name in checked.blanked


def canonical_line(raw: str) -> str | None:
    """The one spelling of the trip a line describes, or None when the line does not validate.

    A trip's content id is the hash of this text, so it must depend on the parsed values alone:
    a byte-order mark, CRLF, quoting, blanks around values, any TLC date format (the same wall-clock
    second, which is one instant), codes written as floats ("1.0") or with leading zeros, amounts
    and distances with more or fewer trailing zeros or a leading "+", an empty fee (0), payment_type 0
    before 2025 (unknown, as an empty one), and the fee columns a file's layout has or leaves out all
    give the same text. Dates are written as NYC Open Data writes them, amounts in their shortest form
    and distances with two places, so an Open Data line is canonical as sent.

    A cell validation blanks keeps its value here (`_blanked_spelling`), so rows that differ only in such
    a cell are two trips; validating the canonical line blanks it again, so the line is its own canonical line.
    """
    row = _validated(raw)
    if isinstance(row, Rejected):
        return None
    cells = list(row.cells)
    cells += [""] * (len(COLUMNS) - len(cells))  # absent fees are empty, as validation reads them (0)
    for name in ("pickup_datetime", "dropoff_datetime"):
        moment = parse_local_datetime(cells[_INDEX[name]])
        assert moment is not None  # validated
        cells[_INDEX[name]] = moment.strftime(_CANONICAL_DATETIME)
    for name in _CODE_COLUMNS:
        code = _parse_code(cells[_INDEX[name]]) if cells[_INDEX[name]] else None
        if code is not None:
            cells[_INDEX[name]] = str(code)
    if row.payment_type is None:  # empty, or 0 before the 2025 edition: both unknown
        cells[_INDEX["payment_type"]] = ""
    if cells[_INDEX["trip_distance"]]:
        cells[_INDEX["trip_distance"]] = _canonical_distance(cells[_INDEX["trip_distance"]])
    for name in AMOUNTS:
        cells[_INDEX[name]] = _canonical_amount(cells[_INDEX[name]])
    for name, text in zip(row.blanked, row.blanked_values, strict=True):
        spelled = _blanked_spelling(name, text)
        cells[_INDEX[name]] = spelled if spelled == text or _still_blanked(row, name, spelled) else text
    # In the 18- and 19-column layouts a number where store_and_fwd_flag stands is a 2009-2016 coordinate (row_schema):
    # a row that kept such a blanked flag keeps all 20 columns, a layout that has no coordinates.
    flag = cells[_INDEX["store_and_fwd_flag"]]
    keep = len(COLUMNS) if flag not in STORE_AND_FWD_FLAGS and re.fullmatch(_NUMBER, flag) else _CANONICAL_MIN_COLUMNS
    while len(cells) > keep and cells[-1] == "0":
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
        return Rejected(Rule.MALFORMED_TUPLE, f"{error}: {show(validated)}")
    row = _check(columns)
    if isinstance(row, Rejected):
        return Rejected(Rule.MALFORMED_TUPLE, f"not a validated tuple ({row.rule}: {row.message})")
    if row.blanked or _csv_line(row.cells) != validated:
        return Rejected(Rule.MALFORMED_TUPLE, f"not a validated tuple (validation would rewrite it): {show(validated)}")

    moments: list[str] = []
    for name, local in (("pickup_datetime", row.pickup), ("dropoff_datetime", row.dropoff)):
        utc = eastern_to_utc(local)
        if utc is None:
            return Rejected(
                Rule.NONEXISTENT_LOCAL_TIME,
                f"{name}: {show(row.cells[_INDEX[name]])} falls in the spring-forward gap; that New York wall-clock time never happened",
            )
        moments.append(utc.strftime(UTC_FORMAT))

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
