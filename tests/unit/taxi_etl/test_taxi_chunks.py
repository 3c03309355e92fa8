"""A bulk load's chunk, line by line (runtime/taxi_etl/chunks.py): exactly the rows /trips/batch gives the same lines
under the file's header, and a line that cannot be a trip refused alone, with its number in the file.

Files are built from the real NYC TLC rows in tests/data/taxi_etl/yellow_2019-10_sample.csv and cut into chunks at
line ends, as a bulk load's plan cuts them. Pure: no AWS.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl.chunks import ChunkRows, RefusedLine, chunk_rows, file_layout
from runtime.taxi_etl.errors import PhaseInputError
from runtime.taxi_etl.models import Row
from runtime.taxi_etl.requests import Layout, content_id, parse_batch
from runtime.taxi_etl.trip_lines import canonical_line, line_columns
from tests.unit.taxi_etl.test_taxi_content_identity import HEADER, ROWS, SCHEMA_ROWS, meaning, respelled, row_and_two_values, with_cell

MAX_LINE_BYTES = 4096
BOM = b"\xef\xbb\xbf"
HEADER_LAYOUT = Layout(18, "the header")


def chunks_of(data: bytes, ends: list[int]) -> list[tuple[bytes, int]]:
    """`data` cut after the given byte offsets (each just past an LF), with the number of each chunk's first line."""
    cuts = [0, *sorted(set(ends) - {0, len(data)}), len(data)]
    return [(data[start:end], data.count(b"\n", 0, start) + 1) for start, end in itertools.pairwise(cuts)]


def load(data: bytes, ends: list[int], layout: Layout = HEADER_LAYOUT) -> list[ChunkRows]:
    return [chunk_rows(chunk, first_line, layout, max_line_bytes=MAX_LINE_BYTES) for chunk, first_line in chunks_of(data, ends)]


def rows_of(chunks: list[ChunkRows]) -> list[Row]:
    return [row for chunk in chunks for row in chunk.rows]


def refused_of(chunks: list[ChunkRows]) -> list[RefusedLine]:
    return [refused for chunk in chunks for refused in chunk.refused]


def batch_rows(chunk: bytes) -> tuple[Row, ...]:
    """The rows /trips/batch gives a chunk's lines sent under the file's header (none when it has no data line)."""
    try:
        return parse_batch(f"{HEADER}\n{chunk.removeprefix(BOM).decode()}", None, max_lines=1000, max_line_bytes=MAX_LINE_BYTES).rows
    except InvalidRequest as refused:
        if str(refused) == "the batch has no CSV line":  # only blank or header lines
            return ()
        raise


def line_ends(data: bytes) -> list[int]:
    return [index + 1 for index, byte in enumerate(data) if byte == ord("\n")]


# --- the layout, decided once -----------------------------------------------------------------


@pytest.mark.parametrize("head", [f"{HEADER}\n{ROWS[0]}\n", f"\ufeff{HEADER}\r\n{ROWS[0]}\r\n", f"{HEADER}\n"])
def test_a_file_with_a_header_takes_its_layout_from_it(head: str) -> None:
    # Given the first lines of a file under its header, with CRLF and a byte-order mark, or the header alone
    # When the file's layout is decided
    layout = file_layout(head.encode())
    # Then the header decides it, and it survives the trip through a manifest
    assert layout == HEADER_LAYOUT
    assert Layout.from_json(layout.to_json()) == layout


def test_a_headerless_file_takes_its_layout_from_its_first_line() -> None:
    # Given a headerless file of 2017-layout rows (real rows cut to 17 columns), after two blank lines
    head = "\n \n" + "".join(",".join(line_columns(row)[:17]) + "\n" for row in ROWS[:5])
    # When its layout is decided
    # Then its first line decides it, named by its number in the file
    assert file_layout(head.encode()) == Layout(17, "line 3")


def test_a_headerless_file_whose_first_line_is_cut_short_takes_the_layout_most_lines_have() -> None:
    # Given a headerless file whose first real row was cut at its last comma (17 fields, a 2017 row's shape)
    head = "\n".join([ROWS[0].rsplit(",", 1)[0], *ROWS[1:5]]) + "\n"
    # When its layout is decided, and its first chunk read
    layout = file_layout(head.encode())
    chunk = chunk_rows(head.encode(), 1, layout, max_line_bytes=MAX_LINE_BYTES)
    # Then most lines decide it, the short line alone is refused, and the four good rows are kept
    assert layout == Layout(18, "most lines (4 of the first 5)")
    assert chunk.refused == (
        RefusedLine(1, "line 1 has 17 columns, but most lines (4 of the first 5) have 18 (a truncated or shifted row)"),
    )
    assert chunk.rows == tuple(Row(content_id(row), row) for row in ROWS[1:5])


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (b"", "the file has no CSV line"),
        (b"\n\r\n  \n", "the file has no CSV line"),
        (f"{SCHEMA_ROWS['yellow_2009']['header']}\n".encode(), "the CSV header names the yellow 2009-2014"),
        (
            f"{HEADER}\n{','.join(line_columns(HEADER)[:17])}\n".encode(),
            "the file's headers have 17 and 18 columns; send one layout per file",
        ),
        (b"a,b,c\n1,2,3\n", "none of the file's first 2 lines"),
        ("\n".join(ROWS[:3]).encode("utf-16"), "none of the file's first 3 lines"),
    ],
)
def test_a_file_no_line_of_which_could_be_a_trip_is_refused_as_a_whole(head: bytes, message: str) -> None:
    # Given the first lines of an empty file, of a file of an unmapped layout, of two layouts, of another table, or
    # of UTF-16 text
    # When the file's layout is decided
    # Then the file is refused, naming why: every one of its lines would be
    with pytest.raises(InvalidRequest, match=message):
        file_layout(head)


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {},
        {"fields": 18},
        {"fields": 16, "source": "the header"},
        {"fields": "18", "source": "x"},
        {"fields": True, "source": "x"},
    ],
)
def test_a_layout_that_is_not_one_is_a_phase_input_error(document: object) -> None:
    # Given a manifest's layout that is missing, of no trip's width, or mistyped
    # When a chunk reads it
    # Then it is refused as input no retry can fix
    with pytest.raises(PhaseInputError, match="a layout is"):
        Layout.from_json(document)


# --- a chunk's lines, one by one --------------------------------------------------------------

# Lines that cannot be trips under an 18-column header, each with the words it is refused in (after "line <n> ").
BAD_LINES: dict[str, tuple[bytes, str]] = {
    "truncated": (ROWS[10].rsplit(",", 1)[0].encode(), "has 17 columns, but the header has 18 (a truncated or shifted row)"),
    "five columns": (b"1,2,3,4,5", "has 5 columns; a yellow-taxi trip has 17 to 20"),
    "unclosed quote": (ROWS[11].replace(",N,", ',"N,', 1).encode(), "is not one well-formed CSV record"),
    "too long": (f"{ROWS[12]},{'9' * MAX_LINE_BYTES}".encode(), f"bytes; the limit is {MAX_LINE_BYTES}"),
    "not UTF-8": (ROWS[13].encode().replace(b",N,", b",\xff,", 1), "is not UTF-8 text"),
    "control character": (ROWS[14].replace(",N,", ",\x07,", 1).encode(), "contains control characters"),
    "2009 layout": (SCHEMA_ROWS["yellow_2009"]["row"].encode(), "has the yellow 2009-2014 (18 columns, coordinates, no zone ids) layout"),
    "header of another width": (",".join(line_columns(HEADER)[:17]).encode(), "is a CSV header of 17 columns, but the header has 18"),
    "header of an unmapped layout": (SCHEMA_ROWS["yellow_2009"]["header"].encode(), "is a CSV header of the yellow 2009-2014"),
}


BAD_LINES_BY_TEXT = dict(BAD_LINES.values())


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_a_bad_line_is_refused_alone_with_its_number_in_the_file(kind: str) -> None:
    # Given the second chunk of a file (its lines 4 to 7): real rows with a blank line and a bad line among them
    bad, words = BAD_LINES[kind]
    chunk = b"\n".join([ROWS[2].encode(), b"", bad, ROWS[3].encode()]) + b"\n"
    # When it is read
    read = chunk_rows(chunk, 4, HEADER_LAYOUT, max_line_bytes=MAX_LINE_BYTES)
    # Then the bad line alone is refused, by its number in the file and why; the rows around it are kept
    assert [(refused.line, refused.reason.startswith("line 6 ") and words in refused.reason) for refused in read.refused] == [(6, True)]
    assert read.rows == (Row(content_id(ROWS[2]), ROWS[2]), Row(content_id(ROWS[3]), ROWS[3]))
    assert read.refused[0].to_json() == {"line": 6, "reason": read.refused[0].reason}


def test_a_refused_line_gets_the_words_the_batch_route_refuses_it_in() -> None:
    # Given a truncated real row, as line 7 of a file and as line 2 of a batch under the same header
    truncated = ROWS[10].rsplit(",", 1)[0]
    read = chunk_rows(f"{ROWS[0]}\n{truncated}\n".encode(), 6, HEADER_LAYOUT, max_line_bytes=MAX_LINE_BYTES)
    # When the batch is sent
    with pytest.raises(InvalidRequest) as refused:
        parse_batch(f"{HEADER}\n{ROWS[0]}\n{truncated}\n", None, max_lines=100, max_line_bytes=MAX_LINE_BYTES)
    # Then both give the same reason, each with its own line number
    assert read.refused == (RefusedLine(7, "line 7 has 17 columns, but the header has 18 (a truncated or shifted row)"),)
    assert str(refused.value).endswith(": line 2 has 17 columns, but the header has 18 (a truncated or shifted row)")


def test_a_header_of_the_file_s_layout_is_skipped_wherever_it_is() -> None:
    # Given a chunk with the file's header (in capitals, as TLC files write it) between two rows
    chunk = f"{ROWS[0]}\r\n{HEADER.replace('vendorid', 'VendorID')}\r\n{ROWS[1]}".encode()
    # When it is read
    read = chunk_rows(chunk, 900, HEADER_LAYOUT, max_line_bytes=MAX_LINE_BYTES)
    # Then the header is neither a row nor refused
    assert read == ChunkRows((Row(content_id(ROWS[0]), ROWS[0]), Row(content_id(ROWS[1]), ROWS[1])), ())


def test_a_byte_order_mark_is_dropped_from_the_file_s_first_line_only() -> None:
    # Given a headerless file saved with a byte-order mark, whose first line is a row Validate will reject (its vendor
    # is "x", so the row submits the line as sent), and a later chunk that starts with the same bytes
    line = with_cell(ROWS[0], "vendor_id", "x")
    data = BOM + f"{line}\n{ROWS[1]}\n".encode()
    # When each is read
    first = chunk_rows(data, 1, Layout(18, "line 1"), max_line_bytes=MAX_LINE_BYTES)
    later = chunk_rows(data, 40, Layout(18, "line 1"), max_line_bytes=MAX_LINE_BYTES)
    # Then on the file's first line the mark is no part of the row; further down it is part of the line as sent, as in
    # a batch, where only a body's first bytes cannot be a mark
    assert first.rows == (Row(content_id(line), line), Row(content_id(ROWS[1]), ROWS[1]))
    assert later.rows == parse_batch(f"{ROWS[2]}\n\ufeff{line}\n{ROWS[1]}", None, max_lines=3, max_line_bytes=MAX_LINE_BYTES).rows[1:]
    assert later.rows[0].tuple == f"\ufeff{line}"


def test_the_same_trip_twice_in_a_chunk_is_one_row_the_first_spelling_submitted() -> None:
    # Given a chunk with a real row, another, and the first again with amounts spelled otherwise
    respelled_row = with_cell(ROWS[0], "fare_amount", "29.50")
    # When it is read
    read = chunk_rows(f"{ROWS[0]}\n{ROWS[1]}\n{respelled_row}\n".encode(), 2, HEADER_LAYOUT, max_line_bytes=MAX_LINE_BYTES)
    # Then it has two rows, in first-seen order, as the batch route de-duplicates
    assert read.rows == (Row(content_id(ROWS[0]), ROWS[0]), Row(content_id(ROWS[1]), ROWS[1]))


# --- properties: any cut of a real file --------------------------------------------------------


@st.composite
def real_file(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A file of consecutive real rows under the sample's header, as an export may write it (LF or CRLF, a byte-order
    mark, a last line ending or not), with blank lines, the header repeated, and rows repeated in other spellings
    spread through it; and the lines as written."""
    size = draw(st.integers(1, 50), label="rows")
    start = draw(st.integers(0, len(ROWS) - size), label="first row")
    rows = ROWS[start : start + size]
    lines = list(rows)
    for _ in range(draw(st.integers(0, 3), label="repeated trips")):
        lines.insert(draw(st.integers(0, len(lines))), draw(respelled(draw(st.sampled_from(rows)))))
    for extra in draw(st.lists(st.sampled_from(["", "  ", HEADER]), max_size=3), label="extra lines"):
        lines.insert(draw(st.integers(0, len(lines))), extra)
    newline = draw(st.sampled_from(["\n", "\r\n"]), label="newline")
    text = newline.join([HEADER, *lines]) + (newline if draw(st.booleans(), label="last line ended") else "")
    return (BOM if draw(st.booleans(), label="byte-order mark") else b"") + text.encode(), lines


@settings(max_examples=30, deadline=None)
@given(real_file(), st.data())
def test_any_cut_of_a_real_file_gives_the_rows_the_batch_route_gives_the_same_lines(
    case: tuple[bytes, list[str]], data: st.DataObject
) -> None:
    # Given a file of real rows, cut into chunks at drawn line ends
    file, _ = case
    ends = data.draw(st.lists(st.sampled_from(line_ends(file)), max_size=6), label="cuts")
    # When its layout is decided from its first chunk and every chunk is read
    layout = file_layout(chunks_of(file, ends)[0][0])
    chunks = load(file, ends, layout)
    # Then the chunks' rows, in order, are exactly the rows of their lines sent as batches under the header: the same
    # ids, canonical lines and de-duplication; and no line is refused
    assert layout == HEADER_LAYOUT
    assert rows_of(chunks) == [row for chunk, _ in chunks_of(file, ends) for row in batch_rows(chunk)]
    assert refused_of(chunks) == []


@st.composite
def file_with_bad_lines(draw: st.DrawFn) -> tuple[bytes, list[str], dict[int, str]]:
    """A file of consecutive real rows under the header with blank and bad lines among them; its good rows, and the
    words each bad line must be refused in, by its number in the file."""
    size = draw(st.integers(1, 30), label="rows")
    start = draw(st.integers(0, len(ROWS) - size), label="first row")
    rows = list(ROWS[start : start + size])
    lines: list[bytes] = [row.encode() for row in rows]
    inserted = draw(st.lists(st.sampled_from([*sorted(BAD_LINES), "blank"]), min_size=1, max_size=6), label="inserted")
    for kind in inserted:
        lines.insert(draw(st.integers(0, len(lines))), b"" if kind == "blank" else BAD_LINES[kind][0])
    numbered = [HEADER.encode(), *lines]
    bad = {number: BAD_LINES_BY_TEXT[line] for number, line in enumerate(numbered, start=1) if line in BAD_LINES_BY_TEXT}
    newline = draw(st.sampled_from([b"\n", b"\r\n"]), label="newline")
    return newline.join(numbered) + newline, rows, bad


@settings(max_examples=30, deadline=None)
@given(file_with_bad_lines(), st.data())
def test_bad_lines_anywhere_are_refused_alone_and_every_good_row_is_kept(
    case: tuple[bytes, list[str], dict[int, str]], data: st.DataObject
) -> None:
    # Given a file of real rows with bad lines among them, cut into chunks at drawn line ends
    file, rows, bad = case
    ends = data.draw(st.lists(st.sampled_from(line_ends(file)), max_size=6), label="cuts")
    # When every chunk is read under the header's layout
    chunks = load(file, ends)
    # Then each bad line is refused once, by its number in the file and why, and nothing else is
    refused = refused_of(chunks)
    assert [line.line for line in refused] == sorted(bad)
    assert all(line.reason.startswith(f"line {line.line} ") and bad[line.line] in line.reason for line in refused)
    # And every good row is a row, in file order, with the id and spelling it has on its own
    assert rows_of(chunks) == [Row(content_id(row), row) for row in rows]


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(ROWS).flatmap(lambda row: st.tuples(st.just(row), respelled(row))), st.booleans())
def test_the_same_trip_in_two_chunks_has_one_id(case: tuple[str, str], variant_first: bool) -> None:
    # Given a real row and a re-spelling of it, in two chunks of one file, in either order
    row, variant = case
    first, second = (variant, row) if variant_first else (row, variant)
    file = f"{HEADER}\n{first}\n{second}\n".encode()
    # When each chunk is read
    chunks = load(file, [line_ends(file)[1]])
    # Then each chunk has the trip once, under one id and in one spelling: the row's own
    assert [chunk.rows for chunk in chunks] == [(Row(content_id(row), row),)] * 2


@settings(max_examples=100, deadline=None)
@given(row_and_two_values())
def test_two_different_trips_in_two_chunks_never_share_an_id(case: tuple[str, str, str, str]) -> None:
    # Given a real row with one cell set to two values (each valid, blanked by validation, or rejecting the row), the
    # two rows in two chunks of one file
    # (in the 2025 layout, fees 0: in the 18- and 19-column layouts a number where store_and_fwd_flag stands is a
    # 2009-2016 coordinate, and the line is refused)
    row, name, one, other = case
    lines = [f"{with_cell(row, name, value)},0,0" for value in (one, other)]
    file = "\n".join([f"{HEADER},airport_fee,cbd_congestion_fee", *lines]).encode()
    # When each chunk is read
    chunks = load(file, [line_ends(file)[1]], file_layout(file))
    ids = [chunk.rows[0].store_request_id for chunk in chunks]
    # Then the two are one trip exactly when the values mean the same, each under the id it has on every route
    assert (ids[0] == ids[1]) == (meaning(name, one) == meaning(name, other))
    assert ids == [content_id(canonical_line(line) or line) for line in lines]
