"""Lambda SnapStart's after-restore hooks, in one place.

With SnapStart on (the HTTP-facing functions, when their construct's `settings.snap_start` is),
Lambda runs a function's init phase once, when a version is published, snapshots the execution
environment's memory, and starts every new environment of that version from the snapshot. What
the imports left in memory is then shared by every environment restored from it, so each handler
module registers, at import, a hook that runs after every restore and:

- reseeds the random sources: the `random` module's generator (full_jitter_backoff's default, and
  botocore's retry jitter) and every generator made by `new_random()`, from os.urandom. Without it,
  environments restored from one snapshot would draw the same jitter. uuid.uuid4() and `secrets`
  read os.urandom at each call and need nothing;
- clears the handler's cached dependencies (`deps()`): the SDK clients, whose pooled connections
  were opened by another environment (or never), are built afresh by the next invocation;
- runs the handler's own step first, if it has one (the authorizer forgets its cached API key and
  when it last re-read it, so a key rotated since the snapshot is read on the next request).

The hooks are registered with `snapshot_restore_py`, which only Lambda's managed Python runtime
ships: elsewhere (tests, the local server, a function without SnapStart, where no restore ever
happens) the import fails and the hooks are only built; tests call them directly.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable
from typing import Protocol

try:
    from snapshot_restore_py import register_after_restore as _register_after_restore  # type: ignore[import-not-found]
except ImportError:  # not Lambda's managed Python runtime: nothing is ever restored here
    _register_after_restore = None

_generators: weakref.WeakSet[random.Random] = weakref.WeakSet()


class Cached(Protocol):
    """A functools.cache / lru_cache function: what a handler keeps for the life of its environment."""

    def cache_clear(self) -> None: ...


def runtime_hooks_available() -> bool:
    """True inside Lambda's managed Python runtime, where registered hooks run after each restore."""
    return _register_after_restore is not None


def new_random() -> random.Random:
    """A generator of its own (seeded from os.urandom) that the after-restore hooks reseed."""
    generator = random.Random()
    _generators.add(generator)
    return generator


def reseed_random_sources() -> None:
    """Fresh seeds from os.urandom for the `random` module and every generator from new_random()."""
    random.seed()
    for generator in list(_generators):
        generator.seed()


def after_restore(*caches: Cached, first: Callable[[], None] | None = None) -> Callable[[], None]:
    """The after-restore hook of one handler module, registered with the runtime when there is one.

    It reseeds the random sources, runs `first`, then clears `caches` (the module's `deps`, which
    hold the SDK clients), so the next invocation builds them again. Returns the hook.
    """

    def hook() -> None:
        reseed_random_sources()
        if first is not None:
            first()
        for cache in caches:
            cache.cache_clear()

    if _register_after_restore is not None:
        _register_after_restore(hook)
    return hook
