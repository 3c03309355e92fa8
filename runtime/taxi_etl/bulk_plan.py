"""A bulk load's plan: the file's object version read once, cut into chunks of CHUNK_ROWS lines, and its layout.

The manifest is a JSON array of chunks `{"index", "start", "end", "firstLine", "lines"}`: the byte range
`start..end` (inclusive, an HTTP Range) cut right after an LF or at the file's end, the number of its first line
in the file (1-based) and how many LF-separated lines it covers. It depends on the bytes and CHUNK_ROWS only, so
the same object version always gives the same manifest. The layout every chunk applies is decided from the first
chunk's bytes (runtime/taxi_etl/chunks.py's file_layout), as a batch's is from its own lines.

The cut is pure (`ManifestCutter`); `plan_load` streams the version through it and writes the manifest.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from runtime.shared.refusals import InvalidRequest
from runtime.taxi_etl.chunks import file_layout
from runtime.taxi_etl.errors import LoadInputError
from runtime.taxi_etl.load_bucket import LoadBucket, ObjectGone
from runtime.taxi_etl.load_objects import ChunkRange, LoadFile, manifest_key
from runtime.taxi_etl.requests import Layout

# The layout is decided from at most this much of the first chunk (cut at its last LF): 2,000 lines of a month
# file are about 200 KB; a file whose first chunk is longer than this has lines no trip has.
HEAD_MAX_BYTES: Final = 4 << 20
GZIP_MAGIC: Final = b"\x1f\x8b"
PARQUET_MAGIC: Final = b"PAR1"
MAGIC_BYTES: Final = 4


class ManifestCutter:
    """Cuts a stream of bytes into chunks of `chunk_rows` LF-separated lines, fed piece by piece; keeps the first
    chunk's bytes (at most `head_max_bytes`) for the layout and the file's first bytes for its format."""

    def __init__(self, chunk_rows: int, *, head_max_bytes: int = HEAD_MAX_BYTES) -> None:
        self._chunk_rows = chunk_rows
        self._head_max_bytes = head_max_bytes
        self._chunks: list[ChunkRange] = []
        self._size = 0  # bytes fed
        self._start = 0  # the current chunk's first byte
        self._first_line = 1
        self._lines = 0  # LFs in the current chunk so far
        self._last_byte = b""
        self._head = bytearray()
        self._head_done = False

    @property
    def start_bytes(self) -> bytes:
        """The file's first bytes (as many as were fed, up to the head's limit)."""
        return bytes(self._head[:MAGIC_BYTES])

    def feed(self, piece: bytes) -> None:
        if not piece:
            return
        if not self._head_done:
            room = self._head_max_bytes - len(self._head)
            self._head += piece[:room]
            if len(self._head) >= self._head_max_bytes:
                self._head_done = True
        position = 0
        while True:
            needed = self._chunk_rows - self._lines
            if piece.count(b"\n", position) < needed:
                self._lines += piece.count(b"\n", position)
                break
            for _ in range(needed):
                position = piece.index(b"\n", position) + 1
            end = self._size + position - 1  # the LF that ends the chunk
            self._cut(end, self._chunk_rows)
        self._size += len(piece)
        self._last_byte = piece[-1:]

    def _cut(self, end: int, lines: int) -> None:
        if not self._chunks and not self._head_done:
            del self._head[end + 1 :]  # the first chunk's bytes: its lines are the ones the layout is decided from
            self._head_done = True
        self._chunks.append(ChunkRange(len(self._chunks), self._start, end, self._first_line, lines))
        self._start = end + 1
        self._first_line += lines
        self._lines = 0

    def finish(self) -> tuple[tuple[ChunkRange, ...], bytes]:
        """The manifest, and the bytes to decide the layout from: the first chunk's, cut at a line end."""
        if self._start < self._size:
            unterminated = self._last_byte != b"\n"  # the file's last line has no LF: still a line
            self._cut(self._size - 1, self._lines + int(unterminated))
        head = bytes(self._head)
        if len(head) >= self._head_max_bytes and b"\n" in head:
            head = head[: head.rindex(b"\n") + 1]
        return tuple(self._chunks), head

    @property
    def size(self) -> int:
        return self._size


def refuse_format(start: bytes) -> None:
    """The loader uploads CSV: gzip or Parquet bytes are a file to convert first (onceflow/clients/trip_files.py)."""
    if start.startswith(GZIP_MAGIC):
        raise LoadInputError("the file is gzip-compressed; upload it as CSV text (the loader converts .csv.gz and .parquet)")
    if start.startswith(PARQUET_MAGIC):
        raise LoadInputError("the file is Parquet; upload it as CSV text (the loader converts .csv.gz and .parquet)")


def cut_file(
    pieces: Iterable[bytes], chunk_rows: int, *, head_max_bytes: int = HEAD_MAX_BYTES
) -> tuple[tuple[ChunkRange, ...], Layout | None, int]:
    """The manifest, the layout (None for an empty file) and the size of the bytes `pieces` yield, read once.
    Refused (LoadInputError) when the file is gzip or Parquet, or has no trip layout."""
    cutter = ManifestCutter(chunk_rows, head_max_bytes=head_max_bytes)
    checked = False
    for piece in pieces:
        cutter.feed(piece)
        if not checked and cutter.size >= MAGIC_BYTES:
            refuse_format(cutter.start_bytes)  # before the rest of a compressed file is read
            checked = True
    refuse_format(cutter.start_bytes)
    chunks, head = cutter.finish()
    if not chunks:
        return chunks, None, cutter.size
    try:
        layout = file_layout(head)
    except InvalidRequest as err:
        raise LoadInputError(str(err)) from err
    return chunks, layout, cutter.size


def plan_load(load: LoadFile, bucket: LoadBucket, chunk_rows: int) -> dict[str, Any]:
    """Plan's task: the manifest written under the load, and the small output the state machine keeps."""
    try:
        chunks, layout, size = cut_file(bucket.stream(load.key, load.version_id), chunk_rows)
    except ObjectGone as err:
        raise LoadInputError(str(err)) from err
    key = manifest_key(load.load_id)
    bucket.put_json(key, [chunk.to_json() for chunk in chunks])
    return {
        "manifest": {"bucket": bucket.name, "key": key},
        "chunks": len(chunks),
        "lines": sum(chunk.lines for chunk in chunks),
        "bytes": size,
        "layout": layout.to_json() if layout is not None else None,
    }
