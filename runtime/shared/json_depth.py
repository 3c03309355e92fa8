"""JSON from outside the functions (HTTP bodies, Kinesis records, SQS messages) gets one nesting limit,
checked before the parser runs, so a deep document is refused the same way on every interpreter.

Without it the outcome was the interpreter's: `json.loads` recurses once per level, so it raises
RecursionError at about 1,000 levels less however deep the stack already is on 3.11 and 3.12, and
parses far deeper documents on 3.13 and 3.14. A 980-deep body was a 201 in-process and a 400 "not
valid JSON" through `make serve`. No document the functions take needs more than a few levels; 32
leaves room and keeps every refusal a clear one, naming the limit.

The check is C-speed work on the text, never a Python loop per character: byte replacements and a
split drop the strings (a bracket inside a string is no nesting), a byte translation keeps the
brackets, and the depth is the largest running sum of +1 per opening and -1 per closing bracket
(itertools, stopping at the first level past the limit). A text that is not JSON gets whatever
answer the parser gives it afterwards, unless its brackets alone already go past the limit.
"""

from __future__ import annotations

import operator
from itertools import accumulate, repeat
from typing import Final

MAX_JSON_DEPTH: Final = 32  # nested arrays and objects; the outermost one is level 1

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in _BRACKETS)
# Each bracket as a byte: 2 for an opening one, 0 for a closing one; minus 1, the step of the depth.
_STEPS = bytes.maketrans(_BRACKETS, b"\x02\x00\x02\x00")


class JsonTooDeep(ValueError):
    """The document nests arrays and objects deeper than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels of arrays and objects (the limit is {limit})")
        self.limit = limit


def exceeds_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the arrays and objects of `text` (JSON) nest deeper than `limit`, brackets in strings not counted.

    Works on the UTF-8 bytes: no byte of a multi-byte character is a bracket or a quote."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # Without its escaped backslashes and then its escaped quotes, every quote opens or closes a string,
    # so the text outside strings is every other piece between quotes.
    outside = b"".join(raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:  # not even that many openings
        return False
    steps = map(operator.sub, brackets.translate(_STEPS), repeat(1))
    return next(filter(limit.__lt__, accumulate(steps)), None) is not None


def check_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise JsonTooDeep, which names the limit, when `text` nests deeper than `limit`."""
    if exceeds_depth(text, limit):
        raise JsonTooDeep(limit)
