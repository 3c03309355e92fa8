"""What infra and every function agree on, whatever the pipeline: the tracing modes and the variable
that tells a function its mode. Constants only: infra imports this module at synth.

The Lambda factory sets TRACING_MODE_VARIABLE from CommonProps.tracing; the runtime reads it once, in
runtime/shared/observability.py (runtime/shared/settings.tracing_mode), to decide whether to create
Powertools' Tracer, and with it import the X-Ray SDK.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

TRACING_MODE_VARIABLE: Final = "ONCEFLOW_TRACING"


class TracingMode(StrEnum):
    """What a function's traces show, and what they cost at cold start (docs/tracing.md, "Tracing").

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
