"""Sample events and fixtures are JSON files next to this module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parent


def load_event(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / name).read_text(), parse_float=__import__("decimal").Decimal)
    return data
