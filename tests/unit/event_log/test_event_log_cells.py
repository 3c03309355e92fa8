"""Cell references (runtime/event_log/cells.py): A1 parsing, canonical names and the row-major sort key.

Pure: no I/O. hypothesis is not installed in the venv, so the properties at the end are checked
over many seeded random cells instead.
"""

from __future__ import annotations

import random

import pytest

from runtime.event_log.cells import MAX_COLUMN, MAX_ROW, canonical_cell, cell_name, order_key, parse_cell
from runtime.event_log.errors import InvalidCell

# --- parse_cell and cell_name -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "row", "column"),
    [
        ("A1", 1, 1),
        ("Z9", 9, 26),
        ("AA10", 10, 27),
        ("AZ1", 1, 52),
        ("BA1", 1, 53),
        ("ZZ1", 1, 702),
        ("AAA1", 1, 703),
        ("B12", 12, 2),
        ("XFD1048576", 1_048_576, 16_384),
    ],
)
def test_a_reference_parses_to_row_and_column_and_names_back(reference: str, row: int, column: int) -> None:
    # Given a valid A1 reference
    # When it is parsed
    parsed = parse_cell(reference)
    # Then it gives its 1-based (row, column), and naming that cell gives the reference back
    assert parsed == (row, column)
    assert cell_name(row, column) == reference
    assert canonical_cell(reference) == reference


def test_the_last_cell_of_the_sheet_is_the_sheet_limits() -> None:
    # Given the sheet's limits
    # When the bottom-right cell is parsed
    # Then it is exactly (MAX_ROW, MAX_COLUMN), the common desktop limits
    assert parse_cell("XFD1048576") == (MAX_ROW, MAX_COLUMN) == (1_048_576, 16_384)


@pytest.mark.parametrize(
    ("reference", "canonical"), [("a1", "A1"), ("z9", "Z9"), ("aa10", "AA10"), ("xFd1048576", "XFD1048576"), ("b12", "B12")]
)
def test_lower_case_is_accepted_and_canonicalised(reference: str, canonical: str) -> None:
    # Given a reference in lower or mixed case
    # When it is parsed and canonicalised
    # Then it names the same cell as its upper-case form, and the canonical name is upper case
    assert parse_cell(reference) == parse_cell(canonical)
    assert canonical_cell(reference) == canonical
    assert order_key(reference) == order_key(canonical)


@pytest.mark.parametrize(
    "reference",
    ["A0", "1A", "AAAA1", "XFE1", "A1048577", "", " ", "A", "1", "A01", "A-1", "A1.5", "A 1", "$A$1", "A1B", "\u00c41", "A\u0661"],
    ids=lambda reference: repr(reference),
)
def test_invalid_references_are_rejected(reference: str) -> None:
    # Given something that is not a cell of the sheet
    # When it is parsed
    # Then InvalidCell (a ValueError) is raised, quoting the reference
    with pytest.raises(InvalidCell) as raised:
        parse_cell(reference)
    assert isinstance(raised.value, ValueError)
    assert repr(reference) in str(raised.value)


@pytest.mark.parametrize(
    ("reference", "message"), [("XFE1", "outside the sheet"), ("A1048577", "outside the sheet"), ("A0", "A1 notation")]
)
def test_the_rejection_says_why(reference: str, message: str) -> None:
    # Given a reference that is malformed or outside the sheet
    # When it is parsed
    # Then the message tells the two apart
    with pytest.raises(InvalidCell, match=message):
        parse_cell(reference)


@pytest.mark.parametrize("reference", ["XFE1", "A0", "", "AAAA1"])
def test_canonical_cell_and_order_key_reject_what_parse_cell_rejects(reference: str) -> None:
    # Given an invalid reference
    # When it is canonicalised or given a sort key
    # Then both raise InvalidCell too
    with pytest.raises(InvalidCell):
        canonical_cell(reference)
    with pytest.raises(InvalidCell):
        order_key(reference)


@pytest.mark.parametrize("reference", ["\u00df1", "\u01311", "\ufb001"], ids=["sharp-s", "dotless-i", "ff-ligature"])
def test_non_ascii_letters_are_not_cell_references(reference: str) -> None:
    # Given a reference whose letters are not A-Z but upper-case to ASCII (sharp s -> "SS", dotless i -> "I", ff ligature -> "FF")
    # When it is parsed
    # Then it is rejected like any other non-A1 text, not read as another cell
    with pytest.raises(InvalidCell):
        parse_cell(reference)


# --- order_key ----------------------------------------------------------------------------------


def test_order_key_is_fixed_width_row_then_column() -> None:
    # Given cells at the corners of the sheet
    # When their sort keys are computed
    # Then each key is zero-padded row, a colon, zero-padded column
    assert order_key("B12") == "0000012:00002"
    assert order_key("A1") == "0000001:00001"
    assert order_key("XFD1048576") == "1048576:16384"
    assert {len(order_key(cell)) for cell in ("A1", "Z9", "AA10", "XFD1048576")} == {13}


def test_order_key_is_row_major_not_alphabetical() -> None:
    # Given cells whose names sort differently as text than as positions
    cells = ["B1", "A2", "AA1", "Z1", "A10", "A9"]
    # When they are sorted by order_key
    ordered = sorted(cells, key=order_key)
    # Then the whole first row comes first, in column order (Z before AA), then rows 2, 9, 10
    assert ordered == ["B1", "Z1", "AA1", "A2", "A9", "A10"]
    assert sorted(cells) != ordered  # plain text order would be wrong


def random_cell(rng: random.Random) -> tuple[int, int]:
    """A random (row, column), biased towards small and boundary values so ties and letter-count changes occur."""
    row = rng.choice([rng.randint(1, 30), rng.randint(1, MAX_ROW), rng.choice([1, 9, 10, 99, 100, MAX_ROW - 1, MAX_ROW])])
    column = rng.choice([rng.randint(1, 60), rng.randint(1, MAX_COLUMN), rng.choice([1, 26, 27, 52, 702, 703, MAX_COLUMN])])
    return row, column


def test_property_names_round_trip_for_random_cells() -> None:
    # Given many seeded random cells anywhere in the sheet
    rng = random.Random(20240601)
    for _ in range(5000):
        row, column = random_cell(rng)
        # When each is named, and the name parsed (also in lower case)
        name = cell_name(row, column)
        # Then parsing gives the cell back and the canonical form is the name
        assert parse_cell(name) == (row, column), name
        assert parse_cell(name.lower()) == (row, column), name
        assert canonical_cell(name.lower()) == name


def test_property_sorting_by_order_key_equals_sorting_by_row_then_column() -> None:
    # Given seeded random batches of cell names
    rng = random.Random(7)
    for _ in range(200):
        cells = [random_cell(rng) for _ in range(rng.randint(0, 60))]
        names = [cell_name(row, column) for row, column in cells]
        # When they are sorted by order_key (byte order of the keys)
        by_key = sorted(names, key=lambda name: order_key(name).encode("ascii"))
        # Then the order is row-major: the same as sorting by (row, column)
        by_position = [cell_name(row, column) for row, column in sorted(cells)]
        assert by_key == by_position


def test_property_order_keys_compare_like_positions() -> None:
    # Given seeded random pairs of cells
    rng = random.Random(99)
    for _ in range(5000):
        first, second = random_cell(rng), random_cell(rng)
        a, b = order_key(cell_name(*first)), order_key(cell_name(*second))
        # When their keys are compared
        # Then key order and equality are exactly position order and equality
        assert (a < b) == (first < second)
        assert (a == b) == (first == second)
