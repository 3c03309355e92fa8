"""runtime/shared/json_depth.py: one nesting limit (32) on JSON from outside, checked before the parser,
so a deep document gets the same answer on every interpreter (json.loads's own limit is 3.11's stack)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from runtime.shared.json_depth import MAX_JSON_DEPTH, JsonTooDeep, check_depth, exceeds_depth
from tests.stack_depth import deepest_stack


def reference_depth(text: str) -> int:
    """The deepest nesting of `text`, character by character, strings skipped (what the C-speed check must agree with)."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif character in "]}":
            depth -= 1
    return deepest


def nested(depth: int, rng: random.Random) -> object:
    """A random document exactly `depth` levels deep, with strings full of brackets, quotes and backslashes."""
    leaf = "".join(rng.choice('[]{}"\\ab\x01é') for _ in range(rng.randrange(0, 8)))
    if depth == 0:
        return rng.choice([leaf, 1, None])
    inner = nested(depth - 1, rng)
    siblings = [nested(rng.randrange(0, min(depth, 3)), rng) for _ in range(rng.randrange(1, 3))]  # shallow: the size stays small
    return {"k" + leaf: inner, "s": siblings[0]} if rng.random() < 0.5 else [*siblings, inner, leaf]


@pytest.mark.parametrize("opener", ["[", "{"])
def test_32_levels_pass_and_33_do_not(opener: str) -> None:
    closer = "]" if opener == "[" else "}"

    def document(depth: int) -> str:
        if opener == "[":
            return "[" * depth + "]" * depth
        return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)

    assert reference_depth(document(32)) == 32 and closer in document(32)
    assert not exceeds_depth(document(MAX_JSON_DEPTH))
    assert exceeds_depth(document(MAX_JSON_DEPTH + 1))


@pytest.mark.parametrize("depth", [33, 900, 5000, 200_000])
def test_deep_documents_are_refused_naming_the_limit(depth: int) -> None:
    # Given a valid document `depth` levels deep (5,000 and more: json.loads raises RecursionError on 3.11, parses on 3.13)
    text = '{"x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    # When it is checked, Then it is JsonTooDeep, naming 32
    with pytest.raises(JsonTooDeep, match=r"^nested deeper than 32 levels of arrays and objects \(the limit is 32\)$"):
        check_depth(text)


def test_brackets_in_strings_escaped_quotes_and_backslashes_do_not_count() -> None:
    # Given shallow documents whose strings hold thousands of brackets behind escaped quotes and backslashes
    for value in ["[" * 5000, '\\"' + "{" * 100, "\\" * 7 + "[[[" * 30, '"]]]', '\\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[']:
        text = json.dumps({"a": [value, {"b": value}]})
        # Then they pass (3 levels deep), as text and as bytes
        assert not exceeds_depth(text) and not exceeds_depth(text.encode())


def test_the_check_agrees_with_a_character_by_character_count_on_random_documents() -> None:
    rng = random.Random(34)
    for _ in range(300):
        depth = rng.randrange(0, 45)
        text = json.dumps(nested(depth, rng), ensure_ascii=rng.random() < 0.5)
        assert reference_depth(text) == depth
        assert exceeds_depth(text) == (depth > MAX_JSON_DEPTH), text[:200]
        assert exceeds_depth(text, limit=depth) is False and (depth == 0 or exceeds_depth(text, limit=depth - 1))


@pytest.mark.parametrize("text", ["[" * 40, "]" * 40 + "[" * 10, '"unclosed [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[', "", "not json"])
def test_text_that_is_not_json_is_judged_by_its_brackets_outside_strings(text: str) -> None:
    # Unbalanced or unclosed text: refused for depth only when its open brackets alone go past the limit; the parser
    # refuses the rest
    assert exceeds_depth(text) == (reference_depth(text) > MAX_JSON_DEPTH)


def test_the_stack_probe_of_the_handler_tests_sees_a_walk_that_recurses_per_level() -> None:
    # Given DynamoDB's marshalling (boto3's TypeSerializer), which recurses once or more per level, and a value 3 levels
    # deep and one at the depth limit
    serializer = TypeSerializer()

    def value(depth: int) -> list[Any]:
        return json.loads("[" * depth + "]" * depth)  # type: ignore[no-any-return]

    serializer.serialize(value(3))  # what a first call imports, imported
    # When each is marshalled, the stack measured
    deepest = {}
    for depth in (3, MAX_JSON_DEPTH):
        with deepest_stack() as probe:
            serializer.serialize(value(depth))
        deepest[depth] = probe.deepest
    # Then the deep one stacked a frame or more per extra level: the probe would show such a walk after the parser, which
    # the handler tests (tests/integration/.../test_*32_levels*) assert there is none of
    assert deepest[MAX_JSON_DEPTH] >= deepest[3] + (MAX_JSON_DEPTH - 3), deepest
