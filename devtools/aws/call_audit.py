"""The embedded cloud's IAM: every AWS call a function makes is recorded and checked against that
function's synthesized role, and refused as AWS would refuse it.

- **Which function.** Each Lambda entry point's seam (`<module>.handle(event, context, deps)`, the
  one every world, the demo, the local server and the tests drive) runs inside `acting_as(handler)`.
  The function travels in a context variable, which `runtime.shared.concurrency` hands to its
  worker threads, so calls on a handler's pool are the handler's too.
- **Is it allowed.** `iam_needs.call_needs` maps the call to its IAM actions and ARNs;
  `iam_policy.Role` evaluates them against the function's role. A need that is not allowed raises
  the service's AccessDenied (nothing is sent to moto, as nothing would reach the service) and is
  recorded as a denial, which fails the test run even where a handler swallows the error.
- **S3's 403 for a missing key.** S3 answers GetObject and HeadObject of a missing key with 404
  only when the caller may s3:ListBucket the bucket (an s3:prefix condition does not apply to
  these requests); otherwise 403. moto always answers 404; the audit turns it into AWS's 403.
- **Grants never used.** Each call marks the grants that allowed it; the Lambda service's own needs
  (`iam_needs.service_needs`: event sources, destinations, logs, traces) mark theirs. What remains
  is reported, and fails a complete run (`pytest --iam-audit=strict`, as `make test` runs it)
  unless `KEPT_UNEXERCISED` lists it with a reason.
- **Parallel runs (pytest-xdist).** Each worker process audits the tests it ran; at its end it hands
  `CallAudit.recorded()` to the controller, which folds every worker's record into one audit
  (`merge_recorded`) and judges the run once: a grant counts as used if any worker used it, and a
  denial in any worker is a denial of the run.

The checks are botocore's public events (before-parameter-build, before-call, after-call), registered
on every botocore session made after `install`, the way moto registers its own request router.

Calls made outside any entry point (a test's set-up, a world seeding tables, the operator tools)
run with the caller's own credentials and are not checked.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import pickle
import sys
import threading
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from devtools.aws.iam_needs import ACCOUNT, Need, ResourceCatalog, ServiceNeed, bucket_arn, call_needs, service_needs
from devtools.aws.iam_policy import Grant, Role, Template
from runtime.event_log import contract as event_log
from runtime.runner_stats import contract as runner_stats
from runtime.taxi_etl import contract as taxi_etl

_acting: ContextVar[str | None] = ContextVar("onceflow_acting_function", default=None)

# Grants that no run exercises and that stay, each with why. Keyed by (handler, action).
_CDK_SQS_DESTINATION = (
    "CDK's SqsDlq on-failure destination grants it with sqs:SendMessage; Lambda sends the failed batch's record with SendMessage only"
)
_CDK_SQS_EVENT_SOURCE = (
    "CDK's SqsEventSource grants it when it binds (grantConsumeMessages); Lambda's poller needs Receive, Delete and GetQueueAttributes"
)
_PRESIGNED_UPLOAD = (
    "the client's PUT to a presigned upload URL is authorized as this role (the URL is signed with its credentials), "
    "outside the handler: S3 checks s3:PutObject, and s3:PutObjectTagging for the signed tagging header"
)
KEPT_UNEXERCISED: Final[Mapping[tuple[str, str], str]] = {
    (event_log.HANDLER_API, "s3:PutObject"): _PRESIGNED_UPLOAD,
    (event_log.HANDLER_API, "s3:PutObjectTagging"): _PRESIGNED_UPLOAD,
    (event_log.HANDLER_FINALIZER, "sqs:ChangeMessageVisibility"): _CDK_SQS_EVENT_SOURCE,
    (event_log.HANDLER_FINALIZER, "sqs:GetQueueUrl"): _CDK_SQS_EVENT_SOURCE,
    (event_log.HANDLER_WORKER, "sqs:GetQueueUrl"): _CDK_SQS_EVENT_SOURCE,
    (taxi_etl.HANDLER_LOAD_STARTER, "sqs:ChangeMessageVisibility"): _CDK_SQS_EVENT_SOURCE,
    (taxi_etl.HANDLER_LOAD_STARTER, "sqs:GetQueueUrl"): _CDK_SQS_EVENT_SOURCE,
    (event_log.HANDLER_ROUTER, "sqs:GetQueueAttributes"): _CDK_SQS_DESTINATION,
    (event_log.HANDLER_ROUTER, "sqs:GetQueueUrl"): _CDK_SQS_DESTINATION,
    (runner_stats.HANDLER, "sqs:GetQueueAttributes"): _CDK_SQS_DESTINATION,
    (runner_stats.HANDLER, "sqs:GetQueueUrl"): _CDK_SQS_DESTINATION,
    (runner_stats.HANDLER, "kinesis:DescribeStreamConsumer"): (
        "CDK's KinesisEventSource grants the stream's read actions; Lambda calls it only for an enhanced fan-out consumer"
    ),
    (taxi_etl.HANDLER_AUTHORIZER, "secretsmanager:DescribeSecret"): (
        "Secret.grant_read grants it with GetSecretValue; kept for what that grant also covers: a secret imported by name "
        "(ARN with its random suffix) and the decrypt grant on its KMS key"
    ),
}

# The error each service answers when IAM refuses a request.
_ACCESS_DENIED_CODES: Final = {"s3": "AccessDenied", "sqs": "AccessDenied"}


@contextmanager
def acting_as(handler: str) -> Iterator[None]:
    """AWS calls made inside (on this thread, and on threads given this context) are `handler`'s."""
    token = _acting.set(handler)
    try:
        yield
    finally:
        _acting.reset(token)


def acting_function() -> str | None:
    return _acting.get()


@dataclass(frozen=True)
class Denial:
    handler: str
    call: str
    need: Need

    def describe(self) -> str:
        return f"{self.handler}: {self.call} needs {self.need.describe()}, which its role does not allow"


@dataclass
class FunctionRole:
    handler: str
    role: Role
    service: list[ServiceNeed]


@dataclass
class CallAudit:
    """Roles by handler path, and what was seen of each since this audit began."""

    functions: dict[str, FunctionRole]
    catalog: ResourceCatalog
    operations: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    used: dict[str, set[Grant]] = field(default_factory=lambda: defaultdict(set))
    denials: list[Denial] = field(default_factory=list)
    _decisions: dict[tuple[str, Need], tuple[bool, tuple[Grant, ...]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_templates(cls, templates: Mapping[str, Template]) -> CallAudit:
        functions: dict[str, FunctionRole] = {}
        for template in templates.values():
            for function_id, resource in template.get("Resources", {}).items():
                if not is_project_function(resource):
                    continue
                handler = str(resource["Properties"].get("Handler"))
                functions[handler] = FunctionRole(handler, Role.of_function(template, function_id), service_needs(template, function_id))
        audit = cls(functions, ResourceCatalog.from_templates(templates.values()))
        for handler, function in functions.items():
            for service_need in function.service:
                if not audit._allowed(handler, service_need.need):
                    audit.denials.append(Denial(handler, "(the Lambda service)", service_need.need))
        return audit

    def _allowed(self, handler: str, need: Need) -> bool:
        key = (handler, need)
        with self._lock:
            decided = self._decisions.get(key)
        if decided is None:
            decision = self.functions[handler].role.evaluate(need)
            decided = (decision.allowed, decision.grants)
            with self._lock:
                self._decisions[key] = decided
        allowed, grants = decided
        if grants:
            with self._lock:
                self.used[handler].update(grants)
        return allowed

    def check(self, handler: str, service: str, operation: str, params: Mapping[str, Any]) -> Denial | None:
        """Record the call; the first need the role does not allow, if any."""
        call = f"{service}:{operation}"
        with self._lock:
            self.operations[handler][call] += 1
        if handler not in self.functions:
            denial = Denial(handler, call, Need("(no such function in the templates)", "*"))
            with self._lock:
                self.denials.append(denial)
            return denial
        for need in call_needs(service, operation, params, self.catalog):
            if not self._allowed(handler, need):
                denial = Denial(handler, call, need)
                with self._lock:
                    self.denials.append(denial)
                return denial
        return None

    def may_list(self, handler: str, bucket: str) -> bool:
        """Whether a GetObject/HeadObject of a missing key gets 404 (else S3 answers 403)."""
        return handler in self.functions and self._allowed(handler, Need("s3:ListBucket", bucket_arn(bucket)))

    def recorded(self) -> bytes:
        """Everything needed to judge this audit elsewhere: the roles and what was seen of them.

        Pickled, because pytest-xdist carries only builtin types from a worker to the controller.
        """
        with self._lock:
            return pickle.dumps((self.functions, self.catalog, dict(self.operations), dict(self.used), list(self.denials)))

    def absorb(self, record: bytes) -> None:
        """Add another audit's record (of the same templates) to what this one has seen."""
        _, _, operations, used, denials = pickle.loads(record)
        with self._lock:
            for handler, counts in operations.items():
                self.operations[handler].update(counts)
            for handler, grants in used.items():
                self.used[handler].update(grants)
            self.denials.extend(denials)

    def unused_grants(self, handler: str) -> list[Grant]:
        used = self.used.get(handler, set())
        return [grant for grant in self.functions[handler].role.grants() if grant not in used]

    def unexplained_unused(self) -> list[tuple[str, Grant]]:
        return [
            (handler, grant)
            for handler in sorted(self.functions)
            for grant in self.unused_grants(handler)
            if (handler, grant.action) not in KEPT_UNEXERCISED
        ]

    def report(self) -> str:
        """A Markdown table per function: operations seen (with counts) and grants never used."""
        lines = ["| function | operations seen (calls) | grants never used |", "|---|---|---|"]
        for handler in sorted(self.functions):
            seen = ", ".join(f"{call} ({count:,})" for call, count in sorted(self.operations.get(handler, Counter()).items())) or "none"
            unused = self.unused_grants(handler)
            kept = [f"{grant.describe()}{_kept_reason(handler, grant)}" for grant in unused]
            lines.append(f"| `{handler.rsplit('.', 1)[0]}` | {seen} | {'; '.join(kept) or 'none'} |")
        return "\n".join(lines)


def _kept_reason(handler: str, grant: Grant) -> str:
    reason = KEPT_UNEXERCISED.get((handler, grant.action))
    return f" (kept: {reason})" if reason else ""


# --- botocore's events ---------------------------------------------------------------------------

_active: CallAudit | None = None
_audit_source: Callable[[], CallAudit] | None = None
_install_lock = threading.Lock()
_installed = False


def current() -> CallAudit | None:
    """The audit in force, built on first use (a template synth is only paid when a handler calls AWS)."""
    global _active
    if _active is None and _audit_source is not None:
        with _install_lock:
            if _active is None:
                _active = _audit_source()
    return _active


def merge_recorded(record: bytes) -> CallAudit:
    """Fold a worker's `CallAudit.recorded()` into the audit in force, which the first record creates
    (the xdist controller runs no test, so it has none of its own and synthesizes nothing)."""
    global _active
    with _install_lock:
        if _active is None:
            functions, catalog, _, _, _ = pickle.loads(record)
            _active = CallAudit(functions, catalog)
        audit = _active
    audit.absorb(record)
    return audit


# Keys this module keeps in botocore's per-call `context` dict, from one event of a call to the next.
_API_PARAMS = "onceflow_audit_api_params"
_AUDITED_AS = "onceflow_audited_as"
_MISSING_KEY_OPERATIONS: Final = frozenset({"GetObject", "HeadObject"})


def _remember_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """before-parameter-build: the call's own parameters (before-call sees only the serialized request)."""
    if _acting.get() is not None:
        context[_API_PARAMS] = params


def _check_call(model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
    """before-call: a call its function's role does not allow is answered AccessDenied here, as IAM
    answers it; nothing is sent. botocore then raises the service's error for that answer."""
    handler = _acting.get()
    audit = current() if handler is not None else None
    if audit is None or handler is None:
        return None
    service = model.service_model.service_name
    denial = audit.check(handler, service, model.name, context.get(_API_PARAMS, {}))
    if denial is None:
        context[_AUDITED_AS] = handler
        return None
    role = audit.functions[handler].role.name if handler in audit.functions else "?"
    message = (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{handler} is not authorized to perform: {denial.need.action} on resource: "
        f"{denial.need.resource} because no identity-based policy allows the {denial.need.action} action "
        f"(embedded IAM: {denial.describe()})"
    )
    return _error_answer(403, _ACCESS_DENIED_CODES.get(service, "AccessDeniedException"), message)


def _hide_missing_keys(http_response: AWSResponse, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    """after-call (S3): S3 hides whether a key exists from a caller that may not list the bucket, answering
    GetObject and HeadObject of a missing key 403 instead of 404 (moto always answers 404)."""
    handler = context.get(_AUDITED_AS)
    audit = current() if handler is not None else None
    if audit is None or handler is None or model.name not in _MISSING_KEY_OPERATIONS or http_response.status_code != 404:
        return
    if audit.may_list(handler, str(context.get(_API_PARAMS, {}).get("Bucket", ""))):
        return
    head = model.name == "HeadObject"
    http_response.status_code = 403
    parsed["Error"] = {"Code": "403" if head else "AccessDenied", "Message": "Forbidden" if head else "Access Denied"}
    parsed.setdefault("ResponseMetadata", {})["HTTPStatusCode"] = 403


def _error_answer(status: int, code: str, message: str) -> tuple[AWSResponse, dict[str, Any]]:
    """What a before-call handler returns for botocore to raise as the service's error."""
    parsed = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return AWSResponse(url="", status_code=status, headers=HTTPHeaders(), raw=None), parsed


# botocore's public events, on every session made from now on (each new session registers
# BUILTIN_HANDLERS, as moto's own request router is registered): every client a handler builds.
_EVENT_HANDLERS: Final[tuple[tuple[str, Callable[..., Any]], ...]] = (
    ("before-parameter-build", _remember_params),
    ("before-call", _check_call),
    ("after-call.s3", _hide_missing_keys),
)


def _register_event_handlers() -> None:
    """On every botocore session made from now on, and on boto3's default session if one exists already."""
    import boto3
    from botocore import handlers

    handlers.BUILTIN_HANDLERS.extend(_EVENT_HANDLERS)
    if boto3.DEFAULT_SESSION is not None:
        for event, handler in _EVENT_HANDLERS:
            boto3.DEFAULT_SESSION.events.register(event, handler)


def _attribute(module: Any, handler: str) -> None:
    """Make the module's `handle` run as `handler` (once)."""
    handle = module.handle
    if getattr(handle, "audited_handler", None) == handler:
        return

    @functools.wraps(handle)
    def attributed(*args: Any, **kwargs: Any) -> Any:
        with acting_as(handler):
            return handle(*args, **kwargs)

    attributed.__dict__["audited_handler"] = handler
    module.handle = attributed


class _AttributingLoader(importlib.abc.Loader):
    """The module's own loader, then `_attribute` once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, handler: str) -> None:
        self._loader = loader
        self._handler = handler

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        _attribute(module, self._handler)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code...: the real loader's
        return getattr(self._loader, name)


class _EntryPointFinder(importlib.abc.MetaPathFinder):
    """Attributes an entry point's module when it is first imported, not before: a Lambda handler's
    module reads its function's environment (Powertools) when imported, which the demo and the
    local server set just before importing it."""

    def __init__(self) -> None:
        self.handlers: dict[str, str] = {}  # module -> handler path

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        handler = self.handlers.get(fullname)
        if handler is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _AttributingLoader(spec.loader, handler)
        return spec


_finder = _EntryPointFinder()


def install(source: Callable[[], CallAudit], handlers: list[str]) -> None:
    """Check every call made inside an entry point against the audit `source` builds (once, on first use).

    Entry-point modules already imported are attributed now; the others when they are imported.
    """
    global _installed, _audit_source, _active
    with _install_lock:
        _audit_source, _active = source, None
        for handler in handlers:
            module_name = handler.rpartition(".")[0]
            if module_name in sys.modules:
                _attribute(sys.modules[module_name], handler)
            else:
                _finder.handlers[module_name] = handler
        if not _installed:
            sys.meta_path.insert(0, _finder)
            _register_event_handlers()
            _installed = True


@contextmanager
def auditing(templates: Mapping[str, Template]) -> Iterator[CallAudit]:
    """The audit of these templates in force for the block (the demo and the local server)."""
    global _active, _audit_source
    audit = CallAudit.from_templates(templates)
    previous = (_active, _audit_source)
    install(lambda: audit, entry_points(templates))
    _active = audit
    try:
        yield audit
    finally:
        _active, _audit_source = previous


def entry_points(templates: Mapping[str, Template]) -> list[str]:
    return sorted(
        str(resource["Properties"]["Handler"])
        for template in templates.values()
        for resource in template.get("Resources", {}).values()
        if is_project_function(resource)
    )


def is_project_function(resource: Mapping[str, Any]) -> bool:
    """A function of the project's runtime package (the Lambda factory's; FunctionSpec.handler). CDK's own deploy-time
    handlers (the bucket notifications custom resource's, with inline code and CDK's managed policy) run only while
    CloudFormation deploys, never in the embedded cloud, so there is no call of theirs to audit."""
    return resource["Type"] == "AWS::Lambda::Function" and str(resource["Properties"].get("Handler", "")).startswith("runtime.")
