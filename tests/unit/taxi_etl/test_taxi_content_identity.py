"""One trip, one id: a row's content id depends on what it says, not on how it is spelled or sent.

Generated re-spellings of the real NYC TLC rows in tests/data/taxi_etl/yellow_2019-10_sample.csv:
each cell written as other exports write it (amounts with more or fewer zeros or a "+", distances,
codes as floats or zero-padded, the TLC and US date formats, quotes and blanks), each row sent
alone, in a batch with or without the file's header, with LF or CRLF, and whole files re-saved.
Pure: no AWS.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl.requests import Submission, content_id, parse_batch, parse_single
from runtime.taxi_etl.trip_lines import Accepted, canonical_line, line_columns, transform_tuple, validate_line
from runtime.taxi_etl.trips import AMOUNTS, COLUMNS

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "taxi_etl" / "yellow_2019-10_sample.csv"
SCHEMA_ROWS = json.loads((SAMPLE.parent / "schema_rows.json").read_text(encoding="utf-8"))
MAX_LINE_BYTES = 4096
MAX_LINES = 100
INDEX = {name: index for index, name in enumerate(COLUMNS)}
CODE_COLUMNS = ("vendor_id", "passenger_count", "rate_code_id", "pu_location_id", "do_location_id", "payment_type")
DATE_COLUMNS = ("pickup_datetime", "dropoff_datetime")


@cache
def sample() -> tuple[str, tuple[str, ...]]:
    header, *rows = SAMPLE.read_text(encoding="utf-8").splitlines()
    return header, tuple(rows)


HEADER = sample()[0]
ROWS = sample()[1]


def single(text: str) -> Submission:
    return parse_single(text, None, max_line_bytes=MAX_LINE_BYTES)


def batch(text: str) -> Submission:
    return parse_batch(text, None, max_lines=MAX_LINES, max_line_bytes=MAX_LINE_BYTES)


def with_cell(row: str, name: str, text: str) -> str:
    cells = line_columns(row)
    cells[INDEX[name]] = text
    return ",".join(cells)


# --- spellings --------------------------------------------------------------------------------


def amount_spellings(text: str) -> list[str]:
    """Ways an export writes the same amount."""
    value = Decimal(text)
    spellings = [text, format(value.quantize(Decimal("0.01")), "f"), format(value.quantize(Decimal("0.001")), "f")]
    if value >= 0:
        spellings.append("+" + text)
    if value == value.to_integral_value():
        spellings += [f"{int(value)}.0", f"{int(value)}."]
    if 0 < abs(value) < 1:
        spellings.append(format(value, "f").replace("0.", ".", 1))
    return spellings


def distance_spellings(text: str) -> list[str]:
    value = Decimal(text)
    return [text, format(value.normalize(), "f"), format(value.quantize(Decimal("0.001")), "f"), f"{text}0", f"+{text}"]


def code_spellings(text: str) -> list[str]:
    return [text, f"{text}.0", f"0{text}", f"{text}.00"] if text else [text]


def date_spellings(text: str) -> list[str]:
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.000")
    us = moment.strftime("%m/%d/%Y %I:%M:%S %p")
    return [text, moment.strftime("%Y-%m-%d %H:%M:%S"), moment.strftime("%Y-%m-%dT%H:%M:%S"), us, us.lower(), us.lstrip("0")]


def spellings(name: str, text: str) -> list[str]:
    if name in AMOUNTS:
        return amount_spellings(text)
    if name == "trip_distance":
        return distance_spellings(text) if text else [text]
    if name in CODE_COLUMNS:
        return code_spellings(text)
    if name in DATE_COLUMNS:
        return date_spellings(text)
    return [text]


@st.composite
def respelled(draw: st.DrawFn, row: str) -> str:
    """`row` with every cell in a drawn spelling, some quoted or padded with blanks."""
    cells = []
    for name, text in zip(COLUMNS, line_columns(row), strict=False):
        cell = draw(st.sampled_from(spellings(name, text)))
        if draw(st.booleans()):
            cell = draw(st.sampled_from([" ", ""])) + cell + draw(st.sampled_from([" ", ""]))
        cells.append(f'"{cell}"' if draw(st.integers(0, 3)) == 0 else cell)
    return ",".join(cells)


@st.composite
def row_and_variant(draw: st.DrawFn) -> tuple[str, str]:
    row = draw(st.sampled_from(ROWS))
    return row, draw(respelled(row))


# --- properties -------------------------------------------------------------------------------


def test_a_row_as_nyc_open_data_exports_it_is_its_own_canonical_spelling() -> None:
    # Given every real row of the sample, as the portal exported it
    # When each is put in canonical form
    # Then nothing changes: the content ids of rows stored before amounts were normalized stay the same
    assert [row for row in ROWS if canonical_line(row) != row] == []


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_and_variant(), st.sampled_from(["\n", "\r\n"]))
def test_any_spelling_of_a_real_row_on_any_route_gets_the_row_s_id(case: tuple[str, str], newline: str) -> None:
    # Given a real row and a generated re-spelling of it
    row, variant = case
    expected = content_id(row)
    # When the re-spelling is sent alone, in a headerless batch, and in a batch under the file's header
    routes = {
        "single": single(variant + newline).store_request_ids,
        "batch": batch(variant + newline).store_request_ids,
        "batch under a header": batch(HEADER + newline + variant + newline).store_request_ids,
    }
    # Then every route gives the row's own id, and submits its canonical spelling
    assert routes == {route: (expected,) for route in routes}
    assert single(variant).rows[0].tuple == row
    # And a byte-order mark left on a file's first line does not change the trip either
    assert canonical_line("\ufeff" + variant) == row


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ROWS), st.sampled_from([name for name in AMOUNTS if name in COLUMNS[:18]]), st.sampled_from(["0.01", "-0.01", "1"]))
def test_another_amount_is_another_trip(row: str, name: str, change: str) -> None:
    # Given a real row and the same row with one amount changed by a cent or a dollar
    cells = line_columns(row)
    cells[INDEX[name]] = format(Decimal(cells[INDEX[name]]) + Decimal(change), "f")
    changed = ",".join(cells)
    # When both are parsed
    # Then they are two trips
    assert content_id(changed) != content_id(row)


RESAVED_ROWS = 500


# Unmeasured: it replays paths that lighter tests measure, at more CPU than it adds to coverage (docs/development.md)
@pytest.mark.no_cover
@settings(max_examples=12, deadline=None)
@given(st.data())
def test_a_re_saved_file_gives_the_same_ids_in_batches(data: st.DataObject) -> None:
    # Given the sample re-saved as a spreadsheet or a dataframe would: one spelling per column for the
    # whole file, every cell quoted or none, CRLF or LF, the header kept
    choices = {name: data.draw(st.integers(0, 5), label=name) for name in COLUMNS[:18]}
    quote_all = data.draw(st.booleans(), label="quote every cell")
    newline = data.draw(st.sampled_from(["\n", "\r\n"]), label="newline")
    # (a file of 500 of the sample's rows, in the sample's order, drawn anew for each example: a quarter
    # of the CPU of the whole sample; the test above re-spells single rows on every route 1,000 times)
    rows = [ROWS[index] for index in sorted(data.draw(st.randoms(), label="rows").sample(range(len(ROWS)), RESAVED_ROWS))]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL, lineterminator=newline)
    writer.writerow(line_columns(HEADER))
    for row in rows:
        cells = line_columns(row)
        respelled_cells = [
            (options := spellings(name, text))[choices[name] % len(options)] for name, text in zip(COLUMNS, cells, strict=False)
        ]
        writer.writerow(respelled_cells)
    header, *lines = out.getvalue().split(newline)
    lines = [line for line in lines if line]
    # When it is sent in batches of 100 lines, each under the header
    batches = [newline.join([header, *lines[start : start + MAX_LINES]]) for start in range(0, len(lines), MAX_LINES)]
    resaved = [store_request_id for text in batches for store_request_id in batch(text).store_request_ids]
    # Then every row has the id the original file's row has
    assert resaved == [content_id(row) for row in rows]


# An unknown payment before the 2025 edition, as TLC CSVs (empty) and Parquet exports (0, 0.0) write it.
UNKNOWN_PAYMENT_SPELLINGS = ("", "0", "0.0", "00", "0.", " 0 ", '"0"')


@settings(max_examples=60, deadline=None)
@given(row_and_variant(), st.sampled_from(UNKNOWN_PAYMENT_SPELLINGS))
def test_an_unknown_payment_before_2025_in_any_spelling_on_any_route_is_one_trip(case: tuple[str, str], payment: str) -> None:
    # Given a real 2019 row with payment_type unknown (empty), and a re-spelling of it whose payment_type is drawn
    # from the unknown's spellings
    row, variant = case
    unknown = with_cell(row, "payment_type", "")
    cells = variant.split(",")
    cells[INDEX["payment_type"]] = payment
    respelled_unknown = ",".join(cells)
    # When the re-spelling is sent alone, in a headerless batch and under the file's header
    routes = {
        "single": single(respelled_unknown).store_request_ids,
        "batch": batch(respelled_unknown).store_request_ids,
        "batch under a header": batch(f"{HEADER}\n{respelled_unknown}").store_request_ids,
    }
    # Then every route gives the id of the row with the payment left empty
    assert routes == {route: (content_id(unknown),) for route in routes}


def distance_text(cents: int) -> str:
    return format(Decimal(cents).scaleb(-2), "f")  # two places, as TLC files write a distance


# The columns validation blanks rather than rejects, with values out of the data dictionary's range in their
# canonical spelling (an integer code, a decimal distance with two places, a flag as sent).
OUT_OF_RANGE: dict[str, st.SearchStrategy[str]] = {
    "passenger_count": st.integers(10, 10**9 - 1).map(str),
    "trip_distance": st.one_of(st.integers(-(10**6), -1), st.integers(100_000, 10**8)).map(distance_text),
    "rate_code_id": st.integers(7, 10**9 - 1).filter(lambda code: code != 99).map(str),
    "store_and_fwd_flag": st.sampled_from(["y", "n", "X", "YES", "no", "?", "Y N"]),
}


@st.composite
def blanked_value_respelled(draw: st.DrawFn) -> tuple[str, str, str]:
    """(column, a real row with an out-of-range value there, the same row with the value re-spelled)."""
    row, name = draw(st.sampled_from(ROWS)), draw(st.sampled_from(sorted(OUT_OF_RANGE)))
    value = draw(OUT_OF_RANGE[name])
    options = distance_spellings(value)[:4] if name == "trip_distance" else code_spellings(value) if name in CODE_COLUMNS else [value]
    spelled = draw(st.sampled_from(options))
    padded = f" {spelled} " if draw(st.booleans()) else spelled
    return name, with_cell(row, name, value), with_cell(row, name, f'"{padded}"' if draw(st.booleans()) else padded)


@settings(max_examples=80, deadline=None)
@given(blanked_value_respelled())
def test_a_blanked_value_in_any_spelling_is_one_trip_of_its_own(case: tuple[str, str, str]) -> None:
    # Given a real row with an out-of-range value in a column validation blanks, and the value re-spelled
    name, row, variant = case
    # When both are sent alone
    ids = single(row).store_request_ids + single(variant).store_request_ids
    # Then they are one trip, not the trip with that cell empty; its submitted line keeps the value and is canonical
    assert ids[0] == ids[1] != content_id(with_cell(row, name, ""))
    submitted = single(variant).rows[0].tuple
    assert canonical_line(submitted) == submitted and validate_line(submitted).blanked == (name,)  # type: ignore[union-attr]


def amount_text(cents: int) -> str:
    return format((Decimal(cents).scaleb(-2) + 0).normalize(), "f")


# Values of every column, valid or not, in one spelling each, so that two different texts are two different values;
# the only exception is payment_type 0 before 2025, which is unknown, as an empty one is (`meaning`).
CODE_VALUES = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["", "-1", "+1", "1.5", "x"]))
CELL_VALUES: dict[str, st.SearchStrategy[str]] = {
    "vendor_id": CODE_VALUES,
    "passenger_count": CODE_VALUES,
    "trip_distance": st.one_of(st.integers(-500, 150_000).map(distance_text), st.sampled_from(["", "x", "1.2.3"])),
    "rate_code_id": CODE_VALUES,
    "store_and_fwd_flag": st.sampled_from(["", "Y", "N", "y", "n", "1", "0", "X", "YES", "2.5"]),
    "pu_location_id": CODE_VALUES,
    "do_location_id": CODE_VALUES,
    "payment_type": CODE_VALUES,
    **{name: st.one_of(st.integers(-100_000, 1_100_000).map(amount_text), st.sampled_from(["x", "1.234"])) for name in AMOUNTS[:8]},
}


def meaning(name: str, text: str) -> str:
    return "" if name == "payment_type" and text == "0" else text  # every sample row is picked up in 2019


@st.composite
def row_and_two_values(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """(a real row, a column, two values for it): a cell of any column, dates included (shifted by seconds)."""
    row, name = draw(st.sampled_from(ROWS)), draw(st.sampled_from([*CELL_VALUES, *DATE_COLUMNS]))
    if name in DATE_COLUMNS:
        moment = datetime.strptime(line_columns(row)[INDEX[name]], "%Y-%m-%dT%H:%M:%S.000")
        first, second = ((moment + timedelta(seconds=draw(st.integers(-3600, 3600)))).strftime("%Y-%m-%dT%H:%M:%S.000") for _ in range(2))
        return row, name, first, second
    return row, name, draw(CELL_VALUES[name]), draw(CELL_VALUES[name])


@settings(max_examples=300, deadline=None)
@given(row_and_two_values())
def test_rows_that_differ_in_any_cell_valid_or_not_are_two_trips(case: tuple[str, str, str, str]) -> None:
    # Given a real row with one cell set to two values, each valid, blanked by validation, or rejecting the row
    row, name, first, second = case
    one, other = with_cell(row, name, first), with_cell(row, name, second)
    # When each gets the id every route gives it (the hash of the canonical line it submits, or of the line as sent)
    ids = [content_id(canonical_line(line) or line) for line in (one, other)]
    # Then the ids are equal only when the values mean the same
    assert (ids[0] == ids[1]) == (meaning(name, first) == meaning(name, second))


# --- spellings that are one trip, by example --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spelled", "same_as"),
    [
        ("fare_amount", "7.50", "7.5"),
        ("fare_amount", "9", "9.00"),
        ("fare_amount", "9.0", "9"),
        ("extra", "+2.5", "2.5"),
        ("tip_amount", "-0.00", "0"),
        ("trip_distance", "1.5", "1.50"),
        ("trip_distance", "2", "2.000"),
        ("congestion_surcharge", "", "0"),
        ("congestion_surcharge", "2.50", "2.5"),
    ],
)
def test_the_issue_s_spellings_are_one_trip(name: str, spelled: str, same_as: str) -> None:
    # Given a real row with one cell spelled two ways
    cells = line_columns(ROWS[0])
    first, second = list(cells), list(cells)
    first[INDEX[name]], second[INDEX[name]] = spelled, same_as
    # When both are parsed on the single route
    # Then they have one id
    assert single(",".join(first)).store_request_ids == single(",".join(second)).store_request_ids


def test_a_row_with_or_without_zero_later_fees_is_one_trip() -> None:
    # Given a real 2019 row, that row cut to the 2017 layout (no congestion column; its surcharge 0), and
    # with the 2022/2025 fee columns present but zero
    cells = line_columns(ROWS[0])
    cells[INDEX["congestion_surcharge"]] = "0"
    as_2019 = ",".join(cells)
    as_2017 = ",".join(cells[:17])
    as_2025 = ",".join([*cells, "0.00", "0"])
    # When each is parsed alone
    ids = {single(line).store_request_ids for line in (as_2019, as_2017, as_2025)}
    # Then they are one trip, and its canonical line is a row validation takes unchanged
    assert len(ids) == 1
    canonical = canonical_line(as_2017)
    assert canonical is not None
    assert validate_line(canonical).tuple == canonical  # type: ignore[union-attr]


# --- the header decides the layout ------------------------------------------------------------


def test_a_truncated_row_under_the_header_is_refused_naming_its_line() -> None:
    # Given a batch with the file's 18-column header whose third row was cut after its last comma
    # (17 fields: it would pass for a 2017-layout row with no congestion surcharge)
    truncated = ROWS[2].rsplit(",", 1)[0]
    text = "\n".join([HEADER, ROWS[0], ROWS[1], truncated])
    # When it is parsed
    with pytest.raises(InvalidRequest) as refused:
        batch(text)
    # Then the batch is refused, naming the line and the header's count
    assert "line 3 has 17 columns, but the header has 18" in str(refused.value)


def test_a_headerless_batch_takes_its_layout_from_its_first_line() -> None:
    # Given a headerless batch whose second row is truncated
    text = "\n".join([ROWS[0], ROWS[1].rsplit(",", 1)[0]])
    # When it is parsed
    with pytest.raises(InvalidRequest) as refused:
        batch(text)
    # Then the truncated row is refused against line 1
    assert "line 2 has 17 columns, but line 1 has 18" in str(refused.value)


def test_a_headerless_single_row_is_still_read_by_its_shape() -> None:
    # Given a 17-column row sent alone, with no header to say otherwise
    row = ",".join(line_columns(ROWS[0])[:17])
    # When it is parsed
    submission = single(row)
    # Then it is taken, as a 2017-layout trip
    assert submission.store_request_ids == (content_id(row),)


def test_headers_of_two_layouts_in_one_batch_are_refused() -> None:
    # Given a batch with an 18-column header and, further down, a 17-column one
    short_header = ",".join(line_columns(HEADER)[:17])
    text = "\n".join([HEADER, ROWS[0], short_header, ",".join(line_columns(ROWS[1])[:17])])
    # When it is parsed
    # Then it is refused: one batch, one layout
    with pytest.raises(InvalidRequest, match="headers have 17 and 18 columns"):
        batch(text)


# --- ids the sample's rows had before issue 36, kept -----------------------------------------

# sha256 of the 2,000 content ids of the sample's data rows, each as `content_id(row)` gives it, joined by "\n".
# Computed with main's code at 21a2973, before the id changes of issue 36 (blanked cells, payment_type 0):
#   rows = SAMPLE.read_text(encoding="utf-8").splitlines()[1:]
#   hashlib.sha256("\n".join(content_id(row) for row in rows).encode()).hexdigest()
# Deployed tables hold these trips under these ids: a changed digest would store every reloaded trip twice.
SAMPLE_IDS_BEFORE_ISSUE_36 = "83ec9ae5a8194884823a8756570f24eb0530a6dd4fc18bf67b103b3e69af93e6"


def test_the_sample_s_rows_keep_the_ids_they_had_before_the_identity_fixes() -> None:
    # Given the 2,000 real rows, none with a blanked cell or a payment_type 0
    assert all(validate_line(row).blanked == () for row in ROWS)  # type: ignore[union-attr]
    # When their content ids are computed, as sent and from the canonical spelling each route submits
    as_sent = [content_id(row) for row in ROWS]
    as_submitted = [content_id(canonical_line(row) or row) for row in ROWS]
    # Then they are the ids main's code gave them
    digest = hashlib.sha256("\n".join(as_sent).encode()).hexdigest()
    assert (digest, as_submitted) == (SAMPLE_IDS_BEFORE_ISSUE_36, as_sent)


# --- identity holes found with real rows (issue 36) --------------------------------------------


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [("passenger_count", "10", "11"), ("trip_distance", "-1.50", "-2.70"), ("rate_code_id", "7", "8"), ("store_and_fwd_flag", "y", "n")],
)
def test_rows_that_differ_only_in_a_blanked_cell_are_two_trips(name: str, first: str, second: str) -> None:
    # Given a real 2019 row twice, differing only in a cell validation blanks (out of the data dictionary's range)
    one, other = with_cell(ROWS[0], name, first), with_cell(ROWS[0], name, second)
    assert validate_line(one).blanked == validate_line(other).blanked == (name,)  # type: ignore[union-attr]
    # When each is sent alone and both in one batch
    ids = single(one).store_request_ids + single(other).store_request_ids
    batched = batch(f"{HEADER}\n{one}\n{other}")
    # Then they are two trips on every route, and neither has the id of the row with that cell empty
    assert len(set(ids)) == 2 and batched.store_request_ids == ids and len(batched.rows) == 2
    assert content_id(with_cell(ROWS[0], name, "")) not in ids
    # And the line each submits still carries the value, which validation blanks again (a canonical line is its own)
    submitted = single(one).rows[0].tuple
    assert line_columns(submitted)[INDEX[name]] == first and canonical_line(submitted) == submitted


@pytest.mark.parametrize(
    ("name", "spelled", "same_as"),
    [
        ("passenger_count", "10.0", "10"),
        ("passenger_count", " 011 ", "11"),
        ("rate_code_id", "07", "7"),
        # more than nine digits with its leading zero (found by the property test below): the code is read at any length
        ("passenger_count", "0100000000", "100000000"),
        ("rate_code_id", "000000000123.0", "123"),
        ("trip_distance", "-1.5", "-1.50"),
        ("trip_distance", "1500", "1500.00"),
        ("store_and_fwd_flag", '"y"', "y"),
    ],
)
def test_a_blanked_value_re_spelled_is_one_trip(name: str, spelled: str, same_as: str) -> None:
    # Given a real row with one out-of-range cell spelled two ways
    one, other = with_cell(ROWS[0], name, spelled), with_cell(ROWS[0], name, same_as)
    # When both are parsed on the single route
    # Then they have one id: the value is normalized as a valid one would be
    assert single(one).store_request_ids == single(other).store_request_ids


def test_a_code_blanked_for_its_length_alone_keeps_its_spelling_and_is_not_the_valid_code() -> None:
    # Given a real row whose passenger_count is 1 spelled with ten digits, which validation blanks (codes have at most
    # nine), and the same row with 1
    padded, one = with_cell(ROWS[0], "passenger_count", "0000000001"), with_cell(ROWS[0], "passenger_count", "1")
    assert validate_line(padded).blanked == ("passenger_count",) and validate_line(one).blanked == ()  # type: ignore[union-attr]
    # When the padded one is parsed
    submitted = single(padded).rows[0].tuple
    # Then it submits the value as sent, still blanked by validation, not "1", which would store another trip than the
    # one its line describes; and the two rows are two trips, as they are stored
    assert line_columns(submitted)[INDEX["passenger_count"]] == "0000000001" and canonical_line(submitted) == submitted
    assert single(padded).store_request_ids != single(one).store_request_ids


def test_payment_type_0_and_empty_are_one_trip_before_2025_and_two_from_2025() -> None:
    # Given a real 2019 row with payment_type empty (a TLC CSV's unknown) and 0 (a Parquet export's unknown)
    empty, zero = with_cell(ROWS[0], "payment_type", ""), with_cell(ROWS[0], "payment_type", "0")
    # And a real 2025 row, where 0 is a code of its own (Flex Fare), and the same row with payment_type empty
    row_2025 = SCHEMA_ROWS["yellow_2025"]["row"]
    flex_fare, unknown_2025 = with_cell(row_2025, "payment_type", "0"), with_cell(row_2025, "payment_type", "")
    # When each is parsed
    # Then the 2019 spellings are one trip, submitted as the TLC CSV writes it (empty); the 2025 rows are two trips
    assert single(zero).store_request_ids == single(empty).store_request_ids
    assert single(zero).rows[0].tuple == canonical_line(empty)
    assert single(flex_fare).store_request_ids != single(unknown_2025).store_request_ids


def test_a_parquet_export_row_and_the_same_trip_from_a_tlc_csv_are_one_trip() -> None:
    # Given the parquet-derived 2020 row (float codes, payment_type 0) and the same trip as a TLC CSV writes it
    parquet = SCHEMA_ROWS["parquet_2020_payment_0"]["row"]
    tlc_csv = "2,2020-06-01 10:00:00,2020-06-01 10:15:00,1,2.10,1,N,142,236,,12,0,0.5,0,0,0.3,15.3,2.5"
    # When both are sent alone
    # Then they have one id
    assert single(parquet).store_request_ids == single(tlc_csv).store_request_ids


def test_a_distance_with_a_plus_sign_is_the_distance() -> None:
    # Given a real row with trip_distance 7.93 and the same row with +7.93, as amounts with "+" are read
    plus = with_cell(ROWS[0], "trip_distance", "+7.93")
    # When it is validated, transformed and parsed
    validated = validate_line(plus)
    assert isinstance(validated, Accepted)
    transformed = transform_tuple(validated.tuple)
    # Then nothing is blanked, the transform writes 7.93, and it is the row's own trip
    assert validated.blanked == ()
    assert transformed == transform_tuple(ROWS[0])
    assert single(plus).store_request_ids == (content_id(ROWS[0]),)


def test_a_headerless_batch_whose_first_line_is_truncated_refuses_that_line() -> None:
    # Given a headerless batch of real rows whose first line was cut at its last comma (17 fields, a 2017 row's shape)
    text = "\n".join([ROWS[0].rsplit(",", 1)[0], *ROWS[1:5]])
    # When it is parsed
    with pytest.raises(InvalidRequest) as refused:
        batch(text)
    # Then the short first line is refused, by the layout most lines have, and no good row is
    assert str(refused.value) == (
        "1 of 5 lines cannot be trips, nothing was accepted: "
        "line 1 has 17 columns, but most lines (4 of 5) have 18 (a truncated or shifted row)"
    )


def test_a_headerless_batch_keeps_the_first_line_s_layout_when_most_lines_have_it() -> None:
    # Given a headerless batch of 2017-layout rows (real rows cut to 17 columns) with one 18-column row among them
    rows_2017 = [",".join(line_columns(row)[:17]) for row in ROWS[:3]]
    text = "\n".join([*rows_2017[:2], ROWS[3], rows_2017[2]])
    # When it is parsed
    with pytest.raises(InvalidRequest) as refused:
        batch(text)
    # Then the 18-column row is refused against line 1, which most lines agree with
    assert "line 3 has 18 columns, but line 1 has 17" in str(refused.value)


@pytest.mark.parametrize("flag", ["1", "2.5"])
def test_a_2017_row_with_a_number_for_its_flag_submits_a_line_the_saga_takes(flag: str) -> None:
    # Given a real row (no congestion surcharge) cut to the 2017 layout, with a number for store_and_fwd_flag: blanked
    # there, but where an 18- or 19-column line has a number in that column, it is a 2009-2016 coordinate
    row_2017 = with_cell(",".join(line_columns(ROWS[1])[:17]), "store_and_fwd_flag", flag)
    assert validate_line(row_2017).blanked == ("store_and_fwd_flag",)  # type: ignore[union-attr]
    # When it is sent alone
    submitted = single(row_2017).rows[0].tuple
    # Then it submits a 20-column canonical line that validation takes (the flag blanked again), as the trip it is,
    # and another flag is another trip
    assert len(line_columns(submitted)) == 20 and canonical_line(submitted) == submitted
    assert validate_line(submitted).blanked == ("store_and_fwd_flag",)  # type: ignore[union-attr]
    assert single(row_2017).store_request_ids != single(with_cell(row_2017, "store_and_fwd_flag", "3")).store_request_ids
