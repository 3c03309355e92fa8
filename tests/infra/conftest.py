"""What the stack-property tests share: every environment, its config, its synthesized stacks.

A test module names its stack with a `template_json` fixture; `template` wraps it for
aws_cdk.assertions.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Template

from onceflow.infra.config import EnvConfig, load_config

ENVS = ("dev", "prod")


@pytest.fixture(params=ENVS)
def env_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config(env_name: str) -> EnvConfig:
    return load_config(env_name)


@pytest.fixture
def env_templates(request: pytest.FixtureRequest, env_name: str) -> dict[str, dict[str, Any]]:
    """The environment's synthesized stacks by name (the session's synth, cdk-nag included)."""
    templates: dict[str, dict[str, Any]] = request.getfixturevalue(f"{env_name}_templates")
    return templates


@pytest.fixture
def template(template_json: dict[str, Any]) -> Template:
    return Template.from_json(template_json)
