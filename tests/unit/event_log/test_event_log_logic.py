"""The pure core of the event log (runtime/event_log/logic.py): the snapshot decision, the fold, chunks.

No I/O at all: heads, entries and snapshot cells are built in memory. hypothesis is not installed
in the venv, so merge_segment is checked against a from-scratch replay over many seeded random
cases instead.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from dataclasses import dataclass
from decimal import Decimal

import pytest

from devtools.event_log_replay import replay
from runtime.event_log.cells import cell_name, order_key
from runtime.event_log.entries import EntryKind
from runtime.event_log.logic import (
    MergedCell,
    apply_event,
    chain_digest,
    chunk_key,
    decode_chunk,
    encode_cell,
    merge_segment,
    next_marker,
    root_key,
    snapshot_due,
    snapshot_prefix,
)
from runtime.event_log.models import CellEvent, CellValue, Head, LogEntry, PayloadRef, SnapshotMarker

LOG = "sheet-1"
_request_numbers = itertools.count(1)


def entry(position: int, event: CellEvent, segment: int = 1, log_id: str = LOG) -> LogEntry:
    return LogEntry(log_id, position, f"req-{next(_request_numbers):08d}", event, segment)


def set_cell(cell: str, value: str) -> CellEvent:
    return CellEvent(EntryKind.SET_CELL, cell, value)


def clear_cell(cell: str) -> CellEvent:
    return CellEvent(EntryKind.CLEAR_CELL, cell)


def large(cell: str, key: str, size: int) -> CellEvent:
    return CellEvent(EntryKind.LARGE_PAYLOAD, cell, payload=PayloadRef(key, size))


def value_of(cell: str, value: str | None = None, payload: PayloadRef | None = None) -> CellValue:
    return CellValue(order_key(cell), cell, value, payload)


def segment_order(events: list[LogEntry]) -> list[LogEntry]:
    """What the segment index returns: by cell (row-major), then position."""
    return sorted(events, key=lambda item: (order_key(item.event.cell), item.position))


# --- snapshot_due and next_marker ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "every", "due"),
    [
        (Head(LOG), 1, False),  # no log yet
        (Head(LOG, next_position=5000, exists=False), 10, False),  # a head that was never written
        (Head(LOG, next_position=1, exists=True), 1, False),  # nothing appended
        (Head(LOG, next_position=2, exists=True), 1, True),
        (Head(LOG, next_position=1000, exists=True), 1000, False),  # 999 events
        (Head(LOG, next_position=1001, exists=True), 1000, True),  # exactly 1000 events
        (Head(LOG, next_position=1500, exists=True), 1000, True),  # overdue (a decision was lost)
        (Head(LOG, next_position=2000, snapshots=1, last_cut=1000, exists=True), 1000, False),
        (Head(LOG, next_position=2001, snapshots=1, last_cut=1000, exists=True), 1000, True),
        (Head(LOG, next_position=1001, snapshots=1, last_cut=1000, exists=True), 1000, False),  # right after a cut
    ],
)
def test_snapshot_due_counts_events_since_the_last_cut(head: Head, every: int, due: bool) -> None:
    # Given a head (how far the log is, and where the last Snapshot entry cut it)
    # When the decision after an append runs
    # Then a snapshot is due exactly when `every` events were appended since the last cut
    assert snapshot_due(head, every) is due


def test_the_first_marker_closes_segment_one() -> None:
    # Given a log with 1000 events and no Snapshot entry
    head = Head(LOG, next_position=1001, exists=True)
    # When the marker is computed
    marker = next_marker(head)
    # Then it is snapshot 1, covering events 1..1000, with no previous snapshot, sitting at 1000.5
    assert marker == SnapshotMarker(LOG, number=1, cut=1000, previous_cut=0)
    assert marker.seq == Decimal("1000.5")
    assert marker.previous_seq is None
    assert marker.expected_events == 1000
    assert marker.root is None


def test_a_later_marker_covers_the_open_segment_only() -> None:
    # Given a log with two Snapshot entries (cuts at 1000 and 2000) and 1500 more events
    head = Head(LOG, next_position=3501, snapshots=2, last_cut=2000, built=1, exists=True)
    # When the marker is computed
    marker = next_marker(head)
    # Then it closes segment 3: events 2001..3500, built on snapshot 2 at 2000.5
    assert marker == SnapshotMarker(LOG, number=3, cut=3500, previous_cut=2000)
    assert (marker.seq, marker.previous_seq, marker.expected_events) == (Decimal("3500.5"), Decimal("2000.5"), 1500)
    assert marker.number == head.open_segment


# --- apply_event --------------------------------------------------------------------------------


def test_set_cell_gives_the_value_whatever_was_there() -> None:
    # Given an empty cell, a cell with a value and a cell with a large payload
    for current in (None, value_of("B12", "old"), value_of("B12", payload=PayloadRef("payloads/sheet-1/a", 9))):
        # When a SetCell event is applied
        result = apply_event(current, entry(7, set_cell("B12", "new")))
        # Then the cell holds exactly the new inline value, keyed by its sort order
        assert result == CellValue("0000012:00002", "B12", "new", None)


def test_clear_cell_empties_the_cell() -> None:
    # Given a cell with a value, one with a payload, and an empty one
    for current in (value_of("C3", "x"), value_of("C3", payload=PayloadRef("payloads/sheet-1/b", 1)), None):
        # When a ClearCell event is applied
        # Then the cell is gone
        assert apply_event(current, entry(3, clear_cell("C3"))) is None


def test_large_payload_replaces_an_inline_value_with_the_reference() -> None:
    # Given a cell with an inline value
    current = value_of("A1", "small")
    # When a LargePayload event is applied
    result = apply_event(current, entry(4, large("A1", "payloads/sheet-1/big", 5_242_880)))
    # Then the cell holds the reference and no inline value
    assert result == CellValue("0000001:00001", "A1", None, PayloadRef("payloads/sheet-1/big", 5_242_880))


def test_replay_applies_events_in_log_order() -> None:
    # Given set, overwrite, clear and re-set events over three cells
    events = [
        entry(1, set_cell("A1", "1")),
        entry(2, set_cell("B1", "2")),
        entry(3, set_cell("A1", "one")),
        entry(4, clear_cell("B1")),
        entry(5, clear_cell("Z9")),  # clearing an empty cell
        entry(6, large("C2", "payloads/sheet-1/c", 10)),
    ]
    # When they are replayed from scratch
    sheet = replay(events)
    # Then the last event of each cell wins and cleared cells are absent
    assert sheet == {"A1": value_of("A1", "one"), "C2": value_of("C2", payload=PayloadRef("payloads/sheet-1/c", 10))}


# --- merge_segment ------------------------------------------------------------------------------


def test_merge_of_nothing_is_nothing() -> None:
    # Given no previous snapshot and an empty segment
    # When they are merged
    # Then no cell comes out
    assert list(merge_segment([], [])) == []


def test_merge_without_a_previous_snapshot_folds_the_segment() -> None:
    # Given the first segment: A1 set twice, B1 set then cleared, A2 set
    events = segment_order(
        [
            entry(1, set_cell("A1", "first")),
            entry(2, set_cell("B1", "b")),
            entry(3, set_cell("A2", "a2")),
            entry(4, set_cell("A1", "second")),
            entry(5, clear_cell("B1")),
        ]
    )
    # When it is merged over nothing
    merged = list(merge_segment([], events))
    # Then each cell comes out once, in row-major order, with its last value and its event count
    assert merged == [
        MergedCell("0000001:00001", value_of("A1", "second"), 2, None),
        MergedCell("0000001:00002", None, 2, None),  # B1: cleared, reported so the cursor can pass it
        MergedCell("0000002:00001", value_of("A2", "a2"), 1, None),
    ]


def test_merge_keeps_untouched_cells_and_reports_their_chunk() -> None:
    # Given a previous snapshot in two chunks, and a segment touching only one of its cells
    previous = [(0, value_of("A1", "keep")), (0, value_of("C1", "old")), (1, value_of("A5", "also kept"))]
    events = [entry(11, set_cell("C1", "new")), entry(12, set_cell("B3", "added"))]
    # When they are merged
    merged = list(merge_segment(previous, segment_order(events)))
    # Then untouched cells pass through with 0 events and their chunk index; touched ones are folded
    assert merged == [
        MergedCell("0000001:00001", value_of("A1", "keep"), 0, 0),
        MergedCell("0000001:00003", value_of("C1", "new"), 1, 0),
        MergedCell("0000003:00002", value_of("B3", "added"), 1, None),
        MergedCell("0000005:00001", value_of("A5", "also kept"), 0, 1),
    ]


def test_merge_clears_a_cell_of_the_previous_snapshot() -> None:
    # Given a previous cell holding a large payload, cleared in the segment
    previous = [(3, value_of("D4", payload=PayloadRef("payloads/sheet-1/d", 99)))]
    # When the segment is merged
    merged = list(merge_segment(previous, [entry(20, clear_cell("D4"))]))
    # Then the cell comes out empty, counting the clear and naming the chunk its old value came from
    assert merged == [MergedCell("0000004:00004", None, 1, 3)]


def test_merge_reads_lazily_one_cell_at_a_time() -> None:
    # Given endless streams of previous cells and events (a sheet that could not be held in memory)
    previous = ((row // 100, value_of(cell_name(row, 1), str(row))) for row in itertools.count(1))
    events = (entry(row, set_cell(cell_name(row, 2), "x")) for row in itertools.count(1))
    # When only the first few merged cells are taken
    first = list(itertools.islice(merge_segment(previous, events), 4))
    # Then they come out without the streams being exhausted, in row-major order
    assert [cell.order for cell in first] == ["0000001:00001", "0000001:00002", "0000002:00001", "0000002:00002"]


PAYLOAD_VALUES = ["", "0", "42", "héllo wörld", "日本語のセル", "🙂 emoji", 'quote " and \\ backslash', "line\nbreak\r\n", "\u2028\u0085"]


@dataclass
class RandomCase:
    previous: list[tuple[int, CellValue]]  # in cell order, with the chunk each came from
    segment: list[LogEntry]  # in position order
    previous_cut: int


def random_value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice("ab€🙂") * rng.randint(1_000, 20_000)  # large inline values
    if roll < 0.4:
        return rng.choice(PAYLOAD_VALUES)
    return str(rng.randint(-1000, 10**9))


def random_event(rng: random.Random, cell: str, position: int) -> CellEvent:
    roll = rng.random()
    if roll < 0.3:
        return clear_cell(cell)
    if roll < 0.45:
        return large(cell, f"payloads/{LOG}/{rng.getrandbits(64):016x}", rng.randint(4097, 100 * 1024 * 1024))
    return set_cell(cell, random_value(rng))


def random_case(rng: random.Random) -> RandomCase:
    """A previous snapshot and a segment over a small grid, so that cells are often shared."""
    rows, columns = rng.randint(1, 12), rng.randint(1, 30)
    grid = [cell_name(row, column) for row in range(1, rows + 1) for column in range(1, columns + 1)]
    grid += [cell_name(1_048_576, 16_384)] if rng.random() < 0.2 else []  # the last cell of the sheet
    previous_cells = sorted(rng.sample(grid, rng.randint(0, min(len(grid), 40))), key=order_key)
    previous: list[tuple[int, CellValue]] = []
    chunk = 0
    for cell in previous_cells:
        if previous and rng.random() < 0.2:
            chunk += 1
        if rng.random() < 0.2:
            held = value_of(cell, payload=PayloadRef(f"payloads/{LOG}/{rng.getrandbits(64):016x}", rng.randint(4097, 10**8)))
        else:
            held = value_of(cell, random_value(rng))
        previous.append((chunk, held))
    previous_cut = rng.randint(0, 10**6)
    segment = []
    touched_pool = previous_cells + rng.sample(grid, min(len(grid), rng.randint(1, 15)))
    for offset in range(rng.randint(0, 60)):
        position = previous_cut + 1 + offset
        segment.append(entry(position, random_event(rng, rng.choice(touched_pool), position), segment=2))
    return RandomCase(previous, segment, previous_cut)


def as_events(previous: list[tuple[int, CellValue]]) -> list[LogEntry]:
    """The previous snapshot's cells as the events that would have produced them."""
    events = []
    for position, (_, cell) in enumerate(previous, start=1):
        if cell.payload is not None:
            events.append(entry(position, large(cell.cell, cell.payload.key, cell.payload.size)))
        else:
            assert cell.value is not None
            events.append(entry(position, set_cell(cell.cell, cell.value)))
    return events


CASES = 400


def test_property_merge_equals_a_replay_from_scratch() -> None:
    # Given many seeded random previous snapshots and segments (sets, clears, large payloads and
    # large inline values; cells only in the previous snapshot, only in the segment, or in both)
    rng = random.Random(1234)
    kinds_seen: set[str] = set()
    for case_number in range(CASES):
        case = random_case(rng)
        # When the segment (in cell, then position order) is merged over the previous snapshot
        merged = list(merge_segment(case.previous, segment_order(case.segment)))
        # Then the non-empty cells are exactly the sheet replayed from scratch: the previous cells
        # as events, then the segment in log order; cleared cells are gone
        expected = replay(as_events(case.previous) + case.segment)
        actual = {cell.value.cell: cell.value for cell in merged if cell.value is not None}
        assert actual == expected, f"case {case_number}"
        for cell in merged:
            kinds_seen.add("cleared" if cell.value is None else "payload" if cell.value.payload else "value")
    assert kinds_seen == {"cleared", "payload", "value"}  # the cases did cover every outcome


def test_property_merge_reports_events_and_previous_chunks_per_cell() -> None:
    # Given many seeded random cases
    rng = random.Random(5678)
    shared = only_previous = only_segment = 0
    for case_number in range(CASES):
        case = random_case(rng)
        chunk_of = {cell.order: chunk for chunk, cell in case.previous}
        events_per_cell: dict[str, int] = {}
        for item in case.segment:
            events_per_cell[order_key(item.event.cell)] = events_per_cell.get(order_key(item.event.cell), 0) + 1
        # When they are merged
        merged = list(merge_segment(case.previous, segment_order(case.segment)))
        # Then every cell of either side comes out once, with the number of segment events folded
        # into it and the index of the previous chunk its old value came from
        assert {cell.order for cell in merged} == set(chunk_of) | set(events_per_cell), f"case {case_number}"
        for cell in merged:
            assert cell.events == events_per_cell.get(cell.order, 0), f"case {case_number} {cell}"
            assert cell.previous_chunk == chunk_of.get(cell.order), f"case {case_number} {cell}"
            shared += cell.order in chunk_of and cell.order in events_per_cell
            only_previous += cell.order not in events_per_cell
            only_segment += cell.order not in chunk_of
        assert sum(cell.events for cell in merged) == len(case.segment)
    assert shared and only_previous and only_segment  # every overlap shape occurred


def test_property_merge_output_is_strictly_increasing() -> None:
    # Given many seeded random cases
    rng = random.Random(91011)
    for case_number in range(CASES):
        case = random_case(rng)
        # When they are merged
        merged = list(merge_segment(case.previous, segment_order(case.segment)))
        orders = [cell.order for cell in merged]
        # Then the cells come out strictly increasing in cell order (each once: a snapshot's order)
        assert all(a < b for a, b in itertools.pairwise(orders)), f"case {case_number}"
        # And each value carries its own cell's sort key, the same as the merged cell's
        assert all(cell.value.order == cell.order == order_key(cell.value.cell) for cell in merged if cell.value is not None)


# --- chunk encoding -----------------------------------------------------------------------------


def test_encode_cell_is_one_compact_json_line() -> None:
    # Given an inline cell and a payload cell
    inline = value_of("B12", "42")
    payload = value_of("C3", payload=PayloadRef("payloads/sheet-1/abc", 123))
    # When they are encoded
    # Then each is one compact NDJSON line; a payload cell carries its key and size, not a value
    assert encode_cell(inline) == b'{"cell":"B12","value":"42"}\n'
    assert encode_cell(payload) == b'{"cell":"C3","payload":"payloads/sheet-1/abc","size":123}\n'


def test_unicode_is_written_as_utf8_not_escaped() -> None:
    # Given a cell with non-ASCII text
    # When it is encoded
    line = encode_cell(value_of("A1", "héllo 日本 🙂"))
    # Then the text is UTF-8 bytes in the line (readable by any NDJSON reader), not \u escapes
    assert "héllo 日本 🙂".encode() in line
    assert b"\\u" not in line


@pytest.mark.parametrize("value", [*PAYLOAD_VALUES, "x" * 300_000, "\x00\x1f\x7f", "{}\n{}", "tab\there"], ids=repr)
def test_a_chunk_round_trips_inline_values(value: str) -> None:
    # Given cells with unicode, control characters, line breaks inside values, and a large value
    cells = [value_of("A1", value), value_of("B1", "plain"), value_of("A2", value)]
    # When they are encoded into one chunk and decoded
    body = b"".join(encode_cell(cell) for cell in cells)
    # Then exactly the same cells come back, one per line
    assert decode_chunk(body) == cells
    assert body.count(b"\n") == len(cells)


def test_a_chunk_round_trips_payload_references() -> None:
    # Given cells mixing inline values and large-payload references
    cells = [
        value_of("A1", "inline"),
        value_of("B1", payload=PayloadRef("payloads/sheet-1/30d6519c7d0d930685b41035b3dc682a", 104_857_600)),
        value_of("XFD1048576", payload=PayloadRef("payloads/sheet-1/é", 0)),
    ]
    # When they are encoded and decoded
    decoded = decode_chunk(b"".join(encode_cell(cell) for cell in cells))
    # Then the references (key and size) come back and payload cells have no inline value
    assert decoded == cells
    assert decoded[1].value is None and decoded[1].payload == PayloadRef("payloads/sheet-1/30d6519c7d0d930685b41035b3dc682a", 104_857_600)


def test_decode_skips_blank_lines_and_recomputes_the_order() -> None:
    # Given a chunk with blank lines and no trailing newline
    body = b'\n{"cell":"B2","value":"x"}\n\n{"cell":"AA1","payload":"payloads/sheet-1/k","size":"7"}'
    # When it is decoded
    cells = decode_chunk(body)
    # Then the blank lines are ignored, the order keys are derived from the cell names, sizes are ints
    assert cells == [value_of("B2", "x"), value_of("AA1", payload=PayloadRef("payloads/sheet-1/k", 7))]
    assert decode_chunk(b"") == []


def test_property_random_chunks_round_trip() -> None:
    # Given many seeded random snapshots
    rng = random.Random(4242)
    for case_number in range(200):
        cells = [cell for _, cell in random_case(rng).previous]
        # When their cells are encoded into a chunk and decoded
        # Then the same cells come back in the same order
        assert decode_chunk(b"".join(encode_cell(cell) for cell in cells)) == cells, f"case {case_number}"


# --- keys and digests ---------------------------------------------------------------------------


CHUNK_NAME = re.compile(r"snapshots/sheet-1/0000000001/[0-9a-f]{24}\.ndjson")


def test_chunk_key_is_deterministic_and_hash_named_under_the_snapshot_prefix() -> None:
    # Given a chunk of snapshot 1 of a log
    # When its key is computed twice
    key = chunk_key(LOG, 1, 0)
    # Then it is the same both times, a 24-hex-digit name under the snapshot's prefix
    assert key == chunk_key(LOG, 1, 0)
    assert CHUNK_NAME.fullmatch(key), key
    assert key.startswith(snapshot_prefix(LOG, 1)) and snapshot_prefix(LOG, 1) == "snapshots/sheet-1/0000000001/"
    # And the derivation is pinned: a build resumed after a deploy must write the same keys
    assert key == "snapshots/sheet-1/0000000001/d5e76cc852edaa6464b89f7f.ndjson"


def test_chunk_keys_differ_per_index_snapshot_and_log() -> None:
    # Given many chunks across indexes, snapshots and logs
    keys = [chunk_key(log, number, index) for log in ("sheet-1", "sheet-2", "a", "ab") for number in (1, 2, 10) for index in range(300)]
    # When their keys are compared
    # Then no two collide, and each lives under its own snapshot's prefix
    assert len(set(keys)) == len(keys)
    for log in ("sheet-1", "a"):
        for number in (1, 2, 10):
            assert all(chunk_key(log, number, index).startswith(f"snapshots/{log}/{number:010d}/") for index in range(5))


def test_chunk_names_are_hashes_not_sequence_numbers() -> None:
    # Given consecutive chunk indexes
    names = [chunk_key(LOG, 1, index).rsplit("/", 1)[1] for index in range(50)]
    # When the names are compared
    # Then they do not contain the index and do not sort by it (spread over the prefix's key space)
    assert all(str(index).zfill(4) not in name for index, name in enumerate(names))
    assert sorted(names) != names


def test_root_key_is_under_the_snapshot_prefix_and_never_a_chunk() -> None:
    # Given a snapshot
    # When its root key is computed
    root = root_key(LOG, 3)
    # Then it is root.json under the same prefix as the chunks, and distinct from them
    assert root == "snapshots/sheet-1/0000000003/root.json"
    assert root.startswith(snapshot_prefix(LOG, 3))
    assert root not in {chunk_key(LOG, 3, index) for index in range(100)}
    assert root_key(LOG, 3) != root_key(LOG, 4) != root_key("sheet-2", 4)


def test_snapshot_prefixes_do_not_nest() -> None:
    # Given logs and snapshot numbers where one is a text prefix of another
    # When their snapshot prefixes are computed
    # Then none is a prefix of another (a listing of one never includes the other's objects)
    prefixes = [snapshot_prefix(log, number) for log in ("a", "ab", "a-b") for number in (1, 10, 100)]
    assert not any(first != second and second.startswith(first) for first in prefixes for second in prefixes)


def test_chain_digest_is_sha256_chained_over_chunk_digests() -> None:
    # Given a first chunk body
    body = b'{"cell":"A1","value":"1"}\n'
    # When the chain starts from the empty digest
    digest = chain_digest("", body)
    # Then it is SHA-256 over "<previous>:<sha256 of the body>", so a reader can check it independently
    assert digest == hashlib.sha256(f":{hashlib.sha256(body).hexdigest()}".encode()).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)


def test_chain_digest_is_order_sensitive() -> None:
    # Given two different chunk bodies
    first, second = b'{"cell":"A1","value":"1"}\n', b'{"cell":"A2","value":"2"}\n'
    # When they are chained in both orders
    forward = chain_digest(chain_digest("", first), second)
    backward = chain_digest(chain_digest("", second), first)
    # Then the digests differ (the root checks the order of the chunks, not just their set)
    assert forward != backward
    # And the chain depends on every link: a different start or body changes it
    assert chain_digest("x", first) != chain_digest("", first)
    assert chain_digest("", first) != chain_digest("", first + b" ")
    assert forward == chain_digest(chain_digest("", first), second)  # deterministic
