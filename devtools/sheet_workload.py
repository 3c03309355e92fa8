"""Seeded spreadsheet edits: what clients append to a log (tests, the demo, the benchmark)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from runtime.event_log.cells import cell_name


@dataclass(frozen=True)
class Edit:
    position: int
    cell: str
    value: str | None  # None clears the cell

    @property
    def request_id(self) -> str:
        return f"edit-{self.position:08d}"


def sheet_edits(*, seed: int, count: int, rows: int = 200, columns: int = 26, clear_rate: float = 0.1) -> list[Edit]:
    """`count` edits at positions 1..count over a rows x columns sheet; some clear a cell."""
    rng = random.Random(seed)
    edits = []
    for position in range(1, count + 1):
        cell = cell_name(rng.randint(1, rows), rng.randint(1, columns))
        value = None if rng.random() < clear_rate else f"{rng.choice(['=', ''])}{rng.randint(0, 10**6)}"
        edits.append(Edit(position, cell, value))
    return edits
