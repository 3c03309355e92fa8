"""The tracing modes a function can be deployed with, and the one variable that tells the runtime which.

The Lambda factory sets TRACING_MODE_VARIABLE from CommonProps.tracing; the runtime reads it once, in
runtime/shared/observability.py, to decide whether to create Powertools' Tracer (and with it import
the X-Ray SDK). Nothing here imports Powertools or boto3: infra imports this module at synth.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from runtime.shared.settings import SettingsError

TRACING_MODE_VARIABLE: Final = "ONCEFLOW_TRACING"


class TracingMode(StrEnum):
    """What a function's traces show, and what they cost at cold start (README, "Tracing").

    ACTIVE: Lambda's active tracing (and Step Functions tracing): one segment per invocation, made by
        Lambda itself, with its init, invocation and overhead phases. No tracing SDK in the function,
        so no subsegment per AWS call and nothing added to cold start. The default.
    SDK: ACTIVE plus Powertools' Tracer on the X-Ray SDK: a `## handler` subsegment with a ColdStart
        annotation and one subsegment per AWS call (botocore patched). The X-Ray SDK reaches end of
        support on 2027-02-25.
    OTEL: ACTIVE plus the AWS-managed ADOT (OpenTelemetry) layer, which wraps the handler through
        AWS_LAMBDA_EXEC_WRAPPER and instruments botocore; spans go to X-Ray. The function's code
        imports nothing for it; the layer's own start-up is the cost.
    OFF: no tracing at all.
    """

    ACTIVE = "active"
    SDK = "sdk"
    OTEL = "otel"
    OFF = "off"

    @property
    def lambda_active_tracing(self) -> bool:
        """Whether Lambda (and Step Functions) record a trace: every mode but OFF."""
        return self is not TracingMode.OFF


def tracing_mode(env: Mapping[str, str]) -> TracingMode:
    """The mode the factory set; ACTIVE (no SDK) when the variable is absent, as in a function built elsewhere."""
    raw = env.get(TRACING_MODE_VARIABLE, "").strip()
    if not raw:
        return TracingMode.ACTIVE
    try:
        return TracingMode(raw)
    except ValueError as err:
        choices = ", ".join(mode.value for mode in TracingMode)
        raise SettingsError(f"environment variable {TRACING_MODE_VARIABLE} must be one of {choices}, got {raw!r}") from err
