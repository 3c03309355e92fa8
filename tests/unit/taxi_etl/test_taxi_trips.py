"""The pure taxi-row logic (runtime/taxi_etl/trips.py, trip_lines.py, trip_items.py): validate, transform, and the stored item.

No I/O beyond reading the committed sample tests/data/taxi_etl/yellow_2019-10_sample.csv (real NYC TLC
rows, see its README). Edge cases are minimal edits of real rows, so each test changes one thing.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer  # imported at collection: urllib3 probes a socket on import

from runtime.taxi_etl.trip_items import charges, final_item, same_trip
from runtime.taxi_etl.trip_lines import (
    Accepted,
    Rejected,
    Schema,
    canonical_line,
    dst_bounds,
    eastern_to_utc,
    header_schema,
    line_columns,
    parse_local_datetime,
    row_schema,
    transform_tuple,
    validate_line,
)
from runtime.taxi_etl.trips import AMOUNTS, COLUMNS, MAX_LINE_BYTES, OUTPUT_SEPARATOR, UNEXPLAINED, Finding, Reason, Rule

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"


@cache
def sample_lines() -> tuple[str, ...]:
    """The sample file's lines, header first; `sample_line(n)` is line n of the file as an editor numbers it."""
    return tuple(SAMPLE.read_text(encoding="utf-8").splitlines())


def sample_line(number: int) -> str:
    return sample_lines()[number - 1]


# Real rows used below (file line numbers).
GOOD = 2  # credit-card trip, total includes congestion_surcharge
REFUND = 18  # cash refund: every amount negative
CONGESTION_QUIRK = 10  # total_amount leaves out congestion_surcharge 2.5
SAME_SECOND = 731  # drop-off at the pick-up second
TOTAL_195 = (875, 1172, 1902)  # total 1.95 above its parts


# The item attribute each unimportant column becomes (omitted when the column is blank).
ITEM_KEYS = {
    "passenger_count": "passenger_count",
    "trip_distance": "trip_distance",
    "rate_code_id": "rate_code",
    "store_and_fwd_flag": "store_and_fwd",
}


def edit(line: str, **changes: str) -> str:
    """`line` with the named canonical columns replaced (or, for airport_fee/cbd_congestion_fee, appended)."""
    cells = line_columns(line)
    for name, value in changes.items():
        index = COLUMNS.index(name)
        while len(cells) <= index:
            cells.append("")
        cells[index] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


def accepted(result: Accepted | Rejected) -> Accepted:
    assert isinstance(result, Accepted), result
    return result


def rejected(result: Accepted | Rejected) -> Rejected:
    assert isinstance(result, Rejected), result
    return result


def transformed_cells(line: str) -> dict[str, str]:
    output = accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple
    cells = output.split(OUTPUT_SEPARATOR)
    assert len(cells) == len(COLUMNS)
    return dict(zip(COLUMNS, cells, strict=True))


# --- structure --------------------------------------------------------------------------------


def test_the_enums_carry_the_documented_values() -> None:
    # Given the status tables store reason codes and rule details
    # Then the codes and a sample of the detail strings are the documented ones
    assert [int(reason) for reason in Reason] == [0, 1, 2, 3]
    assert Finding("total_amount_mismatch") is Finding.TOTAL_AMOUNT_MISMATCH
    assert Rule("dropoff_before_pickup") is Rule.DROPOFF_BEFORE_PICKUP
    assert Rule.NONEXISTENT_LOCAL_TIME.value == "nonexistent_local_time"
    assert all(rule.value == rule.value.lower() and " " not in rule.value for rule in Rule)
    assert len(COLUMNS) == 20 and len(set(COLUMNS)) == 20


def test_a_real_good_row_is_accepted_unchanged() -> None:
    # Given a real row with a trailing newline
    raw = sample_line(GOOD) + "\r\n"
    # When it is validated
    result = accepted(validate_line(raw))
    # Then the tuple is the row itself (dates as received), and nothing was blanked
    assert result.tuple == sample_line(GOOD)
    assert result.blanked == ()


@pytest.mark.parametrize("header", [sample_line(1), sample_line(1).replace("vendorid", "VendorID"), "\ufeffVendorID,tpep_pickup_datetime"])
def test_a_header_line_is_rejected(header: str) -> None:
    # Given the portal's lower-case header, the TLC mixed-case header, or a header with a byte-order mark
    # When it is validated
    result = rejected(validate_line(header))
    # Then it is reported as a header, whatever its column count
    assert result.rule is Rule.HEADER_LINE
    assert "vendor" in result.message


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        (",".join(sample_line(GOOD).split(",")[:16]), "got 16"),
        (sample_line(GOOD) + ",0,0,0", "got 21"),
        ("", "got 0"),
        (sample_line(GOOD).replace(",N,", ',"N,'), "well-formed"),
        (sample_line(GOOD).replace(",N,", ',"N"x,'), "well-formed"),
        (sample_line(GOOD) + "\n" + sample_line(GOOD), "line break"),
        (sample_line(GOOD).replace(",N,", ',"N\nY",'), "line break"),
    ],
)
def test_a_line_without_17_to_20_columns_is_rejected(line: str, detail: str) -> None:
    # Given a line with too few or too many columns, no columns, broken quoting, or an embedded line break
    # When it is validated
    result = rejected(validate_line(line))
    # Then it is a column-count rejection that says what was wrong
    assert result.rule is Rule.COLUMN_COUNT
    assert detail in result.message


def test_a_line_longer_than_the_limit_is_rejected_by_bytes_not_characters() -> None:
    # Given a good row padded (with blanks validation strips) to exactly the limit, and one byte over it in utf-8
    base = sample_line(GOOD)
    at_limit = edit(base, trip_distance="7.93" + " " * (MAX_LINE_BYTES - len(base.encode())))
    over_in_bytes = edit(base, store_and_fwd_flag="é" * ((MAX_LINE_BYTES - len(base)) // 2 + 1))
    assert len(at_limit.encode()) == MAX_LINE_BYTES
    assert len(over_in_bytes) <= MAX_LINE_BYTES < len(over_in_bytes.encode())
    # When both are validated
    # Then the first is accepted with the blanks stripped, the second is too long
    assert accepted(validate_line(at_limit)).tuple == base
    too_long = rejected(validate_line(over_in_bytes))
    assert too_long.rule is Rule.LINE_TOO_LONG
    assert "4096" in too_long.message
    assert len(too_long.message) < 200  # the offending value is truncated


def test_cells_are_stripped_and_quoted_cells_are_read() -> None:
    # Given a real row whose odd cells are quoted and even cells carry stray blanks
    line = ",".join(f'"{cell}"' if index % 2 else f" {cell} " for index, cell in enumerate(sample_line(GOOD).split(",")))
    # When it is validated
    # Then the tuple is the clean row
    assert accepted(validate_line(line)).tuple == sample_line(GOOD)


# --- important columns: one rule each ---------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "rule", "column"),
    [
        ({"vendor_id": "3"}, Rule.VENDOR, "vendor_id"),
        ({"vendor_id": "6"}, Rule.VENDOR, "vendor_id"),  # Myle: a code of the 2024 edition, not of 2019
        ({"vendor_id": "two"}, Rule.VENDOR, "vendor_id"),
        ({"pickup_datetime": "yesterday"}, Rule.PICKUP_DATETIME, "pickup_datetime"),
        ({"pickup_datetime": "2019-02-30 16:39:42"}, Rule.PICKUP_DATETIME, "pickup_datetime"),
        ({"pickup_datetime": "2019-10-23T16:39:42Z"}, Rule.PICKUP_DATETIME, "pickup_datetime"),
        ({"pickup_datetime": "2008-12-31 23:59:59"}, Rule.PICKUP_DATETIME, "pickup_datetime"),
        ({"pickup_datetime": "10/23/2019 13:39:42 PM"}, Rule.PICKUP_DATETIME, "pickup_datetime"),
        ({"dropoff_datetime": ""}, Rule.DROPOFF_DATETIME, "dropoff_datetime"),
        ({"dropoff_datetime": "2101-01-01 00:00:00"}, Rule.DROPOFF_DATETIME, "dropoff_datetime"),
        ({"pu_location_id": "0"}, Rule.PICKUP_LOCATION, "pu_location_id"),
        ({"pu_location_id": "266"}, Rule.PICKUP_LOCATION, "pu_location_id"),
        ({"do_location_id": ""}, Rule.DROPOFF_LOCATION, "do_location_id"),
        ({"do_location_id": "-1"}, Rule.DROPOFF_LOCATION, "do_location_id"),
        ({"payment_type": "7"}, Rule.PAYMENT_TYPE, "payment_type"),
        ({"fare_amount": "abc"}, Rule.AMOUNT, "fare_amount"),
        ({"fare_amount": ""}, Rule.AMOUNT, "fare_amount"),
        ({"tip_amount": "7.985"}, Rule.AMOUNT, "tip_amount"),
        ({"tolls_amount": "10000.01"}, Rule.AMOUNT, "tolls_amount"),
        ({"extra": "1e0"}, Rule.AMOUNT, "extra"),
        ({"mta_tax": "NaN"}, Rule.AMOUNT, "mta_tax"),
        ({"total_amount": "-Infinity"}, Rule.AMOUNT, "total_amount"),
        ({"congestion_surcharge": "2,5"}, Rule.AMOUNT, "congestion_surcharge"),
        ({"airport_fee": "x"}, Rule.AMOUNT, "airport_fee"),
        ({"cbd_congestion_fee": "0.755"}, Rule.AMOUNT, "cbd_congestion_fee"),
    ],
)
def test_a_bad_important_column_rejects_the_row(changes: dict[str, str], rule: Rule, column: str) -> None:
    # Given a real good row with one important cell broken
    line = edit(sample_line(GOOD), **changes)
    # When it is validated
    result = rejected(validate_line(line))
    # Then the row is rejected by that column's rule, and the message names the column and the value
    assert result.rule is rule
    assert result.message.startswith(f"{column}: ")
    assert repr(next(iter(changes.values()))) in result.message


def test_a_long_offending_value_is_truncated_in_the_message() -> None:
    # Given a row whose payment_type is a 100-character value
    value = "9" * 100
    # When it is validated
    result = rejected(validate_line(edit(sample_line(GOOD), payment_type=value)))
    # Then the message shows only its first 40 characters
    assert result.rule is Rule.PAYMENT_TYPE
    assert repr("9" * 40 + "...") in result.message
    assert "9" * 41 not in result.message


@pytest.mark.parametrize(
    "changes",
    [
        {"vendor_id": "1"},
        {"vendor_id": ""},
        {"vendor_id": "6", "pickup_datetime": "2024-10-23 16:39:42", "dropoff_datetime": "2024-10-23 17:14:10"},
        {"vendor_id": "7", "pickup_datetime": "2025-10-23 16:39:42", "dropoff_datetime": "2025-10-23 17:14:10"},
        {"vendor_id": "2.0"},
        {"pu_location_id": "264", "do_location_id": "265"},
        {"pu_location_id": "1", "do_location_id": "1.0"},
        {"payment_type": "0"},
        {"payment_type": ""},
        {"payment_type": "6"},
        {"pickup_datetime": "2009-01-01 00:00:00", "dropoff_datetime": "2009-01-01 00:10:00"},
        {"pickup_datetime": "2100-12-31 23:00:00", "dropoff_datetime": "2100-12-31 23:59:59"},
        {"fare_amount": "29.50", "tip_amount": "+7.98"},
        {"fare_amount": "29.500"},
        {"congestion_surcharge": ""},
    ],
)
def test_valid_edge_values_of_important_columns_are_accepted(changes: dict[str, str]) -> None:
    # Given a real good row with an unusual but valid important cell
    line = edit(sample_line(GOOD), **changes)
    if changes.get("congestion_surcharge") == "":
        line = edit(line, total_amount="45.4")  # the total without the (now empty) surcharge
    # When it is validated and transformed
    # Then both accept it and nothing is blanked
    assert accepted(validate_line(line)).blanked == ()
    accepted(transform_tuple(accepted(validate_line(line)).tuple))


def test_amounts_may_be_at_the_limit_in_either_direction() -> None:
    # Given a refund whose total is -10000 and a trip whose total is 10000.00, both summing correctly
    refund = edit(sample_line(REFUND), fare_amount="-9998.20", total_amount="-10000")
    trip = edit(sample_line(GOOD), fare_amount="9984.10", total_amount="10000.00")
    # When they are validated
    # Then they are accepted; a cent further is not
    accepted(validate_line(refund))
    accepted(validate_line(trip))
    assert rejected(validate_line(edit(refund, total_amount="-10000.01"))).rule is Rule.AMOUNT
    assert rejected(validate_line(edit(trip, total_amount="10000.01"))).rule is Rule.AMOUNT


# --- cross-column rules -----------------------------------------------------------------------


@pytest.mark.parametrize("dropoff", ["2019-10-23T16:39:41.000", "2019-10-22 17:14:10"])
def test_a_dropoff_before_the_pickup_is_rejected(dropoff: str) -> None:
    # Given a good row whose drop-off is before the pick-up
    line = edit(sample_line(GOOD), dropoff_datetime=dropoff)
    # When it is validated
    result = rejected(validate_line(line))
    # Then it cannot be a trip: rejected, naming both times
    assert result.rule is Rule.DROPOFF_BEFORE_PICKUP
    assert dropoff in result.message and "2019-10-23T16:39:42.000" in result.message


@pytest.mark.parametrize("dropoff", ["2019-10-23T16:39:42.000", "2019-10-23T16:39:42.999"])
def test_a_dropoff_at_the_pickup_second_is_a_trip_stored_with_a_finding(dropoff: str) -> None:
    # Given a good row whose drop-off is the pick-up second (fractions are dropped)
    line = edit(sample_line(GOOD), dropoff_datetime=dropoff)
    # When it is validated, transformed and its item built
    item = final_item("r", accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple)
    # Then it is stored, zero seconds long, with that finding and nothing else odd
    assert item["trip_seconds"] == 0
    assert item["findings"] == [Finding.DROPOFF_EQUALS_PICKUP.value]
    assert "unexplained_amount" not in item


def test_a_trip_longer_than_24_hours_is_rejected_and_24_hours_is_accepted() -> None:
    # Given trips of exactly 24 h and 24 h + 1 s
    exactly = edit(sample_line(GOOD), dropoff_datetime="2019-10-24T16:39:42.000")
    longer = edit(sample_line(GOOD), dropoff_datetime="2019-10-24T16:39:43.000")
    # When they are validated
    # Then the first is accepted and the second rejected
    accepted(validate_line(exactly))
    result = rejected(validate_line(longer))
    assert result.rule is Rule.TRIP_TOO_LONG
    assert "1 day, 0:00:01" in result.message


def test_trip_length_is_elapsed_time_across_a_dst_change() -> None:
    # Given trips of 23 h 30 min wall-clock that span the fall-back (24 h 30 min elapsed) and spring-forward (22 h 30 min)
    fall = edit(sample_line(GOOD), pickup_datetime="2019-11-02 12:00:00", dropoff_datetime="2019-11-03 11:30:00")
    spring = edit(sample_line(GOOD), pickup_datetime="2019-03-09 12:00:00", dropoff_datetime="2019-03-10 11:30:00")
    # When they are validated
    # Then the fall one is too long and the spring one is not
    assert rejected(validate_line(fall)).rule is Rule.TRIP_TOO_LONG
    item = final_item("r", accepted(transform_tuple(accepted(validate_line(spring)).tuple)).tuple)
    assert item["trip_seconds"] == 22 * 3600 + 30 * 60


def test_the_total_may_include_the_congestion_surcharge_or_hold_it_in_extra() -> None:
    # Given the real row whose total includes congestion_surcharge, and the real vendor-1 row whose
    # `extra` already holds the 2.50 (3.50 = 1.00 + 2.50), so the columns exceed the total by 2.50
    with_congestion = sample_line(GOOD)
    in_extra = sample_line(CONGESTION_QUIRK)
    # When they are validated and their items built
    items = [final_item("r", accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple) for line in (with_congestion, in_extra)]
    # Then both are accepted as they are, with no finding; the columns are kept as the file gave them,
    # and the charges take the surcharge out of `extra`, so that they sum to the total
    assert accepted(validate_line(in_extra)).tuple == in_extra
    assert all("findings" not in item for item in items)
    assert (items[1]["extra"], items[1]["congestion_surcharge"], items[1]["total_amount"]) == (
        Decimal("3.50"),
        Decimal("2.50"),
        Decimal("12.95"),
    )
    assert (items[1]["charges"]["extra"], items[1]["charges"]["congestion_surcharge"]) == (Decimal("1.00"), Decimal("2.50"))
    assert [sum(item["charges"].values()) for item in items] == [item["total_amount"] for item in items]


@pytest.mark.parametrize(
    ("total", "unexplained"),
    [("47.90", None), ("47.91", "0.01"), ("47.89", "-0.01"), ("45.40", "-2.50"), ("49.85", "1.95"), ("-47.90", "-95.80")],
)
def test_a_total_the_columns_do_not_explain_is_stored_with_the_unexplained_amount(total: str, unexplained: str | None) -> None:
    # Given the good row (charges 47.90, extra 1.00 so it cannot hold the congestion surcharge) with its total moved
    line = edit(sample_line(GOOD), total_amount=total)
    # When it is validated, transformed and its item built
    item = final_item("r", accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple)
    # Then the trip is stored; a total the columns do not make is a finding, its difference is
    # recorded, and the charges (with `unexplained`) still sum to the total exactly
    assert item.get("findings", []) == ([] if unexplained is None else [Finding.TOTAL_AMOUNT_MISMATCH.value])
    assert item.get("unexplained_amount") == (None if unexplained is None else Decimal(unexplained))
    assert item["charges"][UNEXPLAINED] == Decimal(unexplained or 0)
    assert sum(item["charges"].values()) == Decimal(total)


@pytest.mark.parametrize("number", TOTAL_195)
def test_real_rows_whose_total_is_195_above_their_parts_are_stored_with_a_finding(number: int) -> None:
    # Given a real vendor-2 row whose total is 1.95 more than its columns (a charge added after the tip, with no column)
    # When it is validated, transformed and its item built
    item = final_item("r", accepted(transform_tuple(accepted(validate_line(sample_line(number))).tuple)).tuple)
    # Then it is stored with the mismatch and 1.95 unexplained
    assert item["findings"] == [Finding.TOTAL_AMOUNT_MISMATCH.value]
    assert item["unexplained_amount"] == Decimal("1.95")
    assert item["vendor"] == "VeriFone Inc."


def test_charges_take_a_negative_surcharge_out_of_a_negative_extra_only() -> None:
    # Given refund amounts: extra -3.50 holding congestion -2.50, and extra -1.00 that cannot hold it
    base = {name: Decimal(0) for name in AMOUNTS}
    refund = base | {"fare_amount": Decimal("-10.00"), "extra": Decimal("-3.50"), "congestion_surcharge": Decimal("-2.50")}
    held = charges(refund | {"total_amount": Decimal("-13.50")}, 1)
    not_held = charges(refund | {"extra": Decimal("-1.00"), "total_amount": Decimal("-11.00")}, 1)
    # Then the first is explained by taking -2.50 out of extra; the second is not
    assert (held["extra"], held[UNEXPLAINED]) == (Decimal("-1.00"), Decimal(0))
    assert (not_held["extra"], not_held[UNEXPLAINED]) == (Decimal("-1.00"), Decimal("2.50"))


def test_a_real_refund_row_with_negative_amounts_is_accepted() -> None:
    # Given a real cash refund: every amount negative
    line = sample_line(REFUND)
    # When it is validated and transformed
    cells = transformed_cells(line)
    # Then the amounts keep their sign, in cents
    assert [cells[name] for name in AMOUNTS] == ["-5.50", "-1.00", "-0.50", "0.00", "0.00", "-0.30", "-7.30", "0.00", "0.00", "0.00"]
    assert cells["payment_type"] == "Cash"


def test_a_real_row_with_a_negative_congestion_surcharge_is_accepted() -> None:
    # Given real no-charge refunds whose congestion_surcharge is -2.5
    for number in (297, 299, 1047, 1542):
        assert line_columns(sample_line(number))[COLUMNS.index("congestion_surcharge")] == "-2.5"
        # When validated
        # Then accepted
        accepted(validate_line(sample_line(number)))


# --- unimportant columns: blanked, not rejected -----------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("passenger_count", "x"),
        ("passenger_count", "10"),
        ("passenger_count", "1.5"),
        ("passenger_count", "-1"),
        ("trip_distance", "-1.2"),
        ("trip_distance", "1000"),
        ("trip_distance", "7,93"),
        ("trip_distance", "1e3"),
        ("rate_code_id", "7"),
        ("rate_code_id", "0"),
        ("rate_code_id", "JFK"),
        ("store_and_fwd_flag", "X"),
        ("store_and_fwd_flag", "yes"),
        ("store_and_fwd_flag", "n"),
    ],
)
def test_an_unusable_unimportant_value_is_blanked_and_the_row_kept(column: str, value: str) -> None:
    # Given a real good row with one unimportant cell unusable
    line = edit(sample_line(GOOD), **{column: value})
    # When it is validated
    result = accepted(validate_line(line))
    # Then the cell is empty in the tuple, its name is reported, and the rest is unchanged
    assert result.blanked == (column,)
    assert result.tuple == edit(sample_line(GOOD), **{column: ""})
    # And the transform and the item leave it out
    cells = accepted(transform_tuple(result.tuple)).tuple.split(OUTPUT_SEPARATOR)
    assert cells[COLUMNS.index(column)] == ""
    item = final_item("r", OUTPUT_SEPARATOR.join(cells))
    assert ITEM_KEYS[column] not in item


def test_several_blanked_columns_are_reported_in_column_order() -> None:
    # Given a row with all four unimportant cells unusable
    line = edit(sample_line(GOOD), store_and_fwd_flag="?", rate_code_id="8", trip_distance="far", passenger_count="many")
    # When it is validated
    result = accepted(validate_line(line))
    # Then all four are blanked, named in column order
    assert result.blanked == ("passenger_count", "trip_distance", "rate_code_id", "store_and_fwd_flag")


def test_empty_unimportant_columns_are_allowed_and_not_reported() -> None:
    # Given a row whose unimportant cells are already empty
    line = edit(sample_line(GOOD), passenger_count="", trip_distance="", rate_code_id="", store_and_fwd_flag="")
    # When it is validated
    result = accepted(validate_line(line))
    # Then nothing counts as blanked
    assert result.blanked == ()
    assert result.tuple == line


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("passenger_count", "0", "0"),
        ("passenger_count", "9", "9"),
        ("passenger_count", "1.0", "1"),
        ("trip_distance", "0.00", "0.00"),
        ("trip_distance", "999.99", "999.99"),
        ("trip_distance", ".5", "0.5"),
        ("rate_code_id", "6", "Group ride"),
        ("rate_code_id", "99", "Null/unknown"),
        ("rate_code_id", "4.0", "Nassau or Westchester"),
        ("store_and_fwd_flag", "Y", "Y"),
    ],
)
def test_valid_unimportant_values_are_kept_and_normalized(column: str, value: str, expected: str) -> None:
    # Given a row with an edge value in an unimportant column
    line = edit(sample_line(GOOD), **{column: value})
    # When it is validated and transformed
    # Then nothing is blanked and the transform writes the normalized value
    assert accepted(validate_line(line)).blanked == ()
    assert transformed_cells(line)[column] == expected


# --- dates, schemas and the transform ---------------------------------------------------------


@pytest.mark.parametrize(
    ("pickup", "dropoff"),
    [
        ("2019-10-23T16:39:42.000", "2019-10-23T17:14:10.000"),
        ("2019-10-23T16:39:42", "2019-10-23T17:14:10"),
        ("2019-10-23 16:39:42", "2019-10-23 17:14:10"),
        ("10/23/2019 04:39:42 PM", "10/23/2019 05:14:10 PM"),
        ("10/23/2019 04:39:42 pm", "10/23/2019 5:14:10 PM"),
    ],
)
def test_the_three_date_formats_give_the_same_utc_times(pickup: str, dropoff: str) -> None:
    # Given the good row with its dates in each TLC format
    line = edit(sample_line(GOOD), pickup_datetime=pickup, dropoff_datetime=dropoff)
    # When it is validated, the dates are kept as received
    assert accepted(validate_line(line)).tuple == line
    # Then the transform writes the same UTC times (EDT is UTC-4)
    cells = transformed_cells(line)
    assert (cells["pickup_datetime"], cells["dropoff_datetime"]) == ("2019-10-23T20:39:42Z", "2019-10-23T21:14:10Z")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("01/05/2019 12:05:00 AM", datetime(2019, 1, 5, 0, 5)),
        ("01/05/2019 12:05:00 PM", datetime(2019, 1, 5, 12, 5)),
        ("01/05/2019 11:59:59 PM", datetime(2019, 1, 5, 23, 59, 59)),
        ("2019-01-05T12:05:00.123", datetime(2019, 1, 5, 12, 5)),
        ("01/05/2019 00:05:00 AM", None),
        ("2019-1-5 12:05:00", None),
        ("2019-01-05", None),
    ],
)
def test_local_datetime_parsing(text: str, expected: datetime | None) -> None:
    # Given a date text / When it is parsed / Then 12 AM is midnight, fractions are dropped, other shapes are refused
    assert parse_local_datetime(text) == expected


def test_19_and_20_column_rows_are_accepted_and_their_fees_counted() -> None:
    # Given the good row with airport_fee (2022 schema), and with cbd_congestion_fee too (2025 schema), totals adjusted
    nineteen = edit(sample_line(GOOD), airport_fee="1.75", total_amount="49.65")
    twenty = edit(sample_line(GOOD), airport_fee="1.75", cbd_congestion_fee="0.75", total_amount="50.40")
    twenty_empty = edit(sample_line(GOOD), airport_fee="", cbd_congestion_fee="")
    # When they are validated and transformed
    # Then they keep their column count in the tuple, and the transform always writes 20 columns
    assert len(line_columns(accepted(validate_line(nineteen)).tuple)) == 19
    assert len(line_columns(accepted(validate_line(twenty)).tuple)) == 20
    assert [transformed_cells(nineteen)[name] for name in ("total_amount", "airport_fee", "cbd_congestion_fee")] == [
        "49.65",
        "1.75",
        "0.00",
    ]
    assert [transformed_cells(twenty)[name] for name in ("total_amount", "airport_fee", "cbd_congestion_fee")] == ["50.40", "1.75", "0.75"]
    assert [transformed_cells(twenty_empty)[name] for name in ("airport_fee", "cbd_congestion_fee")] == ["0.00", "0.00"]
    # And a fee missing from the total is a finding, with that fee unexplained
    item = final_item("r", accepted(transform_tuple(accepted(validate_line(edit(nineteen, total_amount="47.90"))).tuple)).tuple)
    assert (item["findings"], item["unexplained_amount"]) == ([Finding.TOTAL_AMOUNT_MISMATCH.value], Decimal("-1.75"))


def test_a_real_row_transforms_to_the_exact_expected_tuple() -> None:
    # Given the first real row
    validated = accepted(validate_line(sample_line(GOOD))).tuple
    # When it is transformed
    result = accepted(transform_tuple(validated))
    # Then names replace codes, times are UTC, amounts have cents, and the absent fees are 0.00
    assert result.tuple == "\t".join(
        [
            "VeriFone Inc.",
            "2019-10-23T20:39:42Z",
            "2019-10-23T21:14:10Z",
            "1",
            "7.93",
            "Standard rate",
            "N",
            "138",
            "170",
            "Credit card",
            "29.50",
            "1.00",
            "0.50",
            "7.98",
            "6.12",
            "0.30",
            "47.90",
            "2.50",
            "0.00",
            "0.00",
        ]
    )
    assert result.blanked == ()


def test_the_quirk_row_transforms_with_its_congestion_kept_apart() -> None:
    # Given the real vendor-1 row whose total leaves out congestion_surcharge
    # When it is transformed
    cells = transformed_cells(sample_line(CONGESTION_QUIRK))
    # Then the amounts are carried as recorded
    assert cells["vendor_id"] == "Creative Mobile Technologies, LLC"
    assert (cells["extra"], cells["total_amount"], cells["congestion_surcharge"]) == ("3.50", "12.95", "2.50")


@pytest.mark.parametrize("moment", ["2019-03-10 02:00:00", "2019-03-10T02:30:00.000", "03/10/2019 02:59:59 AM", "2024-03-10 02:15:00"])
@pytest.mark.parametrize("column", ["pickup_datetime", "dropoff_datetime"])
def test_a_time_in_the_spring_forward_gap_fails_the_transform(moment: str, column: str) -> None:
    # Given a row with a pick-up or drop-off in the hour clocks skip (02:00-03:00 on the second Sunday of March)
    day = parse_local_datetime(moment)
    assert day is not None
    other = (
        {"dropoff_datetime": f"{day:%Y-%m-%d} 03:30:00"} if column == "pickup_datetime" else {"pickup_datetime": f"{day:%Y-%m-%d} 01:00:00"}
    )
    line = edit(sample_line(GOOD), **{column: moment}, **other)
    # When it is validated, the row passes (the time is well-formed)
    validated = accepted(validate_line(line)).tuple
    # Then the transform rejects it as a nonexistent local time, naming the column
    result = rejected(transform_tuple(validated))
    assert result.rule is Rule.NONEXISTENT_LOCAL_TIME
    assert result.message.startswith(f"{column}: {moment!r}")


def test_an_ambiguous_fall_back_time_is_taken_as_edt() -> None:
    # Given a trip in the hour that happens twice (01:00-02:00 on the first Sunday of November)
    line = edit(sample_line(GOOD), pickup_datetime="2019-11-03 01:30:00", dropoff_datetime="2019-11-03 02:10:00")
    # When it is transformed
    cells = transformed_cells(line)
    # Then 01:30 is the first occurrence (EDT, UTC-4), and 02:10 is EST (UTC-5)
    assert (cells["pickup_datetime"], cells["dropoff_datetime"]) == ("2019-11-03T05:30:00Z", "2019-11-03T07:10:00Z")


def test_dst_bounds_follow_the_2007_rule() -> None:
    # Given years whose second Sunday of March and first Sunday of November differ in weekday layout
    # When their bounds are computed / Then they are the known transition dates at 02:00 local
    assert dst_bounds(2019) == (datetime(2019, 3, 10, 2), datetime(2019, 11, 3, 2))
    assert dst_bounds(2024) == (datetime(2024, 3, 10, 2), datetime(2024, 11, 3, 2))
    assert dst_bounds(2020) == (datetime(2020, 3, 8, 2), datetime(2020, 11, 1, 2))
    assert dst_bounds(2009) == (datetime(2009, 3, 8, 2), datetime(2009, 11, 1, 2))
    assert dst_bounds(2026) == (datetime(2026, 3, 8, 2), datetime(2026, 11, 1, 2))
    with pytest.raises(ValueError, match="2007"):
        dst_bounds(2006)
    with pytest.raises(ValueError, match="naive"):
        eastern_to_utc(datetime(2019, 1, 1, tzinfo=UTC))


def _new_york() -> Any:
    try:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    except ImportError:  # pragma: no cover
        pytest.skip("zoneinfo is not available")
    try:
        return ZoneInfo("America/New_York")
    except ZoneInfoNotFoundError:
        pytest.skip("the system time-zone database has no America/New_York, so the rule cannot be cross-checked")


def _zoneinfo_local_to_utc(local: datetime, new_york: Any) -> datetime | None:
    """The reference: zoneinfo with fold=0 (first occurrence); a wall time that does not round-trip is in the gap."""
    utc = local.replace(tzinfo=new_york, fold=0).astimezone(UTC)
    return utc if utc.astimezone(new_york).replace(tzinfo=None) == local else None


def _every(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    return [start + step * index for index in range((end - start) // step)]


@pytest.mark.parametrize("year", [2019, 2024])
def test_eastern_to_utc_agrees_with_zoneinfo_for_every_local_hour_and_around_each_change(year: int) -> None:
    # Given every local wall-clock hour of the year, and every minute of the days clocks change
    new_york = _new_york()
    start, end = dst_bounds(year)
    moments = _every(datetime(year, 1, 1), datetime(year + 1, 1, 1), timedelta(hours=1))
    for change in (start, end):
        moments += _every(change - timedelta(hours=3), change + timedelta(hours=3), timedelta(minutes=1))
    # When each is converted by rule and by zoneinfo
    # Then they agree, including None for the gap and EDT for the repeated hour
    mismatches = [moment for moment in moments if eastern_to_utc(moment) != _zoneinfo_local_to_utc(moment, new_york)]
    assert mismatches == []
    assert sum(eastern_to_utc(moment) is None for moment in moments) == 1 + 60  # the gap hour: once on the hourly grid, 60 minutes


@pytest.mark.parametrize("year", [2019, 2024])
def test_every_utc_hour_round_trips_through_new_york_wall_time(year: int) -> None:
    # Given every UTC hour of the year, shown as New York wall-clock time by zoneinfo
    new_york = _new_york()
    instants = _every(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), timedelta(hours=1))
    for instant in instants:
        local = instant.astimezone(new_york)
        # When the wall-clock time is converted back by rule
        back = eastern_to_utc(local.replace(tzinfo=None))
        # Then it is the same instant, except the second pass of the repeated hour, which maps to the first (an hour earlier)
        assert back == (instant - timedelta(hours=1) if local.fold else instant), instant


def test_the_rule_agrees_with_zoneinfo_around_every_change_2009_to_2100() -> None:
    # Given the quarter hours around both changes of every year the validator accepts
    new_york = _new_york()
    moments = [change + timedelta(minutes=15 * step) for year in range(2009, 2101) for change in dst_bounds(year) for step in range(-8, 9)]
    # When converted by rule and by zoneinfo / Then they agree
    assert [moment for moment in moments if eastern_to_utc(moment) != _zoneinfo_local_to_utc(moment, new_york)] == []


@pytest.mark.parametrize(
    "validated",
    [
        "",
        "not,a,tuple",
        sample_line(1),
        sample_line(GOOD).replace(",", "\t"),
        edit(sample_line(GOOD), passenger_count="x"),  # validation would blank it
        edit(sample_line(GOOD), pu_location_id="0"),  # validation would reject it
        " " + sample_line(GOOD),  # validation would rewrite it
        sample_line(GOOD).replace(",N,", ',"N,'),
    ],
)
def test_the_transform_refuses_what_validation_did_not_produce(validated: str) -> None:
    # Given a string that is not a validated tuple
    # When it is transformed
    result = rejected(transform_tuple(validated))
    # Then it is a malformed tuple, with a message
    assert result.rule is Rule.MALFORMED_TUPLE
    assert result.message


# --- the stored item --------------------------------------------------------------------------


def _walk(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for inner in value.values() for leaf in _walk(inner)]
    return [value]


def test_the_item_of_a_real_row_has_exact_typed_values() -> None:
    # Given the first real row, transformed
    transformed = accepted(transform_tuple(accepted(validate_line(sample_line(GOOD))).tuple)).tuple
    # When its item is built
    item = final_item("req-1", transformed)
    # Then it has exactly these values and types (bool is checked by identity, ints exclude bool)
    assert item == {
        "StoreRequestId": "req-1",
        "item_version": 3,
        "vendor": "VeriFone Inc.",
        "vendor_id": 2,
        "pickup_at": "2019-10-23T20:39:42Z",
        "dropoff_at": "2019-10-23T21:14:10Z",
        "passenger_count": 1,
        "trip_distance": Decimal("7.93"),
        "rate_code": "Standard rate",
        "rate_code_id": 1,
        "store_and_fwd": False,
        "pu_location_id": 138,
        "do_location_id": 170,
        "payment_type": "Credit card",
        "payment_type_id": 1,
        "fare_amount": Decimal("29.50"),
        "extra": Decimal("1.00"),
        "mta_tax": Decimal("0.50"),
        "tip_amount": Decimal("7.98"),
        "tolls_amount": Decimal("6.12"),
        "improvement_surcharge": Decimal("0.30"),
        "total_amount": Decimal("47.90"),
        "congestion_surcharge": Decimal("2.50"),
        "airport_fee": Decimal("0.00"),
        "cbd_congestion_fee": Decimal("0.00"),
        "charges": {
            "fare_amount": Decimal("29.50"),
            "extra": Decimal("1.00"),
            "mta_tax": Decimal("0.50"),
            "tip_amount": Decimal("7.98"),
            "tolls_amount": Decimal("6.12"),
            "improvement_surcharge": Decimal("0.30"),
            "congestion_surcharge": Decimal("2.50"),
            "airport_fee": Decimal("0.00"),
            "cbd_congestion_fee": Decimal("0.00"),
            "unexplained": Decimal("0.00"),
        },
        "trip_seconds": 2068,
    }
    assert item["store_and_fwd"] is False
    for name in ("vendor_id", "rate_code_id", "payment_type_id", "passenger_count", "pu_location_id", "do_location_id", "trip_seconds"):
        assert type(item[name]) is int, name
    for name in (*AMOUNTS, "trip_distance"):
        assert type(item[name]) is Decimal, name
    assert not any(isinstance(leaf, float) for leaf in _walk(item))


def test_the_item_serializes_for_dynamodb() -> None:
    # Given the item of a row with every optional column blank and a store-and-forward Y row
    blank = edit(sample_line(GOOD), passenger_count="", trip_distance="", rate_code_id="", store_and_fwd_flag="")
    flagged = edit(sample_line(GOOD), store_and_fwd_flag="Y")
    items = [final_item("r", accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple) for line in (blank, flagged)]
    # When boto3's serializer converts them
    serialized = [{key: TypeSerializer().serialize(value) for key, value in item.items()} for item in items]
    # Then blanks are omitted, the flag is a BOOL, amounts are N
    assert not {"passenger_count", "trip_distance", "rate_code", "rate_code_id", "store_and_fwd"} & set(serialized[0])
    assert serialized[1]["store_and_fwd"] == {"BOOL": True}
    assert serialized[1]["total_amount"] == {"N": "47.90"}


@pytest.mark.parametrize(
    ("request_id", "change"),
    [
        ("", {}),
        ("r", {"columns": 19}),
        ("r", {"vendor_id": "VeriFone"}),
        ("r", {"pickup_datetime": "2019-10-23T20:39:42"}),
        ("r", {"dropoff_datetime": "2019-10-23T20:39:41Z"}),
        ("r", {"passenger_count": "1.0"}),
        ("r", {"trip_distance": "-1"}),
        ("r", {"rate_code_id": "1"}),
        ("r", {"payment_type": "Flex"}),
        ("r", {"store_and_fwd_flag": "false"}),
        ("r", {"pu_location_id": "266"}),
        ("r", {"payment_type": "2"}),
        ("r", {"fare_amount": "29.5"}),
        ("r", {"tip_amount": "7.98e0"}),
    ],
)
def test_the_item_refuses_a_malformed_transformed_tuple(request_id: str, change: dict[str, Any]) -> None:
    # Given a transformed tuple with one cell broken (or a column missing, or no request id)
    cells = accepted(transform_tuple(accepted(validate_line(sample_line(GOOD))).tuple)).tuple.split(OUTPUT_SEPARATOR)
    for name, value in change.items():
        if name == "columns":
            cells = cells[:value]
        else:
            cells[COLUMNS.index(name)] = value
    # When the item is built / Then it raises ValueError
    with pytest.raises(ValueError):
        final_item(request_id, OUTPUT_SEPARATOR.join(cells))


# --- the real data ----------------------------------------------------------------------------


def test_every_real_row_is_validated_and_transformed_as_observed() -> None:
    # Given all 2,000 rows of the real sample (the header skipped)
    rows = sample_lines()[1:]
    assert len(rows) == 2000
    # When each is validated, and each accepted tuple transformed and stored
    rejections: dict[int, Rejected] = {}
    found: dict[int, tuple[list[str], Decimal | None]] = {}
    for number, line in enumerate(rows, start=2):
        result = validate_line(line + "\n")
        if isinstance(result, Rejected):
            rejections[number] = result
            continue
        assert result.blanked == (), number
        assert validate_line(result.tuple) == result, number  # a validated tuple is a fixed point of validation
        transformed = accepted(transform_tuple(result.tuple))
        item = final_item(f"req-{number}", transformed.tuple)
        assert not any(isinstance(leaf, float) for leaf in _walk(item))
        assert 0 <= item["trip_seconds"] <= 24 * 3600
        assert sum(item["charges"].values()) == item["total_amount"], number  # the breakdown sums to the total
        if "findings" in item:
            found[number] = (item["findings"], item.get("unexplained_amount"))
    # Then all 2,000 are stored; the four odd ones carry findings, checked by hand: three vendor-2 totals
    # 1.95 above their columns, and one drop-off at the pick-up second
    assert rejections == {}
    assert found == {
        **{number: ([Finding.TOTAL_AMOUNT_MISMATCH.value], Decimal("1.95")) for number in TOTAL_195},
        SAME_SECOND: ([Finding.DROPOFF_EQUALS_PICKUP.value], None),
    }


# --- schemas by year --------------------------------------------------------------------------

SCHEMA_ROWS = json.loads((SAMPLE.parent / "schema_rows.json").read_text(encoding="utf-8"))


def stored(line: str) -> dict[str, Any]:
    return final_item("r", accepted(transform_tuple(accepted(validate_line(line)).tuple)).tuple)


@pytest.mark.parametrize(
    ("layout", "schema"),
    [
        ("yellow_2009", Schema.YELLOW_2009),
        ("yellow_2015", Schema.YELLOW_2015),
        ("yellow_2017", Schema.YELLOW_2017),
        ("yellow_2020_empty_codes", Schema.YELLOW_2019),
        ("yellow_2025", Schema.YELLOW_2025),
    ],
)
def test_each_layout_is_recognised_by_its_header_and_by_its_shape(layout: str, schema: Schema) -> None:
    # Given a header and a data row of one year's layout
    header, row = SCHEMA_ROWS[layout]["header"], SCHEMA_ROWS[layout]["row"]
    # When their schema is read
    # Then the header names it, and the row's shape says the same
    assert header_schema(line_columns(header)) is schema
    assert row_schema(line_columns(row)) is schema


@pytest.mark.parametrize("layout", ["yellow_2009", "yellow_2015"])
def test_a_row_with_coordinates_is_refused_naming_its_layout(layout: str) -> None:
    # Given a 2009-2014 or 2015-2016 row (coordinates, no zone ids: its columns are not mapped)
    # When it is validated
    result = rejected(validate_line(SCHEMA_ROWS[layout]["row"]))
    # Then it is refused as an unsupported schema, naming it, not flagged cell by cell
    assert result.rule is Rule.UNSUPPORTED_SCHEMA
    assert str(row_schema(line_columns(SCHEMA_ROWS[layout]["row"]))) in result.message


def test_a_2017_row_of_17_columns_is_stored_without_a_congestion_surcharge() -> None:
    # Given a 2017 row (no congestion_surcharge column)
    item = stored(SCHEMA_ROWS["yellow_2017"]["row"])
    # Then it is stored, its absent surcharge 0, its charges summing to its total
    assert (item["congestion_surcharge"], item["total_amount"], "findings" in item) == (Decimal("0.00"), Decimal("15.30"), False)
    assert item["vendor"] == "Creative Mobile Technologies, LLC"


def test_a_2020_row_with_empty_codes_is_stored_with_the_codes_unknown() -> None:
    # Given a 2020 TLC row whose VendorID, passenger_count, RatecodeID, store_and_fwd_flag and payment_type are empty
    item = stored(SCHEMA_ROWS["yellow_2020_empty_codes"]["row"])
    # Then it is stored; the unknown codes are simply absent (never an error), the rest is typed
    assert not {"vendor", "vendor_id", "passenger_count", "rate_code", "rate_code_id", "store_and_fwd"} & set(item)
    assert not {"payment_type", "payment_type_id"} & set(item)
    assert (item["pu_location_id"], item["do_location_id"], item["total_amount"]) == (136, 47, Decimal("36.72"))
    assert "findings" not in item


@pytest.mark.parametrize(("layout", "payment"), [("parquet_2020_payment_0", None), ("yellow_2025", ("Flex Fare trip", 0))])
def test_payment_type_0_is_unknown_before_2025_and_flex_fare_from_2025(layout: str, payment: tuple[str, int] | None) -> None:
    # Given payment_type 0 in a 2020 parquet export (an empty code written as 0) and in a 2025 row
    item = stored(SCHEMA_ROWS[layout]["row"])
    # Then 2020's is unknown (absent), and 2025's is the 2025 dictionary's Flex Fare trip, code kept beside the name
    assert (None if "payment_type" not in item else (item["payment_type"], item["payment_type_id"])) == payment


@pytest.mark.parametrize(
    ("year", "vendor"), [(2019, "VeriFone Inc."), (2023, "VeriFone Inc."), (2024, "Curb Mobility, LLC"), (2025, "Curb Mobility, LLC")]
)
def test_vendor_names_follow_the_dictionary_edition_of_the_pickup_year(year: int, vendor: str) -> None:
    # Given the good row (vendor 2) moved to another year
    line = edit(sample_line(GOOD), pickup_datetime=f"{year}-10-23 16:39:42", dropoff_datetime=f"{year}-10-23 17:14:10")
    # Then the stored name is that edition's wording, with the code beside it
    item = stored(line)
    assert (item["vendor"], item["vendor_id"]) == (vendor, 2)


# --- one trip, one spelling -------------------------------------------------------------------


def spellings(line: str) -> dict[str, str]:
    """The same trip as real clients send it."""
    cells = line_columns(line)
    tlc_dates = [*cells[:1], *(parse_local_datetime(cell).strftime("%Y-%m-%d %H:%M:%S") for cell in cells[1:3]), *cells[3:]]  # type: ignore[union-attr]
    return {
        "trailing spaces": line + "   ",
        "spaces around cells": ", ".join(cells),
        "every field quoted": ",".join(f'"{cell}"' for cell in cells),
        "trailing comma": line + ",",
        "byte-order mark": "\ufeff" + line,
        "TLC-file dates": ",".join(tlc_dates),
        "codes as floats": ",".join(f"{cell}.0" if index in (0, 3, 5, 7, 8, 9) else cell for index, cell in enumerate(cells)),
    }


@pytest.mark.parametrize("number", [GOOD, CONGESTION_QUIRK, REFUND, 875])
def test_every_spelling_of_a_real_row_has_the_row_as_its_canonical_spelling(number: int) -> None:
    # Given a real row, which is already in the canonical (NYC Open Data) spelling, and its other spellings
    line = sample_line(number)
    # When their canonical spellings are taken
    canonical = {name: canonical_line(variant) for name, variant in spellings(line).items()}
    # Then every one is the row as the file has it, so ids made before this spelling rule keep their value
    assert canonical_line(line) == line
    assert canonical == dict.fromkeys(canonical, line)


def test_a_line_that_does_not_validate_has_no_canonical_spelling() -> None:
    # Given a row rejected by validation
    # Then it has no canonical spelling (its id falls back to the raw line)
    assert canonical_line(edit(sample_line(GOOD), pu_location_id="0")) is None


# --- items across layouts ---------------------------------------------------------------------


def test_an_item_stored_by_the_previous_layout_is_the_same_trip_but_a_different_trip_is_not() -> None:
    # Given the item this version builds, the item the previous layout stored for it (names, no codes or
    # charges, no item_version), and a previous-layout item of another trip under the same id
    item = stored(sample_line(GOOD))
    previous = {name: value for name, value in item.items() if name not in ("item_version", "charges", "rate_code_id", "payment_type_id")}
    previous |= {"vendor": "Curb Mobility (formerly VeriFone)", "rate_code": "Standard"}
    other = previous | {"tip_amount": Decimal("8.98"), "total_amount": Decimal("48.90")}
    # Then the previous item is the same trip (a re-sent row is already stored, not a conflict); the other is not;
    # and within one layout the whole item must match
    assert same_trip(previous, item)
    assert not same_trip(other, item)
    assert not same_trip(item | {"vendor": "x"}, item)


@pytest.mark.parametrize(("vendor_id", "extra", "unexplained"), [(1, "1.00", "0"), (2, "3.50", "-2.50"), (None, "3.50", "-2.50")])
def test_only_vendor_1_s_extra_holds_the_congestion_surcharge(vendor_id: int | None, extra: str, unexplained: str) -> None:
    # Given amounts whose columns exceed the total by the congestion surcharge, extra 3.50 holding it
    amounts = {name: Decimal(0) for name in AMOUNTS} | {
        "fare_amount": Decimal("10.00"),
        "extra": Decimal("3.50"),
        "congestion_surcharge": Decimal("2.50"),
        "total_amount": Decimal("13.50"),
    }
    # When they are broken down for vendor 1, vendor 2, and an unknown vendor
    breakdown = charges(amounts, vendor_id)
    # Then only vendor 1's extra gives the surcharge back (the TLC dictionary's reading); for any other
    # vendor the 2.50 stays in extra and the shortfall is unexplained
    assert (breakdown["extra"], breakdown[UNEXPLAINED]) == (Decimal(extra), Decimal(unexplained))
    assert sum(value for name, value in breakdown.items()) == amounts["total_amount"]
