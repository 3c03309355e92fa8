"""`--env local`: the embedded cloud of `make serve`, as its outputs file names it.

`make serve` writes cdk-outputs-local.json with the stacks' outputs, and in every stack the embedded
cloud's endpoint (LocalEndpointUrl), region (LocalRegion) and the dummy key pair the embedded cloud
accepts (LocalDummyAccessKeyId, LocalDummySecretAccessKey; not AWS credentials). The operator tools,
`make smoke ENV=local` and both clients take them from there, so nothing has to be exported; what is
given explicitly still wins: --region, then AWS_DEFAULT_REGION or AWS_REGION, over the file's region;
--profile, AWS_PROFILE or AWS_ACCESS_KEY_ID over the file's key pair; AWS_ENDPOINT_URL (or a tool's
--endpoint-url) over the file's endpoint. The config files' default
profile does not: its keys would be refused by the local event-log API, which checks signatures
against the dummy pair.

A file whose endpoint does not answer (the server was stopped or killed) is refused with one line
saying to start `make serve`. Standard library only: the clients import it without their extra.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

LOCAL_ENV = "local"  # the environment `make serve` writes the outputs of
LOCAL_ENDPOINT_OUTPUT = "LocalEndpointUrl"
LOCAL_REGION_OUTPUT = "LocalRegion"
LOCAL_ACCESS_KEY_OUTPUT = "LocalDummyAccessKeyId"
LOCAL_SECRET_KEY_OUTPUT = "LocalDummySecretAccessKey"
START_SERVER = "start `make serve` in the repository root"
# A local server answers a connect at once; this only bounds a hung one.
PROBE_SECONDS = 2.0


class LocalCloudError(Exception):
    """The outputs file names no usable local cloud: missing, stale, or inconsistent (one line, for the user)."""


@dataclass(frozen=True)
class LocalCloud:
    """The embedded cloud an outputs file of `make serve` names."""

    endpoint_url: str
    region: str
    access_key_id: str
    secret_access_key: str

    def outputs(self) -> dict[str, str]:
        """What `make serve` adds to every stack's outputs."""
        return {
            LOCAL_ENDPOINT_OUTPUT: self.endpoint_url,
            LOCAL_REGION_OUTPUT: self.region,
            LOCAL_ACCESS_KEY_OUTPUT: self.access_key_id,
            LOCAL_SECRET_KEY_OUTPUT: self.secret_access_key,
        }

    def endpoint(self, environ: Mapping[str, str] | None = None) -> str:
        """AWS_ENDPOINT_URL when it is set, else the file's endpoint."""
        return (os.environ if environ is None else environ).get("AWS_ENDPOINT_URL") or self.endpoint_url

    def session_options(
        self, *, region: str | None = None, profile: str | None = None, environ: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """boto3.Session keyword arguments: the flags and the environment's explicit settings first, then the file's."""
        env = os.environ if environ is None else environ
        options: dict[str, Any] = {"region_name": region or env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or self.region}
        if profile:
            options["profile_name"] = profile
        elif not (env.get("AWS_PROFILE") or env.get("AWS_ACCESS_KEY_ID")):
            options["aws_access_key_id"] = self.access_key_id
            options["aws_secret_access_key"] = self.secret_access_key
        return options

    def check_running(self, source: Path | str) -> None:
        """A LocalCloudError unless something listens at the endpoint (the server of `source` may be gone)."""
        parts = urlsplit(self.endpoint_url)
        try:
            with socket.create_connection((parts.hostname or "localhost", parts.port or 80), timeout=PROBE_SECONDS):
                pass
        except OSError as err:
            raise LocalCloudError(
                f"the local cloud {self.endpoint_url} named by {source} does not answer ({err.strerror or err}): "
                f"is the server stopped? {START_SERVER} (it writes the file again)"
            ) from err


def local_cloud(document: Mapping[str, Any], source: Path | str) -> LocalCloud | None:
    """The local cloud a parsed outputs file names (None: a deployed environment's file)."""
    found = {
        (
            str(outputs.get(LOCAL_ENDPOINT_OUTPUT)),
            str(outputs.get(LOCAL_REGION_OUTPUT)),
            str(outputs.get(LOCAL_ACCESS_KEY_OUTPUT)),
            str(outputs.get(LOCAL_SECRET_KEY_OUTPUT)),
        )
        for outputs in document.values()
        if isinstance(outputs, Mapping) and LOCAL_ENDPOINT_OUTPUT in outputs
    }
    if not found:
        return None
    if len(found) > 1:
        endpoints = sorted(entry[0] for entry in found)
        raise LocalCloudError(f"outputs file {source} names several local clouds: {endpoints}; {START_SERVER} (it writes the file)")
    cloud = LocalCloud(*found.pop())
    if "None" in (cloud.region, cloud.access_key_id, cloud.secret_access_key):
        raise LocalCloudError(
            f"outputs file {source} was written by an older `make serve` (no region or key pair): {START_SERVER} (it writes the file again)"
        )
    return cloud


def running_local_cloud(document: Mapping[str, Any], source: Path | str) -> LocalCloud | None:
    """The local cloud a parsed outputs file names, checked to be answering (None: a deployed environment's file)."""
    cloud = local_cloud(document, source)
    if cloud is not None:
        cloud.check_running(source)
    return cloud


def missing_file(path: Path) -> str:
    """The one line for a `--env local` outputs file that does not exist."""
    return f"no outputs file {path.absolute()}: {START_SERVER} (it writes the file), or pass --outputs-file"
