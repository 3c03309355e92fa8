"""Deployed equals tested: every function runs the Python the suite runs on (major.minor)."""

from __future__ import annotations

import sys
from typing import Any

from devtools.aws.template_resources import resources_of_type
from onceflow.infra.lambda_assets import LAMBDA_PYTHON
from onceflow.infra.lambda_factory import PYTHON_RUNTIME


def test_every_synthesized_function_runs_the_interpreter_of_the_suite(
    dev_templates: dict[str, Any], prod_templates: dict[str, Any]
) -> None:
    # Given the interpreter running this suite
    running = "python{}.{}".format(*sys.version_info[:2])
    # When we read the runtime of every function of every stack of both environments
    runtimes = {
        f"{stack}/{logical_id}": function["Properties"]["Runtime"]
        for templates in (dev_templates, prod_templates)
        for stack, template in templates.items()
        for logical_id, function in resources_of_type(template, "AWS::Lambda::Function").items()
    }
    # (18 of the project's, and CDK's bucket notifications handler, inline in the taxi stack)
    assert len(runtimes) == 2 * (18 + 1)
    # Then each is the suite's major.minor
    assert {name: runtime for name, runtime in runtimes.items() if runtime != running} == {}


def test_the_bytecode_is_compiled_for_the_runtime_the_functions_declare() -> None:
    # Given the runtime the factory declares and the Python the assets' bytecode is built for
    # Then they are the same version, and it is the suite's
    assert PYTHON_RUNTIME.name == "python{}.{}".format(*LAMBDA_PYTHON)
    assert sys.version_info[:2] == LAMBDA_PYTHON
