"""Corrections to moto for the tests, the demo and the benchmarks.

- Transactions: moto deep-copies every table a TransactWriteItems touches, to roll back on a
  failed condition. That makes an append cost O(size of the log), so a 50,000-event log takes
  hours. DynamoDB applies all items or none; `fast_transactions` checks every item against the
  state before the transaction (its condition, then its expression or item as moto would refuse
  them) and writes only when every one passes, with no copy of a table: an Update is run once, on
  a copy of its one item, which is what it writes.
- Time: moto's SQS reads the wall clock for visibility timeouts and delays. `VirtualClock`
  replaces that clock, so a test can jump over a 30-minute visibility timeout or a lease, and
  the snapshot worker is given the same clock.
- Threads: `atomic_moto_dynamodb` makes each DynamoDB request atomic across threads, as on
  DynamoDB (moto's are not), for handlers that run their calls on a pool.
- Step Functions: `step_functions_as_aws` fails a Choice rule, or a Lambda task's Parameters or
  ResultSelector, on a missing path with States.Runtime, and lets no retrier or catcher take
  States.Runtime (nor States.ALL take States.DataLimitExceeded), as AWS does. `strict_distributed_map`
  fails a Distributed Map's run past its ToleratedFailureCount or ToleratedFailurePercentage with
  States.ExceedToleratedFailureThreshold (moto never applied them), reads an integral percentage (moto's
  parser refused it), runs each worker's items in a loop (moto recursed once per item and hung at about
  990) and keeps DescribeMapRun's counts as AWS does.
- Speed: `cached_action_names` keeps moto from listing a response class's methods with
  `inspect.getmembers` on every request (about 3 % of the CPU of a test on moto), and
  `cached_attribute_aliases` from working out again, for every member of every response, which
  attribute names a model object may hold it under (up to a fifth of it). `direct_attribute_values`
  writes a DynamoDB item's attribute values into an answer as they are, instead of member by member
  (14 to 18 % of the CPU of the fault sweeps), and `cached_backend_urls` keeps moto from building
  every URL pattern of a service (reloading a module for S3) to route each request.
  `linear_item_size` checks an item's size once as moto builds it, not once per attribute (0.55 s of
  CPU for 2,000 trips of 27 attributes, 0.11 s with it: about a tenth of moto's time answering a chunk).
  `cached_state_machines` parses each state machine
  definition once instead of at every execution (about 0.1 s each), and `cached_step_functions_clients`
  builds the boto3 client moto's executor calls Lambda (or a Map's S3 reader and writer) with once instead
  of for every task (about 6 ms of CPU each in a test process).

`embedded_aws` is moto as everything here uses it: mock_aws with atomic DynamoDB requests, AWS's
service limits where moto does not enforce them (devtools/aws/service_limits.py), Step Functions'
error handling and Distributed Map as AWS's, and the speed caches. A bare mock_aws runs a pooled
handler on moto's unsafe tables (a test checks none is left).

Every patch declares the names it reaches in moto (`@reaches_into_moto`, devtools/aws/moto_fit.py) and
stops the run, naming itself and moto's version, if one of them no longer fits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest import mock

from devtools.aws.moto_fit import InstanceAttribute, Reach, reaches_into_moto

if TYPE_CHECKING:
    from moto.core.config import DefaultConfig


_DYNAMODB = "moto.dynamodb"


@reaches_into_moto(
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.transact_write_items", ("self", "transact_items")),
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.get_table", ("self", "table_name")),
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.get_item", ("self", "table_name", "keys")),
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.put_item", ("self", "table_name", "item_attrs")),
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.delete_item", ("self", "table_name", "key")),
    Reach(f"{_DYNAMODB}.models", "DynamoDBBackend.get_keys_value", ("self", "table", "keys")),
    Reach(f"{_DYNAMODB}.models.table", "Table.put_item", ("self", "item_attrs", "expected")),
    InstanceAttribute(f"{_DYNAMODB}.models.table", "Table", attribute="hash_key_attr"),
    InstanceAttribute(f"{_DYNAMODB}.models.table", "Table", attribute="range_key_attr"),
    InstanceAttribute(f"{_DYNAMODB}.models.table", "Table", attribute="items"),
    InstanceAttribute(f"{_DYNAMODB}.models.table", "Table", attribute="stream_shard"),
    Reach(f"{_DYNAMODB}.models.table", "StreamShard.add", ("self", "old", "new")),
    Reach(f"{_DYNAMODB}.models.dynamo_type", "Item.__init__", ("self", "hash_key", "range_key", "attrs")),
    Reach(f"{_DYNAMODB}.models.dynamo_type", "Item.to_json", ("self",)),
    Reach(f"{_DYNAMODB}.comparisons", "get_filter_expression", ("expr", "names", "values")),
    Reach(f"{_DYNAMODB}.parsing.expressions", "UpdateExpressionParser.make", ("cls", "expression_str")),
    Reach(
        f"{_DYNAMODB}.parsing.validators",
        "UpdateExpressionValidator.__init__",
        ("self", "expression", "expression_attribute_names", "expression_attribute_values", "item", "table"),
    ),
    Reach(f"{_DYNAMODB}.parsing.validators", "UpdateExpressionValidator.validate", ("self",)),
    Reach(f"{_DYNAMODB}.parsing.ast_nodes", "Node.normalize", ("self",)),
    Reach("moto.core.exceptions", "JsonRESTError"),
    Reach(
        f"{_DYNAMODB}.parsing.executors", "UpdateExpressionExecutor.__init__", ("self", "update_ast", "item", "expression_attribute_names")
    ),
    Reach(f"{_DYNAMODB}.parsing.executors", "UpdateExpressionExecutor.execute", ("self",)),
    Reach(f"{_DYNAMODB}.exceptions", "ConditionalCheckFailed"),
    Reach(f"{_DYNAMODB}.exceptions", "ItemSizeTooLarge"),
    Reach(f"{_DYNAMODB}.exceptions", "ItemSizeToUpdateTooLarge.__init__", ("self",)),
    Reach(f"{_DYNAMODB}.exceptions", "MockValidationException"),
    Reach(f"{_DYNAMODB}.exceptions", "MultipleTransactionsException"),
    Reach(f"{_DYNAMODB}.exceptions", "TooManyTransactionsException"),
    Reach(f"{_DYNAMODB}.exceptions", "TransactionCanceledException.__init__", ("self", "errors")),
    Reach(f"{_DYNAMODB}.exceptions", "TransactWriteSingleOpException"),
)
@contextmanager
def fast_transactions() -> Iterator[None]:
    """TransactWriteItems without copying the tables. Every item is checked against the state before the
    transaction: its condition, then everything else moto would refuse in it (an Update's expression is run on
    a copy of its one item, a Put's item goes through moto's checks). Only when every item passes is any
    written, each Update as the copy it was run on."""
    import copy

    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        ItemSizeTooLarge,
        ItemSizeToUpdateTooLarge,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
    from moto.dynamodb.parsing.validators import UpdateExpressionValidator

    original = DynamoDBBackend.transact_write_items

    def put_checked(table: Any, attributes: dict[str, Any]) -> bool:
        """Raise what moto's Table.put_item refuses in the item (its key's types, its values, its key and item
        sizes); False if it wrote it instead. put_item checks the item before its conditions, and this legacy
        Expected condition holds for no item (the hash key equal to a boolean, a type no key has), costing no
        expression to parse."""
        never = {table.hash_key_attr: {"ComparisonOperator": "EQ", "AttributeValueList": [{"BOOL": True}]}}
        try:
            table.put_item(attributes, expected=never)
        except ConditionalCheckFailed:
            return True
        return False

    def updated_item(backend: Any, table: Any, key: dict[str, Any], current: Any, op: dict[str, Any]) -> Any:
        """The item as moto's update_item leaves it (its steps after the condition), run on a copy; raises what it refuses."""
        names: Any = op.get("ExpressionAttributeNames")  # None when absent, as moto's own transaction passes them
        values: Any = op.get("ExpressionAttributeValues")
        expression = UpdateExpressionParser.make(op["UpdateExpression"])

        def validated(item: Any) -> Any:
            validator = UpdateExpressionValidator(
                expression, expression_attribute_names=names, expression_attribute_values=values, item=item, table=table
            )
            return validator.validate()

        if current is None:  # moto checks the expression against no attributes, then runs it on the key alone
            hash_value, range_value = backend.get_keys_value(table, key)
            validated(Item(hash_value, range_value, attrs={}))
            item = Item(hash_value, range_value, attrs=dict(key))
        else:
            item = copy.deepcopy(current)
        checked = validated(item)
        checked.normalize()
        try:
            UpdateExpressionExecutor(checked, item, names).execute()
        except ItemSizeTooLarge:
            raise ItemSizeToUpdateTooLarge() from None
        return item

    def write_update(backend: Any, table: Any, key: dict[str, Any], current: Any, updated: Any) -> None:
        """Store an update's result as moto's update_item stores it: a new item's key is put first (a stream record
        of its own), then the item is replaced, with a stream record of the change."""
        hash_value, range_value = backend.get_keys_value(table, key)
        if current is None:
            table.put_item(dict(key))
        if range_value is None:
            table.items[hash_value] = updated
        else:
            table.items[hash_value][range_value] = updated
        if table.stream_shard is not None:
            table.stream_shard.add(current, updated)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        seen: set[tuple[str, str]] = set()
        reasons: list[tuple[str | None, str | None, dict[str, Any] | None]] = []
        plan: list[tuple[str, dict[str, Any], dict[str, Any], Any, Any]] = []
        for item in transact_items:
            if len(item) > 1:
                raise TransactWriteSingleOpException
            op_type, op = next(iter(item.items()))
            table = self.get_table(op["TableName"])
            if op_type == "Put":
                key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = op["Item"][table.range_key_attr]
            else:
                key = op["Key"]
                schema = {table.hash_key_attr} | ({table.range_key_attr} if table.range_key_attr is not None else set())
                if set(key) != schema:  # DynamoDB refuses it; moto's own transaction took the extra attribute as data
                    raise MockValidationException("The provided key element does not match the schema")
            identity = (op["TableName"], str(dict(sorted(key.items()))))
            if identity in seen:
                raise MultipleTransactionsException()
            seen.add(identity)
            current = self.get_item(op["TableName"], key)
            condition = op.get("ConditionExpression")
            if condition is not None:
                check = get_filter_expression(condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues"))
                if not check.expr(current):
                    old = (
                        current.to_json()["Attributes"] if current and op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" else None
                    )
                    reasons.append(("ConditionalCheckFailed", "The conditional request failed", old))
                    continue
            updated, written = None, False
            try:
                if op_type == "Put":
                    written = not put_checked(table, op["Item"])
                elif op_type == "Update":
                    updated = updated_item(self, table, key, current, op)
            except MockValidationException:
                raise  # the whole request is refused, as moto's own transaction does
            except JsonRESTError as refusal:  # any other refusal of moto's cancels the transaction with it as the item's reason
                reasons.append((type(refusal).__name__, str(refusal), None))
                continue
            # Anything else (an AttributeError from a moto that no longer fits, say) propagates: it is no refusal.
            if written:
                table_name = op["TableName"]
                raise RuntimeError(
                    f"moto's put_item wrote an item to {table_name} under a condition no item meets: fast_transactions needs updating"
                )
            reasons.append((None, None, None))
            plan.append((op_type, op, key, current, updated))
        if any(code is not None for code, _, _ in reasons):
            raise TransactionCanceledException(reasons)
        for op_type, op, key, current, updated in plan:  # every item was checked against the state before
            if op_type == "Put":
                self.put_item(op["TableName"], op["Item"])
            elif op_type == "Delete":
                self.delete_item(op["TableName"], key)
            elif op_type == "Update":
                write_update(self, self.get_table(op["TableName"]), key, current, updated)

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoDBBackend.transact_write_items = original  # type: ignore[method-assign]


class VirtualClock:
    """Seconds since the epoch, moved only by `advance`; thread-safe."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    @reaches_into_moto(
        Reach("moto.sqs.models", "unix_time", ("dt",)),
        Reach("moto.sqs.models", "unix_time_millis", ("dt",)),
    )
    @contextmanager
    def driving_sqs(self) -> Iterator[VirtualClock]:
        """moto's SQS visibility timeouts and delays follow this clock."""
        import importlib

        # Untyped on purpose: moto imports these two clock functions into its SQS module, unexported.
        sqs_models: Any = importlib.import_module("moto.sqs.models")
        saved = (sqs_models.unix_time, sqs_models.unix_time_millis)
        sqs_models.unix_time = self
        sqs_models.unix_time_millis = self.millis
        try:
            yield self
        finally:
            sqs_models.unix_time, sqs_models.unix_time_millis = saved

    def millis(self) -> float:
        return self() * 1000


# Held around every DynamoDB request while atomic_moto_dynamodb is on; code that reads moto's
# DynamoDB backend directly (the capacity meter, the stream reader) holds it too.
MOTO_DYNAMODB_LOCK = threading.RLock()


@reaches_into_moto(Reach("moto.dynamodb.responses", "DynamoHandler.call_action", ("self",)))
@contextmanager
def atomic_moto_dynamodb() -> Iterator[None]:
    """Make each of moto's DynamoDB requests atomic across threads, as DynamoDB's are.

    moto checks a condition and then writes without a lock, so two threads can both pass the
    same condition; real DynamoDB never allows that, and tests of races must not be fooled by it.
    Its TransactWriteItems deep-copies the tables it touches, and its responses read items after
    the backend call, so a request on one thread fails ("dictionary changed size during
    iteration") while another thread writes. The lock is taken around the whole request (moto's
    DynamoHandler.call_action), so requests from a pool are served one at a time; their waits
    (devtools/aws/latency.py) still overlap, since they happen before the request reaches moto.
    """
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.call_action

    def call_action(self: Any) -> Any:
        with MOTO_DYNAMODB_LOCK:
            return original(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamoHandler.call_action = original  # type: ignore[method-assign]


# What the cached_* patches work out, kept for the process: each value depends only on its key (moto's
# service models, and so their shapes, are loaded once per process), so the next test starts warm.
_ACTION_NAMES: dict[object, frozenset[str]] = {}
# The shape and its parent are kept in the value, so their ids cannot be reused while cached.
_ATTRIBUTE_ALIASES: dict[tuple[Any, ...], tuple[Any, Any, tuple[str, ...]]] = {}
_STATE_MACHINES: dict[str, tuple[Any, Any]] = {}
_BACKEND_URLS: dict[tuple[Any, ...], dict[str, Any]] = {}


@reaches_into_moto(Reach("moto.core.responses", "method_names_from_class", ("clazz",)))
@contextmanager
def cached_action_names() -> Iterator[None]:
    """moto's request dispatch asks which actions a response class has (every function on it) on each
    request; they are the same for every request, so each class is listed once while this is on."""
    import importlib

    # Untyped on purpose: moto imports the lister into its responses module, unexported.
    responses: Any = importlib.import_module("moto.core.responses")
    original = responses.method_names_from_class

    def method_names_from_class(clazz: object) -> frozenset[str]:
        names = _ACTION_NAMES.get(clazz)
        if names is None:
            names = _ACTION_NAMES[clazz] = frozenset(original(clazz))
        return names

    responses.method_names_from_class = method_names_from_class
    try:
        yield
    finally:
        responses.method_names_from_class = original


@reaches_into_moto(
    Reach("moto.core.serialize", "DEFAULT_ALIAS_PROVIDERS"),
    Reach("moto.core.serialize", "AttributePicker.get_possible_keys", ("self", "context")),
    Reach("moto.core.serialize", "XFormedAttributePicker.get_possible_keys", ("self", "context")),
    InstanceAttribute("moto.core.serialize", "AttributePicker", attribute="alias_providers"),
    InstanceAttribute("moto.core.serialize", "AttributePickerContext", attribute="obj"),
    InstanceAttribute("moto.core.serialize", "AttributePickerContext", attribute="shape"),
    InstanceAttribute("moto.core.serialize", "AttributePickerContext", attribute="key"),
)
@contextmanager
def cached_attribute_aliases() -> Iterator[None]:
    """moto's response serializer finds each member's value by trying the names its alias providers
    give, building six providers per member of every item it answers with. Those names depend only
    on the object's class (unless it carries a `Meta` of its own aliases), the member's shape and
    its parent, and the member's name, so each combination is worked out once while this is on."""
    from moto.core import serialize

    known = set(serialize.DEFAULT_ALIAS_PROVIDERS)
    originals = {picker: picker.__dict__["get_possible_keys"] for picker in (serialize.AttributePicker, serialize.XFormedAttributePicker)}

    def cached(picker: type, original: Any) -> Any:
        def get_possible_keys(self: Any, context: Any) -> Any:
            providers = tuple(self.alias_providers)
            if hasattr(context.obj, "Meta") or not known.issuperset(providers):
                return original(self, context)
            shape = context.shape
            parent = getattr(shape, "parent", None)
            key = (picker, providers, type(context.obj), id(shape), id(parent), context.key)
            entry = _ATTRIBUTE_ALIASES.get(key)
            if entry is None:
                entry = _ATTRIBUTE_ALIASES[key] = (shape, parent, tuple(original(self, context)))
            return entry[2]

        return get_possible_keys

    for picker, original in originals.items():
        picker.get_possible_keys = cached(picker, original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for picker, original in originals.items():
            picker.get_possible_keys = original  # type: ignore[method-assign]


@reaches_into_moto(
    Reach("moto.core.base_backend", "BaseBackend.urls"),
    Reach("moto.settings", "enable_iso_regions", ()),
    Reach("moto.settings", "get_s3_custom_endpoints", ()),
)
@contextmanager
def cached_backend_urls() -> Iterator[None]:
    """moto routes every request by building each URL pattern of the service's backend again, and for
    S3 by reloading `moto.s3.urls` first (about a sixth of the CPU of a test that writes to S3). The
    patterns depend only on the backend's class and on two settings moto reads from the environment
    (ISO regions, custom S3 endpoints), so while this is on they are built once per combination."""
    from moto import settings
    from moto.core.base_backend import BaseBackend

    original = BaseBackend.__dict__["urls"]

    def urls(backend: Any) -> dict[str, Any]:
        key = (type(backend), settings.enable_iso_regions(), tuple(settings.get_s3_custom_endpoints()))
        patterns = _BACKEND_URLS.get(key)
        if patterns is None:
            patterns = _BACKEND_URLS[key] = original.fget(backend)
        return patterns

    BaseBackend.urls = property(urls)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        BaseBackend.urls = original  # type: ignore[method-assign]


@reaches_into_moto(
    Reach(f"{_DYNAMODB}.models.dynamo_type", "Item.__init__", ("self", "hash_key", "range_key", "attrs")),
    Reach(f"{_DYNAMODB}.models.dynamo_type", "LimitedSizeDict.__setitem__", ("self", "key", "value")),
    Reach(f"{_DYNAMODB}.models.dynamo_type", "DynamoType.__init__", ("self", "type_as_dict")),
)
@contextmanager
def linear_item_size() -> Iterator[None]:
    """moto builds an item's attributes one at a time into a dict that checks the item's size at each one by
    summing the size of every attribute already in it: quadratic in the attributes (0.55 s of CPU for 2,000
    trips of 27 attributes, 0.11 s with this). The sizes only grow as attributes are added, so the
    check of the last one decides. While this is on, an item's attributes but the last go in without a check,
    and the last through moto's own `__setitem__`, which sums them all against moto's own limit: the same
    item, or the same ItemSizeTooLarge."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

    original = Item.__dict__["__init__"]

    def built_with_one_size_check(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        self.hash_key = hash_key
        self.range_key = range_key
        values = [(key, DynamoType(value)) for key, value in attrs.items()]
        self.attrs = LimitedSizeDict()
        if values:
            dict.update(self.attrs, values[:-1])
            self.attrs[values[-1][0]] = values[-1][1]

    Item.__init__ = built_with_one_size_check  # type: ignore[method-assign]
    try:
        yield
    finally:
        Item.__init__ = original  # type: ignore[method-assign]


# An attribute value's types whose JSON is the value itself (a string, a number's string, a
# boolean), its sets of strings, and its containers of attribute values.
_SCALAR_ATTRIBUTE_TYPES = {"S": str, "N": str, "BOOL": bool, "NULL": bool}
_STRING_SET_TYPES = frozenset({"SS", "NS"})


def _plain_attribute_value(value: Any) -> dict[str, Any] | None:
    """The JSON of a DynamoDB attribute value as moto hands it to its serializer (one {type: value}
    pair), or None if any part of it is something else (binary, a number not in a string, a second
    key), which is left to moto."""
    if type(value) is not dict or len(value) != 1:
        return None
    [(kind, inner)] = value.items()
    scalar = _SCALAR_ATTRIBUTE_TYPES.get(kind)
    if scalar is not None:
        return {kind: inner} if type(inner) is scalar else None
    if kind in _STRING_SET_TYPES:
        return {kind: list(inner)} if type(inner) is list and all(type(member) is str for member in inner) else None
    if kind == "M" and type(inner) is dict:
        entries = {name: _plain_attribute_value(member) for name, member in inner.items()}
        return None if None in entries.values() else {kind: entries}
    if kind == "L" and type(inner) is list:
        members = [_plain_attribute_value(member) for member in inner]
        return None if None in members else {kind: members}
    return None


@reaches_into_moto(
    Reach("moto.core.serialize", "BaseJSONSerializer._serialize_type_structure", ("self", "serialized", "value", "shape", "key")),
    Reach("moto.core.serialize", "ResponseSerializer._default_serialize", ("self", "serialized", "value", "shape", "key")),
)
@contextmanager
def direct_attribute_values() -> Iterator[None]:
    """moto's JSON serializer writes each DynamoDB attribute value of an answer member by member: all
    ten members of the AttributeValue shape, each looked up through the alias providers, for every
    attribute of every item (about half of moto's time in a DynamoDB call that returns items). What
    moto hands it is already the value's JSON: one {type: value} pair of strings, booleans, lists and
    maps. While this is on, such a value is written as it is; anything else (binary, which is
    base64-encoded, or a shape moto fills otherwise) goes through moto's walk."""
    from moto.core.serialize import BaseJSONSerializer

    original = BaseJSONSerializer.__dict__["_serialize_type_structure"]

    def _serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue":
            plain = _plain_attribute_value(value)
            if plain is not None:
                self._default_serialize(serialized, plain, shape, key)
                return
        original(self, serialized, value, shape, key)

    BaseJSONSerializer._serialize_type_structure = _serialize_type_structure  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseJSONSerializer._serialize_type_structure = original  # type: ignore[method-assign]


@reaches_into_moto(Reach("moto.stepfunctions.parser.asl.parse.asl_parser", "AmazonStateLanguageParser.parse", ("definition",)))
@contextmanager
def cached_state_machines() -> Iterator[None]:
    """moto's Step Functions parses the definition (ANTLR, then its own preprocessor) at the start of
    every execution: about 0.1 s for the taxi saga's, most of a short execution's cost. Each
    definition is parsed once while this is on, and every caller gets a deep copy of the program, the
    fresh object graph a parse would give (its components keep per-execution ids); the parse tree is
    shared, as the static analysers only read it. A definition that fails to parse is not cached."""
    import copy
    import importlib

    # Untyped on purpose: moto's ASL parser module has no stubs.
    parser: Any = importlib.import_module("moto.stepfunctions.parser.asl.parse.asl_parser").AmazonStateLanguageParser
    original = parser.__dict__["parse"]
    parse = original.__func__

    def cached_parse(definition: str) -> tuple[Any, Any]:
        entry = _STATE_MACHINES.get(definition)
        if entry is None:
            entry = _STATE_MACHINES[definition] = parse(definition)
        program, tree = entry
        return copy.deepcopy(program), tree

    parser.parse = staticmethod(cached_parse)
    try:
        yield
    finally:
        parser.parse = original


_FAILURE_EVENT = "moto.stepfunctions.parser.asl.component.common.error_name.failure_event"
_ERROR_NAME_TYPE = "moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type"


@reaches_into_moto(
    Reach("moto.stepfunctions.parser.api", "HistoryEventType.LambdaFunctionFailed"),
    Reach("moto.stepfunctions.parser.api", "HistoryEventType.TaskFailed"),
    Reach("moto.stepfunctions.parser.api", "HistoryEventType.ExecutionFailed"),
    Reach(_FAILURE_EVENT, "FailureEvent.__init__", ("self", "env", "error_name", "event_type", "event_details")),
    Reach(_FAILURE_EVENT, "FailureEventException.__init__", ("self", "failure_event")),
    Reach("moto.stepfunctions.parser.asl.component.common.error_name.states_error_name", "StatesErrorName.__init__", ("self", "typ")),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.to_name", ("self",)),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.StatesRuntime"),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.StatesStatesDataLimitExceeded"),
)
def states_failure(env: Any, error: str, cause: str, *, lambda_task: bool, event: str = "ExecutionFailed") -> Exception:
    """The exception moto's interpreter fails a state with (FailureEventException, carrying its FailureEvent):
    `error` names a StatesErrorNameType member, `event` the HistoryEventType of a failure that is not a Lambda
    task's own."""
    from moto.stepfunctions.parser.api import HistoryEventType
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent, FailureEventException
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType

    error_type = StatesErrorNameType[error]
    failure = {"error": error_type.to_name(), "cause": cause}
    # moto's EventDetails, a TypedDict of every kind of event detail, of which one is given
    details: Any = {"lambdaFunctionFailedEventDetails": failure} if lambda_task else {"executionFailedEventDetails": failure}
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=error_type),
            event_type=HistoryEventType.LambdaFunctionFailed if lambda_task else HistoryEventType[event],
            event_details=details,
        )
    )


def _states_runtime_failure(env: Any, cause: str, *, lambda_task: bool = False) -> Any:
    """What Step Functions fails an execution with when its data does not fit the definition's paths."""
    return states_failure(env, "StatesRuntime", cause, lambda_task=lambda_task)


_COMPARISON = "moto.stepfunctions.parser.asl.component.state.choice.comparison"


@reaches_into_moto(
    Reach(f"{_COMPARISON}.comparison_variable", "ComparisonVariable._eval_body", ("self", "env")),
    InstanceAttribute(f"{_COMPARISON}.comparison_variable", "ComparisonVariable", attribute="variable"),
    InstanceAttribute(f"{_COMPARISON}.comparison_variable", "ComparisonVariable", attribute="comparison_function"),
    InstanceAttribute(f"{_COMPARISON}.variable", "Variable", attribute="string_sampler"),
    InstanceAttribute(
        "moto.stepfunctions.parser.asl.component.common.string.string_expression", "StringSampler", attribute="literal_value"
    ),
    InstanceAttribute(f"{_COMPARISON}.comparison_func", "ComparisonFunc", attribute="operator_type"),
    InstanceAttribute("moto.stepfunctions.parser.asl.eval.environment", "Environment", attribute="stack"),
    Reach(f"{_COMPARISON}.comparison_operator_type", "ComparisonOperatorType.IsPresent"),
    Reach(f"{_COMPARISON}.variable", "NoSuchVariable"),
    Reach(
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda",
        "StateTaskLambda._from_error",
        ("self", "env", "ex"),
    ),
    Reach("moto.stepfunctions.parser.asl.utils.json_path", "NoSuchJsonPathError"),
    Reach("moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl", "ErrorEqualsDecl._eval_body", ("self", "env")),
    InstanceAttribute(
        "moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl", "ErrorEqualsDecl", attribute="error_names"
    ),
    Reach("moto.stepfunctions.parser.asl.component.common.error_name.states_error_name", "StatesErrorName.__init__", ("self", "typ")),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.StatesRuntime"),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.StatesStatesDataLimitExceeded"),
)
@contextmanager
def step_functions_as_aws() -> Iterator[None]:
    """Step Functions' error handling where moto's interpreter is laxer (Step Functions Developer Guide,
    "Handling errors in Step Functions workflows" and "Choice workflow state"):
    - a Choice rule whose Variable path is missing from the state fails the execution with States.Runtime
      ("Invalid path '$.x': The choice state's condition path references an invalid value."); moto read
      the rule as false and went on to the next rule or the Default. Only IsPresent tests a missing path.
    - a Lambda task's Parameters or ResultSelector path missing from the data is States.Runtime too; moto
      reported it as the function's failure ("Exception", matched as States.TaskFailed), so the task was
      retried, and caught. moto already fails InputPath, OutputPath and the other states' paths so.
    - States.Runtime "isn't retriable, and will always cause the execution to fail": no retrier or
      catcher matches it, States.ALL or naming it (moto's States.ALL matched it);
    - States.ALL does not match States.DataLimitExceeded either, only a catcher naming it does.
    """
    from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_operator_type import ComparisonOperatorType
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_variable import ComparisonVariable
    from moto.stepfunctions.parser.asl.component.state.choice.comparison.variable import NoSuchVariable
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task_lambda import StateTaskLambda
    from moto.stepfunctions.parser.asl.utils.json_path import NoSuchJsonPathError

    def compare(self: Any, env: Any) -> None:
        # moto's ComparisonVariable._eval_body (the variable, then the comparison), with the missing path refused
        self.variable.eval(env)
        if isinstance(env.stack[-1], NoSuchVariable) and self.comparison_function.operator_type != ComparisonOperatorType.IsPresent:
            path = self.variable.string_sampler.literal_value
            raise _states_runtime_failure(env, f"Invalid path '{path}': The choice state's condition path references an invalid value.")
        self.comparison_function.eval(env)

    def lambda_task_failure(self: Any, env: Any, ex: Exception) -> Any:
        # moto's StateTaskLambda._from_error (called with env= and ex=): the FailureEvent a task's exception is
        # retried, caught or failed with
        if isinstance(ex, NoSuchJsonPathError):
            return _states_runtime_failure(env, str(ex), lambda_task=True).failure_event
        return original_lambda_failure(self, env=env, ex=ex)

    runtime = StatesErrorName(typ=StatesErrorNameType.StatesRuntime)
    data_limit = StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded)

    def error_equals(self: Any, env: Any) -> None:
        # moto's ErrorEqualsDecl pops the error's name and pushes whether this retrier or catcher matches it
        error_name = env.stack[-1]
        if error_name == runtime or (error_name == data_limit and data_limit not in self.error_names):
            env.stack[-1] = False
            return
        original_error_equals(self, env)

    original_lambda_failure = StateTaskLambda._from_error
    original_error_equals = ErrorEqualsDecl._eval_body
    with (
        mock.patch.object(ComparisonVariable, "_eval_body", compare),
        mock.patch.object(StateTaskLambda, "_from_error", lambda_task_failure),
        mock.patch.object(ErrorEqualsDecl, "_eval_body", error_equals),
    ):
        yield


_MAP = "moto.stepfunctions.parser.asl.component.state.exec.state_map"
_BOTO_CLIENT = "moto.stepfunctions.parser.asl.utils.boto_client"
# The modules of moto's executor whose calls the cached clients serve, each under the name it imported:
# Lambda tasks, and a Distributed Map's ItemReader and ResultWriter.
_CLIENT_USERS = (
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.lambda_eval_utils",
    f"{_MAP}.item_reader.eval.resource_eval_s3",
    f"{_MAP}.result_writer.resource_eval.resource_eval_s3",
)
_STEP_FUNCTIONS_CLIENTS: dict[tuple[Any, ...], Any] = {}
_STEP_FUNCTIONS_CLIENTS_LOCK = threading.Lock()


@reaches_into_moto(
    Reach(_BOTO_CLIENT, "boto_client_for", ("region", "service", "state_credentials")),
    Reach(_BOTO_CLIENT, "moto_server_port", ()),
    Reach(_BOTO_CLIENT, "botocore_stubber"),
    InstanceAttribute("moto.core.botocore_stubber", "BotocoreStubber", attribute="enabled"),
    *(Reach(module, "boto_client_for", ("region", "service", "state_credentials")) for module in _CLIENT_USERS),
)
@contextmanager
def cached_step_functions_clients() -> Iterator[None]:
    """moto's Step Functions executor builds a new boto3 client for every Lambda task it runs and every
    ItemReader or ResultWriter call (about 6 ms of CPU each in a test process, 3.4 ms in a bare one; the taxi
    fault tests ask for one 638 times and spend about 11 % less CPU with them kept). The client it builds
    depends only on the region, the service, whether mock_aws intercepts calls and otherwise the local
    server's port (moto 5.2.5 takes the state's credentials and does not use them: every client signs with
    the same dummy key), so while this is on each is built once, under a lock, and shared: boto3's clients
    are safe to call from many threads. A client is kept for the process, as it answers the same in any
    later mock."""
    import importlib

    boto_client: Any = importlib.import_module(_BOTO_CLIENT)
    users: list[Any] = [importlib.import_module(module) for module in _CLIENT_USERS]
    originals = [user.boto_client_for for user in users]
    build = boto_client.boto_client_for

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        intercepting = boto_client.botocore_stubber.enabled
        endpoint = None if intercepting else boto_client.moto_server_port()
        key = (region, service, intercepting, endpoint)
        found = _STEP_FUNCTIONS_CLIENTS.get(key)
        if found is None:
            with _STEP_FUNCTIONS_CLIENTS_LOCK:  # boto3 builds clients on a shared session, which is not thread-safe
                found = _STEP_FUNCTIONS_CLIENTS.get(key)
                if found is None:
                    found = _STEP_FUNCTIONS_CLIENTS[key] = build(region, service, state_credentials)
        return found

    for user in users:
        user.boto_client_for = boto_client_for
    try:
        yield
    finally:
        for user, original in zip(users, originals, strict=True):
            user.boto_client_for = original


_MAP_RUN = f"{_MAP}.iteration.itemprocessor.map_run_record"
_MAP_WORKER = f"{_MAP}.iteration.itemprocessor.distributed_item_processor_worker"
_MAP_JOB = f"{_MAP}.iteration.job"
_ENVIRONMENT = "moto.stepfunctions.parser.asl.eval.environment"
_EXECUTION_STATES = "moto.stepfunctions.parser.asl.eval.states"
_PROGRAM_STATE = "moto.stepfunctions.parser.asl.eval.program_state"
_COUNTS = ("total", "pending", "running", "succeeded", "failed", "timed_out", "aborted", "results_written")
THRESHOLD_EXCEEDED_CAUSE = "The specified tolerated failure threshold was exceeded"
# The tolerance of each Map Run in progress, by its record (its workers look it up).
_TOLERANCES: dict[Any, _Tolerance] = {}


def _float_failure_percentages(states: Any) -> bool:
    """Rewrite, in place, each Map state's integral ToleratedFailurePercentage under `states` (a definition, an
    ItemProcessor or a Parallel branch) as the same number with a fraction; True if any was."""
    rewritten = False
    for state in states.get("States", {}).values() if isinstance(states, dict) else ():
        if not isinstance(state, dict):
            continue
        percentage = state.get("ToleratedFailurePercentage")
        if state.get("Type") == "Map" and type(percentage) is int:
            state["ToleratedFailurePercentage"] = float(percentage)
            rewritten = True
        for inner in (state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", ())):
            rewritten = _float_failure_percentages(inner) or rewritten
    return rewritten


class _Tolerance:
    """What fails a Distributed Map's run, as AWS applies it ("Tolerated failure threshold for Distributed Map
    state"): failed and timed-out items over ToleratedFailureCount, or over ToleratedFailurePercentage of all the
    items, whichever the definition declares (either exceeded fails it); with neither declared, any failure. The
    thresholds are read from the run's record, where UpdateMapRun changes them."""

    def __init__(self, declares_count: bool, declares_percentage: bool) -> None:
        self.declares_count = declares_count
        self.declares_percentage = declares_percentage

    def exceeded(self, record: Any) -> bool:
        items = record.item_counter
        failed: int = items.failed.get() + items.timed_out.get()
        if not self.declares_count and not self.declares_percentage:
            return failed > 0
        over_count = self.declares_count and failed > record.tolerated_failure_count
        total = items.total.get()
        over_percentage = self.declares_percentage and total > 0 and failed * 100.0 / total > record.tolerated_failure_percentage
        return bool(over_count or over_percentage)


@reaches_into_moto(
    Reach("moto.stepfunctions.parser.asl.parse.asl_parser", "AmazonStateLanguageParser.parse", ("definition",)),
    Reach(f"{_MAP}.state_map", "StateMap.from_state_props", ("self", "state_props")),
    InstanceAttribute(f"{_MAP}.state_map", "StateMap", attribute="iteration_component"),
    Reach("moto.stepfunctions.parser.asl.parse.typed_props", "TypedProps.get", ("self", "typ")),
    Reach(f"{_MAP}.tolerated_failure", "ToleratedFailureCountDecl"),
    Reach(f"{_MAP}.tolerated_failure", "ToleratedFailurePercentageDecl"),
    Reach(f"{_MAP}.iteration.itemprocessor.distributed_item_processor", "DistributedItemProcessor._map_run", ("self", "env", "eval_input")),
    InstanceAttribute(
        f"{_MAP}.iteration.distributed_iteration_component", "DistributedIterationComponentEvalInput", attribute="map_run_record"
    ),
    Reach(_MAP_WORKER, "DistributedItemProcessorWorker._eval_job", ("self", "env", "job")),
    Reach(_MAP_WORKER, "DistributedItemProcessorWorker._eval_pool", ("self", "job", "worker_frame")),
    Reach(_MAP_WORKER, "DistributedItemProcessorWorker._eval_input", ("self", "env_frame")),
    Reach(_MAP_WORKER, "DistributedItemProcessorWorker.stopped", ("self",)),
    InstanceAttribute(_MAP_WORKER, "DistributedItemProcessorWorker", attribute="_map_run_record"),
    InstanceAttribute(_MAP_WORKER, "DistributedItemProcessorWorker", attribute="_job_pool"),
    InstanceAttribute(_MAP_WORKER, "DistributedItemProcessorWorker", attribute="_env"),
    Reach(_MAP_JOB, "JobPool.next_job", ("self",)),
    Reach(_MAP_JOB, "JobPool.close_job", ("self", "job")),
    *(InstanceAttribute(_MAP_JOB, "Job", attribute=name) for name in ("job_index", "job_input", "job_program", "job_output")),
    *(InstanceAttribute(_MAP_RUN, "MapRunRecord", attribute=name) for name in ("item_counter", "execution_counter")),
    *(InstanceAttribute(_MAP_RUN, "MapRunRecord", attribute=name) for name in ("tolerated_failure_count", "tolerated_failure_percentage")),
    *(InstanceAttribute(_MAP_RUN, "ProgressCounter", attribute=name) for name in _COUNTS),
    Reach(_MAP_RUN, "Counter.count", ("self",)),
    Reach(_MAP_RUN, "Counter.offset", ("self", "offset")),
    Reach(_MAP_RUN, "Counter.get", ("self",)),
    Reach(_ENVIRONMENT, "Environment.open_inner_frame", ("self",)),
    Reach(_ENVIRONMENT, "Environment.delete_frame", ("self", "frame")),
    Reach(_ENVIRONMENT, "Environment.program_state", ("self",)),
    InstanceAttribute(_ENVIRONMENT, "Environment", attribute="states"),
    InstanceAttribute(_ENVIRONMENT, "Environment", attribute="stack"),
    Reach(_EXECUTION_STATES, "States.reset", ("self", "input_value")),
    Reach(_EXECUTION_STATES, "States.get_input", ("self",)),
    InstanceAttribute(_EXECUTION_STATES, "States", attribute="context_object"),
    InstanceAttribute(_EXECUTION_STATES, "ContextObject", attribute="context_object_data"),
    Reach(_EXECUTION_STATES, "MapData"),
    Reach(_EXECUTION_STATES, "ItemData"),
    Reach(_PROGRAM_STATE, "ProgramError"),
    Reach(_PROGRAM_STATE, "ProgramStopped"),
    Reach("moto.stepfunctions.parser.asl.component.common.timeouts.timeout", "EvalTimeoutError"),
    Reach("moto.stepfunctions.parser.api", "HistoryEventType.MapRunFailed"),
    Reach(_ERROR_NAME_TYPE, "StatesErrorNameType.StatesExceedToleratedFailureThreshold"),
)
@contextmanager
def strict_distributed_map() -> Iterator[None]:
    """A DISTRIBUTED Map (ItemProcessor) run as AWS runs it where moto 5.2.5 is laxer:
    - Tolerated failures: moto parses ToleratedFailureCount and ToleratedFailurePercentage and never applies
      them (a failed child leaves null in the Map's output and the Map succeeds). Here the Map Run fails with
      States.ExceedToleratedFailureThreshold, which a Retry or Catch can take, once its failed and timed-out
      items exceed a declared threshold (`_Tolerance`); no item starts after that (AWS may finish those already
      running, as here). 100 % never fails.
    - An integral ToleratedFailurePercentage (`10`, as CDK renders it) is a parse error on moto, whose grammar
      takes only a number with a fraction there; AWS takes any number from 0 to 100. It is read as the same
      number (`10.0`).
    - Each worker thread ran its items by recursion, one level per item: about 990 items on one worker
      (items / MaxConcurrency) raised RecursionError in the thread, which never closed its item, and the
      execution waited forever. Here a worker runs its items in a loop.
    - DescribeMapRun's counts: an item's `total` and `pending` are every item from the start (moto counted
      items as they started, and none as pending), and a child that failed, timed out or was aborted is no
      longer counted as running (moto left failed children running, and counted only failed executions).
    Children are still frames of the parent, not executions of their own (no history; see
    docs/development.md)."""
    import importlib
    import json

    from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import EvalTimeoutError
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor import (
        DistributedItemProcessor,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor_worker import (
        DistributedItemProcessorWorker,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.state_map import StateMap
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.tolerated_failure import (
        ToleratedFailureCountDecl,
        ToleratedFailurePercentageDecl,
    )
    from moto.stepfunctions.parser.asl.eval.program_state import ProgramError, ProgramStopped
    from moto.stepfunctions.parser.asl.eval.states import ItemData, MapData

    # Untyped on purpose: moto's ASL parser module has no stubs.
    parser: Any = importlib.import_module("moto.stepfunctions.parser.asl.parse.asl_parser").AmazonStateLanguageParser
    original_parse = parser.__dict__["parse"]
    parse = original_parse.__func__
    original_props = StateMap.from_state_props
    inherited_map_run = DistributedItemProcessor._map_run  # DistributedIterationComponent's

    def parse_with_float_percentages(definition: str) -> Any:
        if "ToleratedFailurePercentage" in definition:
            try:
                document = json.loads(definition)
            except ValueError:
                return parse(definition)  # moto refuses it as it would
            if _float_failure_percentages(document):
                return parse(json.dumps(document))
        return parse(definition)

    def from_state_props(self: Any, state_props: Any) -> None:
        # moto reads an undeclared threshold as 0, the same as a declared 0; which are declared decides AWS's rule.
        original_props(self, state_props)
        if isinstance(self.iteration_component, DistributedItemProcessor):
            component: Any = self.iteration_component
            component.strict_tolerance = _Tolerance(
                declares_count=state_props.get(ToleratedFailureCountDecl) is not None,
                declares_percentage=state_props.get(ToleratedFailurePercentageDecl) is not None,
            )

    def map_run(self: Any, env: Any, eval_input: Any) -> None:
        tolerance = getattr(self, "strict_tolerance", None)
        if tolerance is None:  # a program parsed (and cached) while this patch was off: its thresholds are unknown
            raise RuntimeError("a Distributed Map parsed without strict_distributed_map ran under it; enter it first")
        record = eval_input.map_run_record
        items = len(env.stack[-1])  # moto's _map_run takes the items from the stack
        record.item_counter.total.count(items)
        record.item_counter.pending.count(items)
        _TOLERANCES[record] = tolerance
        try:
            inherited_map_run(self, env, eval_input)
        finally:
            del _TOLERANCES[record]
        if tolerance.exceeded(record):
            env.stack.pop()  # the children's outputs
            raise states_failure(
                env, "StatesExceedToleratedFailureThreshold", THRESHOLD_EXCEEDED_CAUSE, lambda_task=False, event="MapRunFailed"
            )

    def eval_job(self: Any, env: Any, job: Any) -> None:
        # moto's _eval_job with AWS's counts: the item leaves `pending`, and every outcome ends its `running`.
        items, executions = self._map_run_record.item_counter, self._map_run_record.execution_counter
        items.pending.offset(-1)
        for counts in (items, executions):
            counts.running.count()
        executions.total.count()
        job_output = None
        outcome = "failed"
        try:
            env.states.context_object.context_object_data["Map"] = MapData(Item=ItemData(Index=job.job_index, Value=job.job_input))
            env.states.reset(input_value=job.job_input)
            env.stack.append(env.states.get_input())
            self._eval_input(env_frame=env)
            job.job_program.eval(env)
            end = env.program_state()
            if isinstance(end, ProgramStopped):
                outcome = "aborted"
            elif not isinstance(end, ProgramError):
                outcome = "succeeded"
                job_output = env.states.get_input()
        except EvalTimeoutError:
            outcome = "timed_out"
        except Exception:  # as moto: any other error evaluating the child (its input, say) fails its item
            outcome = "failed"
        finally:
            for counts in (items, executions):
                getattr(counts, outcome).count()
                if outcome == "succeeded":
                    counts.results_written.count()
                counts.running.offset(-1)
            job.job_output = job_output

    def eval_pool(self: Any, job: Any, worker_frame: Any) -> None:
        # moto's _eval_pool as a loop (it recursed once per item); an item taken after the run's tolerance was
        # exceeded is closed without running (it stays pending), so the Map ends once the running ones have.
        # (A worker whose thread starts after the run has ended finds no job, and no tolerance either.)
        while job is not None:
            if not _TOLERANCES[self._map_run_record].exceeded(self._map_run_record):
                job_frame = worker_frame.open_inner_frame()
                self._eval_job(env=job_frame, job=job)
                worker_frame.delete_frame(job_frame)
            if isinstance(job.job_output, Exception) or self.stopped():
                break
            next_job = self._job_pool.next_job()
            if next_job is None:
                break
            self._job_pool.close_job(job)
            job = next_job
        # As moto: the worker's frame is closed before its last item, which the Map awaits.
        self._env.delete_frame(worker_frame)
        if job is not None:
            self._job_pool.close_job(job)

    parser.parse = staticmethod(parse_with_float_percentages)
    try:
        with (
            mock.patch.object(StateMap, "from_state_props", from_state_props),
            mock.patch.object(DistributedItemProcessor, "_map_run", map_run),
            mock.patch.object(DistributedItemProcessorWorker, "_eval_job", eval_job),
            mock.patch.object(DistributedItemProcessorWorker, "_eval_pool", eval_pool),
        ):
            yield
    finally:
        parser.parse = original_parse


@reaches_into_moto(
    Reach("moto.s3.notifications", "_get_s3_event", ("event_name", "bucket", "key", "notification_id")),
    InstanceAttribute("moto.s3.models", "FakeKey", attribute="_version_id"),
)
@contextmanager
def s3_events_as_aws() -> Iterator[None]:
    """S3 event notifications with what AWS puts in them and moto leaves out: the object's `versionId` (in a
    versioned bucket) and a `sequencer` that grows with each event. A consumer that loads the exact version
    an event names (the taxi load starter) would otherwise see every object as unversioned on moto."""
    from moto.s3 import notifications

    original = notifications._get_s3_event
    sequence = iter(range(1, 1 << 62))
    lock = threading.Lock()

    def get_s3_event(event_name: str, bucket: Any, key: Any, notification_id: str) -> dict[str, Any]:
        event = original(event_name, bucket, key, notification_id)
        with lock:
            sequencer = f"{next(sequence):016X}"
        for record in event["Records"]:
            item = record["s3"]["object"]
            if key._version_id not in (None, "null"):  # moto's "null": put in a bucket without versioning
                item["versionId"] = str(key._version_id)
            item["sequencer"] = sequencer
        return event

    with mock.patch.object(notifications, "_get_s3_event", get_s3_event):
        yield


@contextmanager
def embedded_aws(config: DefaultConfig | None = None) -> Iterator[None]:
    """moto's mock_aws (with moto's `config`), DynamoDB requests atomic across threads, AWS's service
    limits enforced, Step Functions' error handling and Distributed Map as AWS's, and the speed caches:
    the embedded cloud."""
    from moto import mock_aws

    from devtools.aws.service_limits import enforced_service_limits

    with (
        mock_aws(config=config),
        atomic_moto_dynamodb(),
        enforced_service_limits(),
        step_functions_as_aws(),
        cached_action_names(),
        cached_attribute_aliases(),
        direct_attribute_values(),
        linear_item_size(),
        cached_backend_urls(),
        strict_distributed_map(),
        cached_step_functions_clients(),
        s3_events_as_aws(),
    ):
        yield
