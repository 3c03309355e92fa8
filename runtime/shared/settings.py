"""Validation helpers for the one settings object each handler builds from its environment."""

from __future__ import annotations

from collections.abc import Mapping


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
