"""Lambda entry point of the HTTP API's authorizer (payload 2.0, simple responses). Thin.

Returns `{"isAuthorized": bool}`. The presented key is never logged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.shared import snapstart
from runtime.shared.aws import Clients
from runtime.shared.observability import MetricUnit, instrumented, logger, metrics
from runtime.taxi_etl import authorizer_wiring, contract
from runtime.taxi_etl.api_key import ApiKeyCheck
from runtime.taxi_etl.authorizer_wiring import AuthorizerDeps, AuthorizerSettings

if TYPE_CHECKING:  # an annotation only: the handler does not import Powertools' typing module
    from aws_lambda_powertools.utilities.typing import LambdaContext


@functools.cache
def settings() -> AuthorizerSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return AuthorizerSettings.from_env(os.environ)


@functools.cache
def deps() -> AuthorizerDeps:
    """Built on the first invocation (cold start): the secret's cache lives as long as the execution environment."""
    return authorizer_wiring.build(settings(), Clients())


def forget_secret() -> None:
    """The cached key and the time it was last re-read, forgotten: the next request reads the secret again."""
    if deps.cache_info().currsize:
        built = deps()
        built.provider.clear_cache()  # type: ignore[no-untyped-call]  # Powertools leaves it untyped
        built.check.forget()


# With SnapStart, after each restore: fresh random seeds, the key forgotten (it may have been rotated since
# the snapshot) and the clients built again (runtime/shared/snapstart.py).
after_restore = snapstart.after_restore(deps, first=forget_secret)


def authorize(event: Mapping[str, Any], check: ApiKeyCheck) -> dict[str, bool]:
    headers = event.get("headers") or {}
    presented = headers.get("authorization") if isinstance(headers, Mapping) else None
    allowed = check.allows(presented if isinstance(presented, str) else None)
    if not allowed:
        metrics.add_metric(name=contract.METRIC_REQUESTS_DENIED, unit=MetricUnit.Count, value=1)
        logger.info("request denied", extra={"route": event.get("routeKey"), "key_present": bool(presented)})
    return {"isAuthorized": allowed}


def handle(event: dict[str, Any], context: LambdaContext, deps: AuthorizerDeps) -> dict[str, bool]:
    return authorize(event, deps.check)


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, bool]:
    return handle(event, context, deps())
