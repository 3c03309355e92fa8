"""The API key authorizer: its settings (read once from the environment, validated, frozen) and its
dependencies, built from the settings and the SDK clients (see runtime/taxi_etl/phase_wiring.py).
Only the authorizer reads the secret: the other handlers do not import Powertools' parameters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.shared.aws import Clients
from runtime.shared.settings import SettingsError, int_setting, require_str
from runtime.taxi_etl.api_key import ApiKeyCheck
from runtime.taxi_etl.contract import ENV_API_KEY_SECRET_ID, ENV_SECRET_CACHE_SECONDS, ENV_SECRET_REFRESH_FLOOR_SECONDS

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """The authorizer: the secret holding the API key, and how long its value is cached."""

    secret_id: str
    cache_seconds: int
    refresh_floor_seconds: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthorizerSettings:
        settings = cls(
            secret_id=require_str(env, ENV_API_KEY_SECRET_ID),
            cache_seconds=int_setting(env, ENV_SECRET_CACHE_SECONDS, 300),
            refresh_floor_seconds=int_setting(env, ENV_SECRET_REFRESH_FLOOR_SECONDS, 10),
        )
        if settings.refresh_floor_seconds > settings.cache_seconds:
            raise SettingsError(f"{ENV_SECRET_REFRESH_FLOOR_SECONDS} must not exceed {ENV_SECRET_CACHE_SECONDS}")
        return settings


@dataclass(frozen=True, slots=True)
class AuthorizerDeps:
    """The authorizer: the secret's provider and the key check on it."""

    provider: SecretsProvider  # its cache lives as long as the execution environment
    check: ApiKeyCheck


def key_check(provider: SecretsProvider, config: AuthorizerSettings) -> ApiKeyCheck:
    def fetch(force: bool) -> str:
        value = provider.get(config.secret_id, max_age=config.cache_seconds, force_fetch=force)
        return value if isinstance(value, str) else ""

    return ApiKeyCheck(fetch, refresh_floor_seconds=config.refresh_floor_seconds)


def build(settings: AuthorizerSettings, clients: Clients) -> AuthorizerDeps:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    provider = SecretsProvider(boto3_client=clients.secretsmanager)
    return AuthorizerDeps(provider, key_check(provider, settings))
