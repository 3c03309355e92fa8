"""The operator tools' progress bars: tqdm on stderr, drawn when stderr is a terminal or when the
tool's --progress forces it (a pipe, a CI log). A total of 0 means unknown: the bar then counts."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO, TypeAlias

from tqdm import tqdm

if TYPE_CHECKING:
    from typing import Never

Bar: TypeAlias = "tqdm[Never]"  # a bar driven by update(n) and close(), not by iterating; tqdm is generic in its stubs only


def progress_bar(total: int, label: str, *, force: bool = False, stream: TextIO | None = None) -> Bar:
    """A bar of `total` steps labelled `label`; disabled (every call a no-op) unless stderr is a terminal or `force`."""
    out = stream or sys.stderr  # looked up now, so a redirected stderr is honoured
    return tqdm(total=total or None, desc=label, file=out, disable=not (force or out.isatty()), dynamic_ncols=True)
