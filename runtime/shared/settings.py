"""Validation helpers for the one settings object each handler builds from its environment."""

from __future__ import annotations

from collections.abc import Mapping

from runtime.shared.contract import TRACING_MODE_VARIABLE, TracingMode


class SettingsError(ValueError):
    """A required setting is missing or invalid; raised once, at cold start."""


def require_str(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise SettingsError(f"environment variable {name} is required and must not be empty")
    return value


def int_setting(env: Mapping[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise SettingsError(f"environment variable {name} must be an integer, got {raw!r}") from err
    if value < minimum:
        raise SettingsError(f"environment variable {name} must be >= {minimum}, got {value}")
    return value


def require_int(env: Mapping[str, str], name: str, *, minimum: int = 1) -> int:
    """An integer setting with no default: infra always sets it."""
    require_str(env, name)
    return int_setting(env, name, minimum, minimum=minimum)


def tracing_mode(env: Mapping[str, str]) -> TracingMode:
    """The mode the factory set; ACTIVE (no SDK) when the variable is absent, as in a function built elsewhere."""
    raw = env.get(TRACING_MODE_VARIABLE, "").strip()
    if not raw:
        return TracingMode.ACTIVE
    try:
        return TracingMode(raw)
    except ValueError as err:
        choices = ", ".join(mode.value for mode in TracingMode)
        raise SettingsError(f"environment variable {TRACING_MODE_VARIABLE} must be one of {choices}, got {raw!r}") from err
