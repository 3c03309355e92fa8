"""A read of the event log (EventLogService.read_latest) answers within Lambda's 6 MB response whatever
the log holds: the entries are cut by the size of the answer as Lambda serializes it, and the chunk
URLs of the snapshot are paged, each list saying where to go on (next_after, next_chunk).

The log and the bucket are small fakes here (the API does the same through DynamoDB in
tests/integration/event_log/test_event_log_limits.py). The widest entry any log can hold is a 400 KB
DynamoDB item of control characters: 7 bytes each in the answer. It fits a page beside a full
list of chunk URLs, so every page holds at least one entry and a read always moves on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from devtools.aws import service_limits as limits
from runtime.event_log.entries import MAX_POSITION
from runtime.event_log.logic import chunk_key, root_key
from runtime.event_log.models import Head
from runtime.event_log.service import CHUNK_URLS_BUDGET_BYTES, EventLogService
from runtime.shared.http import HttpResponse
from runtime.shared.responses import LAMBDA_RESPONSE_BYTES, RESPONSE_BUDGET_BYTES, result_bytes

LOG = "L" * 64  # the longest log id
DYNAMODB_PAGE_BYTES = 1_000_000
# A presigned GET as a function's role signs it: the bucket's regional host, the key, and a query with the session token
# (Lambda's are about 1,000 characters, URL-encoded larger); 2,000 characters in all, on the long side.
URL_BYTES = 2000


@dataclass
class FakeLog:
    """The log table as the read sees it: the head, and the entries after a seq in pages DynamoDB ends at 1 MB."""

    head: Head
    items: list[dict[str, Any]] = field(default_factory=list)

    def read_head(self, log_id: str) -> Head:
        return self.head

    def entries_after(self, log_id: str, after: Decimal, limit: int | None) -> tuple[list[dict[str, Any]], Decimal | None]:
        rest = [item for item in self.items if Decimal(item["seq"]) > after][: limit or None]
        page: list[dict[str, Any]] = []
        size = 0
        for item in rest:
            size += sum(len(name) + len(str(value).encode()) for name, value in item.items())  # about DynamoDB's item size
            if page and size > DYNAMODB_PAGE_BYTES:
                break
            page.append(item)
        more = len(page) < len([item for item in self.items if Decimal(item["seq"]) > after])
        return page, (Decimal(page[-1]["seq"]) if more else None)


@dataclass
class FakeBucket:
    """Snapshot roots to read, and presigned URLs of URL_BYTES characters, counted."""

    objects: dict[str, bytes] = field(default_factory=dict)
    presigned: int = 0

    def get(self, key: str) -> bytes:
        return self.objects[key]

    def download_url(self, key: str, expires_seconds: int) -> str:
        self.presigned += 1
        url = f"https://bucket.s3.eu-west-1.amazonaws.com/{key}?X-Amz-Expires={expires_seconds}&X-Amz-Security-Token="
        return url + "T" * (URL_BYTES - len(url))


def entry(position: int, value: str) -> dict[str, Any]:
    """A SetCell entry as the log table holds it, with the widest request id and cell."""
    return {"seq": position, "kind": "SetCell", "cell": "XFD1048576", "request_id": "r" * 128, "value": value}


def built_log(chunks: int, items: list[dict[str, Any]]) -> tuple[EventLogService, FakeLog, FakeBucket]:
    """A log whose snapshot 1 (cut 0) has `chunks` chunks, and `items` after it."""
    bucket = FakeBucket()
    root = {"cut": 0, "cells": chunks, "digest": "d" * 64, "chunks": [chunk_key(LOG, 1, index) for index in range(chunks)]}
    bucket.objects[root_key(LOG, 1)] = json.dumps(root).encode()
    head = Head(LOG, next_position=MAX_POSITION, snapshots=1, built=1, built_seq=Decimal("0.5"), built_root=root_key(LOG, 1), exists=True)
    log = FakeLog(head, items)
    return EventLogService(log, bucket), log, bucket  # type: ignore[arg-type]


def answer_bytes(page: dict[str, Any]) -> int:
    """The whole Lambda result, measured as the embedded cloud measures it (raises past Lambda's 6 MB); the service's
    own measure is the same but for the spaces json.dumps puts after the result's few separators."""
    size = limits.check_lambda_response(HttpResponse(200, page).to_result())
    assert 0 <= result_bytes(200, page) - size < 16
    return size


def read(service: EventLogService, bucket: FakeBucket, after: Decimal | None = None, chunk: int = 0, **options: Any) -> dict[str, Any]:
    page = service.read_latest(LOG, bucket, 1000, after, first_chunk=chunk, **options)  # type: ignore[arg-type]
    assert page is not None
    return page


def test_the_widest_entry_a_log_can_hold_fits_a_page_beside_a_full_list_of_chunk_urls() -> None:
    # Given a snapshot of 10,000 chunks, and after it two entries of 400 KiB of control characters (more than a DynamoDB
    # item can hold beside the entry's other attributes; 2.8 MB of answer each), with the widest seq, id and cell
    widest = entry(MAX_POSITION - 1, "\x01" * limits.DYNAMODB_ITEM_BYTES)
    service, _, bucket = built_log(10_000, [widest, entry(MAX_POSITION, widest["value"])])
    # When the first page is read
    page = read(service, bucket)
    # Then it holds the chunk URLs that fit their share (a few hundred, not all), and the widest entry, alone
    assert 0 < len(page["snapshot"]["chunk_urls"]) < 10_000 and page["snapshot"]["next_chunk"] == len(page["snapshot"]["chunk_urls"])
    assert [entry["value"] for entry in page["entries"]] == [widest["value"]]
    # and the whole answer is within the budget, itself under Lambda's 6 MB, as the embedded cloud measures it
    assert answer_bytes(page) <= result_bytes(200, page) <= RESPONSE_BUDGET_BYTES < LAMBDA_RESPONSE_BYTES
    # and the page says to go on after that entry
    assert page["next_after"] == str(MAX_POSITION - 1)


def test_entries_past_the_budget_are_cut_and_the_next_page_starts_at_the_first_one_left_out() -> None:
    # Given 60 entries of 30,000 control characters (a DynamoDB page of 1 MB holds 33 of them: 7 MB of answer)
    values = [chr(1 + position % 31) * 30_000 for position in range(1, 61)]
    service, _, bucket = built_log(3, [entry(position, value) for position, value in enumerate(values, start=1)])
    # When the pages are read, each after the one before's next_after
    pages = [read(service, bucket)]
    while pages[-1]["next_after"] is not None:
        pages.append(read(service, bucket, Decimal(pages[-1]["next_after"]), chunk=3))
    # Then every page is within the budget as Lambda counts it, and none is empty
    assert max(answer_bytes(page) for page in pages) <= RESPONSE_BUDGET_BYTES
    assert all(page["entries"] for page in pages)
    # and the first is cut before DynamoDB's page ended, at the last entry that fits: one more would pass the budget
    first = pages[0]
    assert 20 < len(first["entries"]) < 33
    assert first["next_after"] == first["entries"][-1]["seq"]
    with_one_more = {**first, "entries": [*first["entries"], {**first["entries"][-1], "value": values[len(first["entries"])]}]}
    assert result_bytes(200, with_one_more) > RESPONSE_BUDGET_BYTES
    # and together the pages give every entry once, in order
    assert [entry["value"] for page in pages for entry in page["entries"]] == values


def test_without_the_budget_the_same_page_would_be_past_lambdas_limit() -> None:
    # Given the 33 entries of 30,000 control characters DynamoDB returns in one page
    service, _, bucket = built_log(1, [entry(position, "\x01" * 30_000) for position in range(1, 61)])
    # When the page is taken whole (a budget past any answer: what the API answered before)
    page = read(service, bucket, budget=10**10)
    # Then its answer is 7 MB, past Lambda's 6 MB: the 500 LambdaResponseTooLarge of the issue
    assert len(page["entries"]) == 33
    with pytest.raises(limits.LambdaResponseTooLarge):
        answer_bytes(page)


def test_the_chunk_urls_of_a_large_snapshot_are_paged_and_only_a_pages_worth_presigned() -> None:
    # Given a snapshot of 5,000 chunks (one URL each: 10 MB of URLs) and no entry after it
    service, _, bucket = built_log(5000, [])
    # When the first page is read
    first = read(service, bucket)
    # Then it lists the URLs that fit their share of the answer, from chunk 0, and says where the next page starts
    snapshot = first["snapshot"]
    count = len(snapshot["chunk_urls"])
    assert (snapshot["chunks"], snapshot["first_chunk"], snapshot["next_chunk"]) == (5000, 0, count)
    assert CHUNK_URLS_BUDGET_BYTES // (URL_BYTES + 10) <= count <= CHUNK_URLS_BUDGET_BYTES // URL_BYTES
    # and it presigned only those, the one that did not fit, and the root's: not 5,000
    assert bucket.presigned == count + 2
    # When the pages are read on from each next_chunk
    pages = [first]
    while pages[-1]["snapshot"]["next_chunk"] is not None:
        pages.append(read(service, bucket, chunk=pages[-1]["snapshot"]["next_chunk"]))
    # Then every page is within the budget, and together they list every chunk's URL once, in order
    assert max(answer_bytes(page) for page in pages) <= RESPONSE_BUDGET_BYTES
    urls = [url for page in pages for url in page["snapshot"]["chunk_urls"]]
    keys = json.loads(bucket.objects[root_key(LOG, 1)])["chunks"]
    assert [url.split("?")[0].rsplit("/", 3)[-3:] for url in urls] == [key.rsplit("/", 3)[-3:] for key in keys]


def test_a_chunk_index_past_the_last_chunk_lists_no_url() -> None:
    # Given a snapshot of 3 chunks and two entries after it
    service, _, bucket = built_log(3, [entry(1, "a"), entry(2, "b")])
    # When a page is read from chunk 3 (what the client asks once it has every URL) and from far beyond
    for chunk in (3, 10**9):
        page = read(service, bucket, chunk=chunk)
        # Then it lists no URL and no next chunk, and still the entries
        assert (page["snapshot"]["chunk_urls"], page["snapshot"]["next_chunk"]) == ([], None)
        assert [entry["value"] for entry in page["entries"]] == ["a", "b"]
