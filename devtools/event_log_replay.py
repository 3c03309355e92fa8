"""The from-scratch replay that checks the snapshot builder: the demo, the fault suites, the unit
tests and the snapshot benchmark compare every built snapshot with it. No handler needs it, so it
is not in the Lambda asset; it folds with the runtime's own apply_event, the rule it checks the
merge of, not an independent model."""

from __future__ import annotations

from collections.abc import Iterable

from runtime.event_log.logic import apply_event
from runtime.event_log.models import CellValue, LogEntry


def replay(events: Iterable[LogEntry]) -> dict[str, CellValue]:
    """The sheet after `events` in log order, from scratch (small logs, tools and checks)."""
    sheet: dict[str, CellValue] = {}
    for entry in events:
        value = apply_event(sheet.get(entry.event.cell), entry)
        if value is None:
            sheet.pop(entry.event.cell, None)
        else:
            sheet[entry.event.cell] = value
    return sheet
