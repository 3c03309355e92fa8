"""runtime/shared/responses.py: what an HTTP API function's answer takes once Lambda serializes it.

The body is a JSON string inside the result, so each of its characters is escaped twice: a control
character is 7 bytes of the result, a quote or a backslash 4, an emoji 14. A list's elements add up:
each is measured once, and the sum with the frame is the whole result to the byte."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from devtools.aws import service_limits as limits
from runtime.shared.http import HttpResponse
from runtime.shared.responses import LAMBDA_RESPONSE_BYTES, RESPONSE_BUDGET_BYTES, element_bytes, result_bytes, take_fitting


def test_the_limit_is_lambdas_and_the_budget_is_under_it() -> None:
    # Lambda's 6 MB response (Lambda quotas) as the embedded cloud enforces it, and a budget 1 MiB under it
    assert LAMBDA_RESPONSE_BYTES == limits.LAMBDA_SYNC_PAYLOAD_BYTES == 6_291_456
    assert RESPONSE_BUDGET_BYTES == LAMBDA_RESPONSE_BYTES - 1024 * 1024


@pytest.mark.parametrize(
    ("character", "bytes_each"), [("\x01", 7), ('"', 4), ("\\", 4), ("\n", 3), ("é", 7), ("€", 7), ("\U0001f600", 14), ("a", 1)]
)
def test_each_character_takes_its_twice_escaped_size_in_the_result(character: str, bytes_each: int) -> None:
    # Given a value of 1,000 of one character, When it is measured as a list element, Then it takes 1,000 times its size
    # in the result (and 2 + 2 for its own quotes, escaped, and 2 for the separator)
    assert element_bytes(character * 1000) == 1000 * bytes_each + 4 + 2


def random_value(rng: random.Random) -> Any:
    alphabet = ["a", "\x01", "\x1f", '"', "\\", "/", "é", "\u2028", "\U0001f600", " ", "\x7f"]
    text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
    return rng.choice([text, {"value": text, "n": rng.randrange(10**6)}, [text, None, True, 1.5]])


def test_a_pages_size_is_its_frame_and_its_elements_to_the_byte() -> None:
    rng = random.Random(34)
    for _ in range(200):
        # Given a body with a list of random elements (control characters, quotes, backslashes, non-ASCII among them)
        elements = [random_value(rng) for _ in range(rng.randrange(1, 12))]
        frame = {"log_id": "sheet", "entries": [], "next_after": "12.5"}
        # Then the whole result is the frame's size and each element's, less the separator the first has not
        measured = result_bytes(200, frame) + sum(element_bytes(element) for element in elements) - 2
        result = HttpResponse(200, {**frame, "entries": elements}).to_result()
        assert measured == result_bytes(200, {**frame, "entries": elements}) == len(json.dumps(result).encode())


def test_take_fitting_takes_what_fits_and_never_nothing() -> None:
    # Given elements of 106 bytes each in the result
    values = ["x" * 100] * 10
    # Then 3 fit 320 bytes, all fit a large room, and the first is taken even when it alone does not fit
    assert len(take_fitting(iter(values), 320)) == 3
    assert take_fitting(values, 10**6) == values
    assert take_fitting(values, 1) == values[:1]
    assert take_fitting([], 1) == []


def test_take_fitting_reads_no_further_than_one_past_the_cut() -> None:
    # Given an endless supply of elements, made on demand
    made = 0

    def supply() -> Any:
        nonlocal made
        while True:
            made += 1
            yield "x" * 100

    # When 3 are taken, Then only the fourth, which did not fit, was made beyond them
    assert len(take_fitting(supply(), 320)) == 3 and made == 4
