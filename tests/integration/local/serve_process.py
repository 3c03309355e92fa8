"""`make serve` as a process, as a user runs it: `python -m devtools.serve --assembly ...` from the
repository root, with no AWS variable and an empty HOME (so no ~/.aws file is read), on three free
ports, its outputs file in a temporary folder."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BANNER_END = "Ctrl-C stops"
START_TIMEOUT_SECONDS = 180  # imports and the embedded resources, on a loaded 2-core machine


def clean_environment(home: Path) -> dict[str, str]:
    """This process's environment without any AWS_* variable, HOME an empty folder."""
    home.mkdir(parents=True, exist_ok=True)
    return {**{name: value for name, value in os.environ.items() if not name.startswith("AWS_")}, "HOME": str(home)}


def free_port_base() -> int:
    """A port p such that p, p+1 and p+2 are free now (serve needs three in a row)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            base = int(first.getsockname()[1])
            if base > 65533:
                continue
            with contextlib.ExitStack() as held:
                try:
                    for port in (base + 1, base + 2):
                        other = held.enter_context(socket.socket())
                        other.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return base
    raise RuntimeError("no three consecutive free ports")


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found |= {int(child), *descendants(int(child))}
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class ServedProcess:
    process: subprocess.Popen[str]
    outputs_file: Path
    environment: dict[str, str]
    output: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(self.output)

    def value(self, label: str) -> str:
        """A value of the banner, e.g. value("API key")."""
        line = next(line for line in self.output if line.strip().startswith(label))
        return line.strip()[len(label) :].split()[0]


@contextlib.contextmanager
def served(assembly: Path, workdir: Path) -> Iterator[ServedProcess]:
    """The server running until the block ends (killed then if it still runs)."""
    environment = clean_environment(workdir / "home")
    outputs = workdir / "cdk-outputs-local.json"
    command = [sys.executable, "-m", "devtools.serve", "--assembly", str(assembly), "--port-base", str(free_port_base())]
    process = subprocess.Popen(
        [*command, "--outputs-file", str(outputs), "--quiet"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    server = ServedProcess(process, outputs, environment)
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            server.output.append(line)
            if line.startswith(BANNER_END):
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not ready.wait(0.2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve did not start (exit {process.poll()}):\n{server.text()}")
        yield server
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        reader.join(timeout=5)
