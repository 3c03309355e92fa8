"""`make serve`: both HTTP APIs on localhost, on the embedded cloud (moto), behind the real entry points.

    python -m devtools.serve --assembly cdk.out/dev                 # moto on :8410, event log :8411, taxi :8412
    python -m devtools.serve --port-base 9400                       # moto :9400, event log :9401, taxi :9402
    python -m devtools.serve --set SNAPSHOT_EVERY=10                # a function setting, wherever a function has it

Everything comes from the synthesized dev templates of the assembly: tables, bucket, queues, stream and
secret are created in moto, served over HTTP on the moto port so other processes (curl, the AWS CLI,
the operator tools, `make smoke ENV=local`) reach the same resources; each function runs its real
`handle`, built through its pipeline's wiring with the settings of its synthesized environment. The
event-log API verifies each request's SigV4 signature against the printed key pair (no IAM policy
evaluation), and the embedded S3 verifies its presigned URLs; the taxi API calls the real Lambda
authorizer against the key in the embedded secret. A background thread plays Lambda's event sources
(the log table's stream, the snapshot and payload queues, the runner-stats Kinesis stream) every half
second; the taxi state machine runs on moto's executor with its tasks routed to the phase handlers.

It writes cdk-outputs-local.json (the stacks as Onceflow-local-<Kind>, plus the embedded cloud's
endpoint, region and dummy key pair, which `--env local` of ops.smoke, the operator tools and the
clients read) and runs until Ctrl-C or SIGTERM. Nothing persists: each start is an empty cloud. On
stop it removes the outputs file and ends within seconds: the servers and the event sources get
STOP_GRACE_SECONDS to stop, and work still in flight then (a state machine execution, a handler's
calls) is abandoned rather than waited for, as nothing it would write is kept.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devtools.local.stack import LocalStack

DEFAULT_PORT_BASE = 8410  # moto; the event-log API is base + 1, the taxi API base + 2
DEFAULT_OUTPUTS_FILE = Path("cdk-outputs-local.json")
# How long the orderly stop (event sources, both APIs, the moto server) may take before the process ends anyway.
STOP_GRACE_SECONDS = 1.5
# Read by Powertools and botocore when the handlers' modules are imported: set before that, as Lambda does.
PROCESS_ENV = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "onceflow-local",
    # The functions' own INFO lines would bury the access log; --log-level INFO shows them.
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


def parse_overrides(pairs: list[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            parser.error(f"--set takes NAME=VALUE, got {pair!r}")
        overrides[name] = value
    return overrides


def banner(stack: LocalStack, started_in: float, outputs_file: Path) -> str:
    key_var = "ONCEFLOW_API_KEY"
    return "\n".join(
        [
            f"onceflow: the dev stacks on localhost, on an embedded AWS (moto), started in {started_in:.1f} s",
            f"  event log API   {stack.event_log_url}   (IAM: SigV4 signatures verified against the key pair below; no IAM policies)",
            f"  taxi API        {stack.taxi_url}   (Authorization: the API key below, checked by the real authorizer)",
            f"  embedded AWS    {stack.moto_endpoint}   region {stack.region}",
            f"  API key         {stack.api_key}",
            f"  outputs         {outputs_file}  (with the embedded AWS's endpoint, region and dummy key pair: `--env local` of",
            "                  make smoke ENV=local, the ops tools, onceflow-event-log and onceflow-taxi-load needs no export)",
            f"  snapshots       every {stack.snapshot_every} events",
            "for other AWS tools (the AWS CLI, boto3) in another shell:",
            f"  export AWS_ACCESS_KEY_ID={stack.access_key_id} AWS_SECRET_ACCESS_KEY={stack.secret_access_key} "
            f"AWS_REGION={stack.region} AWS_DEFAULT_REGION={stack.region}",
            f"  export AWS_ENDPOINT_URL={stack.moto_endpoint} EVENT_LOG_URL={stack.event_log_url} TAXI_URL={stack.taxi_url} "
            f"{key_var}={stack.api_key}",
            "Ctrl-C stops (nothing is kept).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.serve", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--assembly", default="cdk.out/dev", help="the cloud assembly `cdk synth -o` wrote (default: cdk.out/dev)")
    parser.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"moto listens here, the event-log API on the next port, the taxi API on the one after (default {DEFAULT_PORT_BASE})",
    )
    parser.add_argument(
        "--outputs-file", type=Path, default=DEFAULT_OUTPUTS_FILE, help=f"where to write the outputs (default {DEFAULT_OUTPUTS_FILE})"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace a synthesized function setting in every function that has it, e.g. SNAPSHOT_EVERY=10 (repeatable)",
    )
    parser.add_argument("--poll-interval", type=float, default=0.5, metavar="SECONDS", help="how often the event sources poll when idle")
    parser.add_argument("--quiet", action="store_true", help="no access log line per API request")
    parser.add_argument("--log-level", default=None, help="the functions' Powertools log level (default WARNING)")
    args = parser.parse_args(argv)
    if not 1 <= args.port_base <= 65533:
        parser.error("--port-base must leave room for three ports (1..65533)")
    overrides = parse_overrides(args.overrides, parser)
    for name, value in PROCESS_ENV.items():
        os.environ.setdefault(name, value)
    if args.log_level:
        os.environ["POWERTOOLS_LOG_LEVEL"] = args.log_level.upper()

    from devtools.aws import call_audit
    from devtools.aws.template_resources import load_assembly

    manifest = Path(args.assembly) / "manifest.json"
    if not manifest.exists():
        parser.exit(2, f"{parser.prog}: error: no cloud assembly at {args.assembly}: run `make synth ENV=dev` (or `make serve`)\n")
    started = time.monotonic()
    templates = load_assembly(args.assembly)
    # Every call a function makes is checked against its synthesized role, as AWS would check it:
    # a call the role does not allow is refused with the service's AccessDenied.
    with call_audit.auditing(templates):
        return _serve(args, parser, templates, overrides, started)


def _serve(
    args: argparse.Namespace, parser: argparse.ArgumentParser, templates: dict[str, Any], overrides: dict[str, str], started: float
) -> int:
    from devtools.local.stack import LocalStack  # after PROCESS_ENV: Powertools reads it at import

    try:
        stack = LocalStack.start(
            templates,
            moto_port=args.port_base,
            event_log_port=args.port_base + 1,
            taxi_port=args.port_base + 2,
            overrides=overrides,
            access_log=None if args.quiet else (lambda line: print(line, flush=True)),
            poll_interval=args.poll_interval,
        )
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            parser.exit(2, f"{parser.prog}: error: a port from {args.port_base} to {args.port_base + 2} is in use: pass --port-base\n")
        raise
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: --set: {error}\n")
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    written: str | None = None
    try:
        written = stack.write_outputs(args.outputs_file).read_text()
        print(banner(stack, time.monotonic() - started, args.outputs_file), flush=True)
        while not stopping.wait(0.25):
            pass
    finally:
        print("stopping...", flush=True)
        remove_outputs(args.outputs_file, written)
        stopped = stop_within(stack, STOP_GRACE_SECONDS)
        print("stopped" if stopped else f"stopped (what was still running after {STOP_GRACE_SECONDS:g} s is abandoned)", flush=True)
    return 0


def stop_within(stack: LocalStack, seconds: float) -> bool:
    """Stop the stack on a daemon thread, waiting at most `seconds`; whether it finished in time."""
    stopper = threading.Thread(target=stack.stop, name="stop", daemon=True)
    stopper.start()
    stopper.join(seconds)
    return not stopper.is_alive()


def remove_outputs(path: Path, written: str | None) -> None:
    """Remove the outputs file if it still holds what this server wrote: once stopped, its endpoint
    answers no more, and `--env local` then says to run `make serve` instead of failing to connect."""
    try:
        if written is not None and path.read_text() == written:
            path.unlink()
    except OSError:
        pass  # already gone, or replaced by another server's


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: at exit Python joins every thread pool, and the handlers' pools (and moto's state
    # machine executions) may still be working against the servers just stopped, with retries and
    # backoff: that kept a stopped server alive for 80 s. Nothing they would write is kept.
    os._exit(status)
