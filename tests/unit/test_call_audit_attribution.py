"""Which function a call belongs to (devtools/aws/call_audit.py): an entry point's module is
attributed when it is imported, never imported early (its Powertools objects read the function's
environment at import, which the demo and the local server set just before)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.aws import call_audit

MODULE = "audit_probe_pkg.probe_handler"
HANDLER = f"{MODULE}.handler"


@pytest.fixture
def probe_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    package = tmp_path / "audit_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe_handler.py").write_text(
        "from devtools.aws.call_audit import acting_function\n"
        "IMPORTED = True\n"
        "def handle(event, context, deps):\n"
        "    return acting_function()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("audit_probe_pkg", MODULE):
        sys.modules.pop(name, None)
    call_audit._finder.handlers.pop(MODULE, None)


def test_an_entry_point_is_not_imported_by_install_and_is_attributed_when_imported(probe_package: None) -> None:
    # Given the audit installed for an entry point whose module nobody imported yet
    previous = call_audit._audit_source, call_audit._active
    try:
        call_audit.install(lambda: call_audit.CallAudit({}, call_audit.ResourceCatalog()), [HANDLER])
        # Then installing did not import it
        assert MODULE not in sys.modules
        # When it is imported
        module = importlib.import_module(MODULE)
        # Then its seam runs as its function, and nothing else does
        assert module.handle({}, None, None) == HANDLER
        assert call_audit.acting_function() is None
        # and installing again does not wrap it twice
        call_audit.install(lambda: call_audit.CallAudit({}, call_audit.ResourceCatalog()), [HANDLER])
        assert module.handle.__wrapped__.__name__ == "handle"
        assert not hasattr(module.handle.__wrapped__, "__wrapped__")
    finally:
        call_audit._audit_source, call_audit._active = previous
