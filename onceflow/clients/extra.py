"""The `clients` extra: boto3 (botocore signs the requests and reads the API key's secret) and tqdm
(the progress bars). Without it the client commands answer --help, and any command says in one line
how to install the extra, instead of a traceback. Standard library only."""

from __future__ import annotations

import importlib
from importlib import metadata

MODULES = ("boto3", "botocore", "tqdm")
MISSING_EXIT_STATUS = 2  # a set-up error, as a missing region or credentials


def missing_modules() -> list[str]:
    """The extra's modules this Python cannot import."""
    missing: list[str] = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def install_hint() -> str:
    try:
        wheel = f"dist/onceflow-{metadata.version('onceflow')}-py3-none-any.whl"
    except metadata.PackageNotFoundError:
        wheel = "dist/onceflow-<version>-py3-none-any.whl"
    return f"pip install 'onceflow[clients]' (or from a built wheel: pip install '{wheel}[clients]')"


def missing_line(prog: str) -> str | None:
    """The one line to print when the extra is not installed (None: it is)."""
    missing = missing_modules()
    if not missing:
        return None
    return f"{prog} needs the clients extra (missing: {', '.join(missing)}): {install_hint()}"
