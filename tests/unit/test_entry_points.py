"""Every Lambda entry point the contracts name has the injectable seam: `handle(event, context, deps)`
beside the instrumented `handler(event, context)`, and its deps come from `build(settings, clients)` of its
function's own wiring module (`<function>_wiring`) or of its pipeline's (`wiring`)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import pytest

from tests.unit.test_contracts import PIPELINES, contract


def handler_paths() -> list[str]:
    paths = []
    for pipeline in PIPELINES:
        for name, value in vars(contract(pipeline)).items():
            if name.startswith("HANDLER") and isinstance(value, str):
                paths.append(value)
    return sorted(paths)


def test_the_contracts_name_every_function_of_the_three_pipelines() -> None:
    # Given the handler paths the contracts name
    # Then there is one per function: 1 runner stats, 5 event log, 12 taxi saga (7 per-batch, 5 of the bulk route)
    assert len(handler_paths()) == 18


@pytest.mark.parametrize("path", handler_paths())
def test_each_entry_point_has_an_injectable_handle(path: str) -> None:
    # Given the module a Lambda handler path names
    module_path, _, function = path.rpartition(".")
    module = importlib.import_module(module_path)
    # Then the entry point takes (event, context) and the seam takes (event, context, deps)
    assert list(inspect.signature(getattr(module, function)).parameters) == ["event", "context"]
    assert list(inspect.signature(module.handle).parameters) == ["event", "context", "deps"]


@pytest.mark.parametrize("path", handler_paths())
def test_each_function_is_built_through_its_wiring(path: str) -> None:
    # Given the wiring module of the function a handler path names: its own, else its pipeline's
    package, _, module = path.rpartition(".")[0].rpartition(".")
    own = f"{package}.{module.removesuffix('_handler')}_wiring"
    wiring = importlib.import_module(own if importlib.util.find_spec(own) else f"{package}.wiring")
    # Then it builds from settings and clients
    assert list(inspect.signature(wiring.build).parameters) == ["settings", "clients"]
