"""SnapStart's after-restore hooks (runtime/shared/snapstart.py) and their registration by the five
HTTP-facing handler modules: the random sources are reseeded, the cached clients dropped and built
again, and registration happens only where Lambda's runtime offers `snapshot_restore_py`.

The registration check runs in a fresh interpreter (as tests/unit/test_cold_start.py does), with a
fake `snapshot_restore_py` in sys.modules before any handler module is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from runtime.event_log import api_handler as event_log_api
from runtime.event_log.snapshots import SnapshotWorker
from runtime.shared import snapstart
from runtime.taxi_etl import api_handler as taxi_api
from runtime.taxi_etl import authorizer_handler, loads_api_handler, row_state_handler
from runtime.taxi_etl.api_key import ApiKeyCheck
from tests.unit.test_cold_start import run_probe

SNAPSTART_HANDLER_MODULES = (event_log_api, taxi_api, row_state_handler, loads_api_handler, authorizer_handler)

# A stand-in for the runtime's module: it records what is registered, and how.
REGISTRATION_PROBE = """
import importlib, json, sys, types
registered = []
fake = types.ModuleType("snapshot_restore_py")
def register_after_restore(func, *args, **kwargs):
    registered.append((func, args, kwargs))
    return func
def register_before_snapshot(func, *args, **kwargs):
    raise AssertionError("nothing is to run before the snapshot")
fake.register_after_restore = register_after_restore
fake.register_before_snapshot = register_before_snapshot
sys.modules["snapshot_restore_py"] = fake
modules = [importlib.import_module(name) for name in sys.argv[1:]]
from runtime.shared import snapstart
hooks = [func for func, _, _ in registered]
import random
random.seed(7)
before = random.random()
random.seed(7)
for hook in hooks:
    hook()
after = random.random()
print(MARK + json.dumps({
    "available": snapstart.runtime_hooks_available(),
    "registered": len(registered),
    "extra_arguments": [bool(args or kwargs) for _, args, kwargs in registered],
    "module_hooks": [any(hook is module.after_restore for hook in hooks) for module in modules],
    "reseeded": before != after,
}))
"""


class FakeProvider:
    """Powertools' SecretsProvider as far as the hooks use it: a cache they may clear."""

    def __init__(self) -> None:
        self.store = {("secret-id", 300): "the-key"}

    def clear_cache(self) -> None:
        self.store.clear()


class FakeDeps:
    """What a handler's deps() returns, for the hooks: the clients it was built with (and the authorizer's cache)."""

    def __init__(self, clients: Any) -> None:
        self.clients = clients
        self.provider = FakeProvider()
        self.check = ApiKeyCheck(lambda force: "the-key", refresh_floor_seconds=60)


@pytest.fixture
def fake_deps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[ModuleType, FakeDeps]]]:
    """Each SnapStart handler module's deps() built by a recording wiring.build, on a stand-in settings()."""
    built: list[tuple[ModuleType, FakeDeps]] = []
    for module in SNAPSTART_HANDLER_MODULES:
        module.deps.cache_clear()

        def build(settings: Any, clients: Any, module: ModuleType = module) -> FakeDeps:
            deps = FakeDeps(clients)
            built.append((module, deps))
            return deps

        monkeypatch.setattr(module, "settings", lambda: "settings")
        # The module's wiring: its function's own (`<function>_wiring`) or its pipeline's (`wiring`), every builder
        # in it recording (`build`, or a bulk function's own `build_<kind>`, such as the loads API's `build_loads`)
        (wiring,) = [name for name in vars(module) if name.endswith("wiring") and isinstance(vars(module)[name], ModuleType)]
        builders = [name for name in vars(vars(module)[wiring]) if name == "build" or name.startswith("build_")]
        monkeypatch.setattr(module, wiring, SimpleNamespace(**dict.fromkeys(builders, build)))
    yield built
    for module in SNAPSTART_HANDLER_MODULES:
        module.deps.cache_clear()


def test_outside_lambda_the_runtime_module_is_absent_and_the_hooks_are_still_built() -> None:
    # Given this interpreter, which has no snapshot_restore_py (only Lambda's managed Python runtime ships it)
    assert importlib.util.find_spec("snapshot_restore_py") is None
    # When the handler modules were imported (above) and a hook is built
    hook = snapstart.after_restore()
    # Then the guard chose the no-op registration, and each module still has its hook to call
    assert snapstart.runtime_hooks_available() is False
    assert callable(hook)
    for module in SNAPSTART_HANDLER_MODULES:
        assert callable(module.after_restore)


def test_with_the_runtime_module_each_snapstart_handler_registers_its_hook_at_import() -> None:
    # Given a fresh interpreter with a fake snapshot_restore_py in sys.modules
    names = [module.__name__ for module in SNAPSTART_HANDLER_MODULES]
    # When the five HTTP-facing handler modules are imported, as Lambda's init phase does
    result = run_probe(REGISTRATION_PROBE, *names, tracing=False)
    # Then the guard found the module, and each handler module registered its own hook once, with no arguments
    assert result["available"] is True
    assert result["registered"] == len(names)
    assert result["module_hooks"] == [True] * len(names)
    assert result["extra_arguments"] == [False] * len(names)
    # And running the hooks reseeded the random module (a restore's draws differ from the snapshot's)
    assert result["reseeded"] is True


def test_the_hook_reseeds_the_random_module_so_two_restores_draw_differently() -> None:
    # Given the random module's state as a snapshot would hold it
    random.seed(1234)
    snapshot = random.getstate()
    # When two environments are restored from it, each running the hook before drawing
    draws = []
    for _ in range(2):
        random.setstate(snapshot)
        snapstart.after_restore()()
        draws.append([random.random() for _ in range(4)])
    # Then neither continues the snapshot's sequence, and they differ from each other
    random.setstate(snapshot)
    from_snapshot = [random.random() for _ in range(4)]
    assert draws[0] != from_snapshot
    assert draws[1] != from_snapshot
    assert draws[0] != draws[1]


def test_the_hook_reseeds_the_generators_made_for_jitter() -> None:
    # Given a tracked generator and the snapshot worker's default one, both at a known state
    generator = snapstart.new_random()
    worker = SnapshotWorker(None, None, None, None, None)  # type: ignore[arg-type]  # only its generator is used
    for rng in (generator, worker._rng):
        rng.seed(99)
    expected = random.Random(99).random()
    # When the hook runs (as after a restore)
    snapstart.reseed_random_sources()
    # Then each draws from a fresh seed, not from the state it had
    assert generator.random() != expected
    assert worker._rng.random() != expected


@pytest.mark.parametrize("module", SNAPSTART_HANDLER_MODULES, ids=lambda module: module.__name__)
def test_the_hook_drops_the_cached_deps_and_the_next_invocation_builds_new_clients(
    module: ModuleType, fake_deps: list[tuple[ModuleType, FakeDeps]]
) -> None:
    # Given the handler's deps, built at its first invocation and then served from the cache
    first = module.deps()
    assert module.deps() is first
    assert module.deps.cache_info().currsize == 1
    # When the after-restore hook runs
    module.after_restore()
    # Then the cache is empty, and the next invocation builds the deps again, on new SDK clients
    assert module.deps.cache_info().currsize == 0
    second = module.deps()
    assert second is not first
    assert second.clients is not first.clients
    assert [deps for built_by, deps in fake_deps if built_by is module] == [first, second]


def test_the_hook_of_a_never_invoked_handler_builds_nothing(fake_deps: list[tuple[ModuleType, FakeDeps]]) -> None:
    # Given handlers restored before any invocation (the snapshot is taken after init, before any request)
    # When their hooks run
    for module in SNAPSTART_HANDLER_MODULES:
        module.after_restore()
    # Then nothing was built: the clients wait for the first request
    assert fake_deps == []


def test_forgetting_lifts_the_refresh_floor() -> None:
    # Given a key check that has just re-read the secret for a refused key (the refresh floor now applies)
    fetched: list[bool] = []

    def fetch(force: bool) -> str:
        fetched.append(force)
        return "the-key"

    check = ApiKeyCheck(fetch, refresh_floor_seconds=60, clock=lambda: 1000.0)
    assert check.allows("wrong") is False
    assert check.allows("wrong") is False
    assert fetched.count(True) == 1
    # When it forgets (after a restore)
    check.forget()
    # Then the next refused key may re-read the secret at once
    assert check.allows("wrong") is False
    assert fetched.count(True) == 2


def test_the_authorizer_hook_clears_the_secret_cache_of_deps_already_built(fake_deps: list[tuple[ModuleType, FakeDeps]]) -> None:
    # Given the authorizer's deps, whose provider holds the key in its cache, after a refused key (refresh floor on)
    built = authorizer_handler.deps()
    assert built.provider.store
    assert built.check.allows("wrong") is False
    # When the after-restore hook runs
    authorizer_handler.after_restore()
    # Then the provider's cache was emptied and the floor lifted before the deps were dropped
    # (a reference kept elsewhere re-reads the key too), and the next invocation builds new ones
    assert built.provider.store == {}
    assert built.check._last_forced is None
    assert authorizer_handler.deps() is not built


def test_the_handler_modules_register_nothing_else_at_import() -> None:
    # Given the handler modules as imported in this interpreter
    # When their module attributes are read
    # Then each has one after-restore hook, and snapshot_restore_py was not imported from anywhere
    for module in SNAPSTART_HANDLER_MODULES:
        assert callable(module.after_restore)
    assert "snapshot_restore_py" not in sys.modules
