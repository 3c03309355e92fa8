"""Lambda entry point of the HTTP API's authorizer (payload 2.0, simple responses). Thin.

Returns `{"isAuthorized": bool}`. The presented key is never logged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.typing import LambdaContext

from runtime.shared.observability import MetricUnit, instrumented, logger, metrics
from runtime.taxi_etl import contract
from runtime.taxi_etl.api_key import ApiKeyCheck
from runtime.taxi_etl.settings import AuthorizerSettings


@functools.cache
def settings() -> AuthorizerSettings:
    """Read and validated once per cold start: the only place this handler reads its environment."""
    return AuthorizerSettings.from_env(os.environ)


def key_check(provider: SecretsProvider, config: AuthorizerSettings) -> ApiKeyCheck:
    def fetch(force: bool) -> str:
        value = provider.get(config.secret_id, max_age=config.cache_seconds, force_fetch=force)
        return value if isinstance(value, str) else ""

    return ApiKeyCheck(fetch, refresh_floor_seconds=config.refresh_floor_seconds)


@functools.cache
def secrets_provider() -> SecretsProvider:
    """Built on the first invocation (cold start): its cache lives as long as the execution environment."""
    return SecretsProvider()


@functools.cache
def api_key_check() -> ApiKeyCheck:
    return key_check(secrets_provider(), settings())


def authorize(event: Mapping[str, Any], check: ApiKeyCheck) -> dict[str, bool]:
    headers = event.get("headers") or {}
    presented = headers.get("authorization") if isinstance(headers, Mapping) else None
    allowed = check.allows(presented if isinstance(presented, str) else None)
    if not allowed:
        metrics.add_metric(name=contract.METRIC_REQUESTS_DENIED, unit=MetricUnit.Count, value=1)
        logger.info("request denied", extra={"route": event.get("routeKey"), "key_present": bool(presented)})
    return {"isAuthorized": allowed}


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, bool]:
    return authorize(event, api_key_check())
