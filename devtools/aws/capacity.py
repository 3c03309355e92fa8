"""DynamoDB request-unit meter for boto3 clients talking to moto.

:class:`CapacityMeter` listens to botocore's ``before-call.dynamodb.*`` and
``after-call.dynamodb.*`` events of the clients it is attached to and adds up what on-demand
DynamoDB would bill for each call. It only reads: requests and responses are left untouched.
Item sizes before and after a write are read straight from moto's in-memory backend, so the meter's
own look-ups are never billed. Those reads hold the lock moto's requests hold under
atomic_moto_dynamodb (a read of a missing key adds an entry to moto's table, which a transaction
on another thread may be copying), so a handler's pool of threads can be metered.

Billing rules (on-demand, 1 WRU = 1 KB written, 1 RRU = 4 KB read strongly consistent):

* PutItem / UpdateItem / DeleteItem: ``ceil(max(size before, size after) / 1024)`` WRU, minimum 1.
  A write whose condition fails changes nothing, so it costs ``ceil(existing size / 1024)``, min 1.
* BatchWriteItem: each put or delete as above (a delete's "after" is 0, so it costs the existing
  item's size); unprocessed items are not billed.
* TransactWriteItems: 2 x the per-item WRU above for every Put/Update/Delete/ConditionCheck, also
  when the transaction is cancelled. A ConditionCheck, and every item of a cancelled transaction
  (nothing was written), costs the existing item's size, min 1.
* GetItem: ``ceil(size / 4096)`` RRU, minimum 1 (a missing item costs 1), for ConsistentRead=true;
  half of that when eventually consistent. The full item size counts even with a projection.
* BatchGetItem: every requested key as GetItem, with its table's ConsistentRead flag; unprocessed
  keys are not billed.
* Query / Scan: ``ceil(sum of sizes of the items evaluated / 4096)``, minimum 1, halved when not
  consistent. "Evaluated" means read before any filter or projection: when the request has a
  filter, projection or Select, the same page is re-read without them through a private,
  unmetered client to learn those sizes.
* TransactGetItems: 2 x the strongly consistent cost of every item.
* Only successful calls and calls that failed on a condition (ConditionalCheckFailedException,
  TransactionCanceledException) are billed; other errors and non-data operations cost nothing.
  ``calls`` counts every call, billed or not.

Item size: the sum over attributes of (name UTF-8 bytes + value size), where a value is
S = UTF-8 bytes; N = ceil(significant digits / 2) + 1; B = bytes; BOOL / NULL = 1;
SS / NS / BS = sum of the members' sizes; L / M = 3 + 1 per element + the elements' sizes (for M,
each element's size includes its name).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto
from devtools.aws.moto_patches import MOTO_DYNAMODB_LOCK

__all__ = ["CapacityMeter", "attribute_size", "item_size"]

DEFAULT_ACCOUNT_ID = "123456789012"

_BILLED_ERRORS = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
_NARROWING = ("FilterExpression", "QueryFilter", "ScanFilter", "ConditionalOperator", "ProjectionExpression", "AttributesToGet", "Select")
_TOKEN = re.compile(r"[#:][A-Za-z0-9_]+")

# botocore hands handlers untyped objects; Any keeps mypy honest about that.
Client = Any
WireItem = Mapping[str, Any]
_TableKey = tuple[str, str]  # (table name, canonical key JSON)


def _utf8(value: str) -> int:
    return len(value.encode("utf-8"))


def _binary_len(value: Any) -> int:
    # Request bodies carry base64 text; parsed responses and moto's nested values carry bytes.
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(base64.b64decode(value))


def _number_size(text: str) -> int:
    try:
        digits = Decimal(str(text)).as_tuple().digits
    except InvalidOperation:
        return _utf8(str(text))
    significant = "".join(map(str, digits)).strip("0")
    return (max(len(significant), 1) + 1) // 2 + 1


def attribute_size(value: Mapping[str, Any]) -> int:
    """Size in bytes of one wire-format attribute value such as ``{"N": "42"}``."""
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return _utf8(inner)
    if kind == "N":
        return _number_size(inner)
    if kind == "B":
        return _binary_len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(v) for v in inner)
    if kind == "NS":
        return sum(_number_size(v) for v in inner)
    if kind == "BS":
        return sum(_binary_len(v) for v in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + _utf8(k) + attribute_size(v) for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def item_size(item: WireItem | None) -> int:
    """Size in bytes of a wire-format item (0 for None)."""
    if not item:
        return 0
    return sum(_utf8(name) + attribute_size(value) for name, value in item.items())


def _write_units(size_before: int, size_after: int) -> int:
    return max(1, math.ceil(max(size_before, size_after) / 1024))


def _read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return float(units) if consistent else units / 2


def _canonical(value: Any) -> Any:
    # Parsed responses hold bytes where request bodies hold base64 text; compare in one form.
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _key_id(table: str, key: Mapping[str, Any]) -> _TableKey:
    return table, json.dumps(_canonical(key), sort_keys=True)


def _to_client_params(value: Any, binary: bool = False) -> Any:
    # Re-sending a body through a client needs bytes for B/BS values, not base64 text.
    if isinstance(value, Mapping):
        return {k: _to_client_params(v, binary=k in ("B", "BS")) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_client_params(v, binary) for v in value]
    if binary and isinstance(value, str):
        return base64.b64decode(value)
    return value


@dataclass
class _Pending:
    operation: str
    body: dict[str, Any]
    before: dict[_TableKey, int]


class CapacityMeter:
    """Adds up the WRU / RRU that on-demand DynamoDB would bill for the metered clients' calls."""

    def __init__(self, account_id: str | None = None) -> None:
        self.account_id = account_id or os.environ.get("MOTO_ACCOUNT_ID", DEFAULT_ACCOUNT_ID)
        self.wru: float = 0.0
        self.rru: float = 0.0
        self.calls: Counter[str] = Counter()
        # The same units by table name (they add up to wru and rru).
        self.wru_by_table: defaultdict[str, float] = defaultdict(float)
        self.rru_by_table: defaultdict[str, float] = defaultdict(float)
        self._pending: dict[int, _Pending] = {}
        self._attached: set[int] = set()
        self._shadow_clients: dict[str, Client] = {}

    def attach(self, client: Client) -> None:
        """Meter ``client`` from now on; attaching the same client twice is a no-op."""
        if id(client) in self._attached:
            return
        self._attached.add(id(client))
        region: str = client.meta.region_name
        events = client.meta.events
        tag = f"onceflow-capacity-meter-{id(self)}"
        events.register("before-call.dynamodb.*", partial(self._before, region), unique_id=f"{tag}-before")
        events.register("after-call.dynamodb.*", partial(self._after, region, client), unique_id=f"{tag}-after")
        events.register("after-call-error.dynamodb.*", self._forget, unique_id=f"{tag}-error")

    def reset(self) -> None:
        self.wru = 0.0
        self.rru = 0.0
        self.calls.clear()
        self.wru_by_table.clear()
        self.rru_by_table.clear()
        self._pending.clear()

    # -- event handlers -------------------------------------------------------------------

    def _before(self, region: str, model: Any, params: Mapping[str, Any], context: Any, **_: Any) -> None:
        with MOTO_DYNAMODB_LOCK:  # the meter reads moto's tables directly; the handlers call from a pool
            operation: str = model.name
            self.calls[operation] += 1
            body = _decode_body(params.get("body"))
            keys = list(_written_keys(operation, body, self._key_of(region)))
            before = {_key_id(t, k): self._stored_size(region, t, k) for t, k in keys}
            self._pending[id(context)] = _Pending(operation, body, before)
        # Returning None lets the call proceed unchanged (a value would short-circuit it).
        return None

    def _after(
        self,
        region: str,
        client: Client,
        http_response: Any,
        parsed: Mapping[str, Any],
        model: Any,
        context: Any,
        **_: Any,
    ) -> None:
        with MOTO_DYNAMODB_LOCK:  # as in _before; also keeps the totals whole across threads
            pending = self._pending.pop(id(context), None)
            if pending is None:
                return
            ok = int(getattr(http_response, "status_code", 500)) < 300
            if not ok and parsed.get("Error", {}).get("Code") not in _BILLED_ERRORS:
                return
            op, body = pending.operation, pending.body
            if op in _WRITES or op in ("BatchWriteItem", "TransactWriteItems"):
                for table, units in self._write_cost(region, pending, parsed).items():
                    self._bill_write(table, units)
            elif op == "GetItem":
                size = self._stored_size(region, body["TableName"], body["Key"])
                self._bill_read(body["TableName"], _read_units(size, bool(body.get("ConsistentRead"))))
            elif op == "BatchGetItem":
                for table, units in self._batch_get_cost(region, body, parsed).items():
                    self._bill_read(table, units)
            elif op == "TransactGetItems":
                for entry in body.get("TransactItems", []):
                    get = entry["Get"]
                    self._bill_read(get["TableName"], 2 * _read_units(self._stored_size(region, get["TableName"], get["Key"]), True))
            elif op in ("Query", "Scan") and ok:
                size = self._evaluated_size(region, client, op, body, parsed)
                self._bill_read(body["TableName"], _read_units(size, bool(body.get("ConsistentRead"))))

    def _bill_write(self, table: str, units: float) -> None:
        self.wru += units
        self.wru_by_table[table] += units

    def _bill_read(self, table: str, units: float) -> None:
        self.rru += units
        self.rru_by_table[table] += units

    def _forget(self, context: Any, **_: Any) -> None:
        # The request never got an answer (e.g. connection error): nothing to bill.
        self._pending.pop(id(context), None)

    # -- costs ------------------------------------------------------------------------------

    def _write_cost(self, region: str, pending: _Pending, parsed: Mapping[str, Any]) -> dict[str, float]:
        unprocessed: set[_TableKey] = set()
        if pending.operation == "BatchWriteItem":
            leftovers = parsed.get("UnprocessedItems") or {}
            unprocessed = {_key_id(t, k) for t, k in _written_keys("BatchWriteItem", {"RequestItems": leftovers}, self._key_of(region))}
        factor = 2 if pending.operation == "TransactWriteItems" else 1
        by_table: defaultdict[str, float] = defaultdict(float)
        for ident, size_before in pending.before.items():
            if ident in unprocessed:
                continue
            size_after = self._stored_size(region, ident[0], json.loads(ident[1]))
            by_table[ident[0]] += factor * _write_units(size_before, size_after)
        return by_table

    def _batch_get_cost(self, region: str, body: Mapping[str, Any], parsed: Mapping[str, Any]) -> dict[str, float]:
        leftovers = parsed.get("UnprocessedKeys") or {}
        unprocessed = {_key_id(t, k) for t, req in leftovers.items() for k in req.get("Keys", [])}
        by_table: defaultdict[str, float] = defaultdict(float)
        for table, request in body.get("RequestItems", {}).items():
            consistent = bool(request.get("ConsistentRead"))
            for key in request.get("Keys", []):
                if _key_id(table, key) not in unprocessed:
                    by_table[table] += _read_units(self._stored_size(region, table, key), consistent)
        return by_table

    def _evaluated_size(
        self,
        region: str,
        client: Client,
        op: str,
        body: Mapping[str, Any],
        parsed: Mapping[str, Any],
    ) -> int:
        if not any(name in body for name in _NARROWING):
            return sum(item_size(item) for item in parsed.get("Items", []))
        scanned = int(parsed.get("ScannedCount", 0))
        if scanned == 0:
            return 0
        # Re-read the same page without filter/projection so every evaluated item is seen whole.
        params = {k: v for k, v in body.items() if k not in _NARROWING}
        used = set(_TOKEN.findall(str(params.get("KeyConditionExpression", ""))))
        for field in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
            kept = {k: v for k, v in params.pop(field, {}).items() if k in used}
            if kept:
                params[field] = kept
        params["Limit"] = scanned
        shadow = self._shadow(region, client)
        call: Callable[..., Mapping[str, Any]] = shadow.query if op == "Query" else shadow.scan
        response = call(**_to_client_params(params))
        return sum(item_size(item) for item in response.get("Items", []))

    # -- moto backend look-ups (not API calls, so never billed) ----------------------------

    @reaches_into_moto(
        Reach("moto.dynamodb.models", "dynamodb_backends"),
        Reach("moto.dynamodb.models", "DynamoDBBackend.get_table", ("self", "table_name")),
        InstanceAttribute("moto.dynamodb.models.table", "Table", attribute="hash_key_attr"),
        InstanceAttribute("moto.dynamodb.models.table", "Table", attribute="range_key_attr"),
    )
    def _table(self, region: str, name: str) -> Any:
        from moto.dynamodb.models import dynamodb_backends  # moto only matters once a call is metered

        try:
            return dynamodb_backends[self.account_id][region].get_table(name)
        except Exception:  # a missing table: the call will fail and is not billed
            return None

    def _key_of(self, region: str) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
        def key_of(table_name: str, item: Mapping[str, Any]) -> dict[str, Any]:
            table = self._table(region, table_name)
            if table is None:
                return dict(item)
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            return {name: item[name] for name in names if name in item}

        return key_of

    @reaches_into_moto(
        Reach("moto.dynamodb.models.dynamo_type", "DynamoType.__init__", ("self", "type_as_dict")),
        Reach("moto.dynamodb.models.table", "Table.get_item", ("self", "hash_key", "range_key")),
        Reach("moto.dynamodb.models.dynamo_type", "Item.to_json", ("self",)),
    )
    def _stored_size(self, region: str, table_name: str, key: Mapping[str, Any]) -> int:
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self._table(region, table_name)
        if table is None or table.hash_key_attr not in key:
            return 0
        range_attr = table.range_key_attr
        if range_attr and range_attr not in key:
            return 0
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = DynamoType(key[range_attr]) if range_attr else None
        try:
            item = table.get_item(hash_key, range_key)
        except Exception:  # invalid key shape: the call itself fails and is not billed
            return 0
        if item is None:
            return 0
        stored: dict[str, Any] = item.to_json()["Attributes"]
        return item_size(stored)

    def _shadow(self, region: str, client: Client) -> Client:
        shadow = self._shadow_clients.get(region)
        if shadow is None:
            import boto3  # type: ignore[import-untyped, unused-ignore]  # only for filtered Query/Scan

            shadow = boto3.session.Session().client("dynamodb", region_name=region, endpoint_url=client.meta.endpoint_url)
            self._shadow_clients[region] = shadow
        return shadow


def _decode_body(raw: Any) -> dict[str, Any]:
    if not raw:
        return {}
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8")
    if not isinstance(raw, str):
        return {}
    decoded = json.loads(raw)
    return decoded if isinstance(decoded, dict) else {}


def _written_keys(
    operation: str,
    body: Mapping[str, Any],
    key_of: Callable[[str, Mapping[str, Any]], dict[str, Any]],
) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(table, key) of every item a write request touches (or condition-checks)."""
    if operation == "PutItem":
        yield body["TableName"], key_of(body["TableName"], body["Item"])
    elif operation in ("UpdateItem", "DeleteItem"):
        yield body["TableName"], body["Key"]
    elif operation == "BatchWriteItem":
        for table, requests in body.get("RequestItems", {}).items():
            for request in requests:
                if "PutRequest" in request:
                    yield table, key_of(table, request["PutRequest"]["Item"])
                elif "DeleteRequest" in request:
                    yield table, request["DeleteRequest"]["Key"]
    elif operation == "TransactWriteItems":
        for entry in body.get("TransactItems", []):
            if "Put" in entry:
                yield entry["Put"]["TableName"], key_of(entry["Put"]["TableName"], entry["Put"]["Item"])
            for kind in ("Update", "Delete", "ConditionCheck"):
                if kind in entry:
                    yield entry[kind]["TableName"], entry[kind]["Key"]
