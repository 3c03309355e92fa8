"""What every onceflow construct shares: how its stateful resources are removed, how long its logs
are kept, how its functions log, which Powertools layer they run with, and how its tables are billed.

Each construct takes these as documented props with production-safe defaults (data retained,
three months of logs); the repository's per-environment config (infra/config.py) composes them
for its own stacks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Protocol

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_logs as logs

from onceflow.runtime.shared.contract import TracingMode

__all__ = ["ADOT_PYTHON_LAYER_ARNS", "POWERTOOLS_LAYER_VERSION", "CommonProps", "ConfigError", "TableOptions", "TracingMode"]

# The AWS-managed Powertools for AWS Lambda (Python) layer the functions run with. The dev
# environment installs the same release (tests/unit/test_setup.py compares them).
POWERTOOLS_LAYER_VERSION: Final = "3.37.0"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")
# The AWS-managed ADOT (OpenTelemetry) Python layer of the `otel` tracing mode, pinned per region: AWS
# publishes it under a version number of each region's own. Architecture-independent, Python 3.10-3.14.
# A region not listed needs its ARN in CommonProps.adot_layer_arns (`aws lambda list-layer-versions
# --layer-name AWSOpenTelemetryDistroPython --region R` prints it).
ADOT_PYTHON_LAYER_ARNS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "us-east-1": "arn:aws:lambda:us-east-1:615299751070:layer:AWSOpenTelemetryDistroPython:25",
        "ap-northeast-1": "arn:aws:lambda:ap-northeast-1:615299751070:layer:AWSOpenTelemetryDistroPython:25",
    }
)
_ADOT_LAYER_ARN = re.compile(r"arn:aws:lambda:(?P<region>[a-z]{2}(-[a-z]+)+-\d):\d{12}:layer:AWSOpenTelemetryDistroPython:\d+")
_REMOVAL_POLICIES: Final = (RemovalPolicy.RETAIN, RemovalPolicy.DESTROY)


class ConfigError(ValueError):
    """A construct's props or the environment configuration are invalid; synth stops before building anything."""


@dataclass(frozen=True)
class CommonProps:
    """Settings every onceflow construct shares.

    removal_policy: what CloudFormation does with the construct's stateful resources (tables,
        stream, queues, bucket, secret, keys, log groups, state machine) when they leave the
        stack. RETAIN (the default) keeps them, and tables also get deletion protection; DESTROY
        suits a throwaway environment.
    log_retention: how long every log group of the construct keeps its events.
    log_level: the functions' log level: DEBUG, INFO (the default), WARNING or ERROR.
    powertools_layer_version: the AWS-managed Powertools layer release the functions run with,
        resolved per region from its public SSM parameter at deploy time. The handlers are
        tested against POWERTOOLS_LAYER_VERSION; another v3 release is accepted at your risk.
    tracing: what the functions and the state machine trace (runtime/shared/contract.TracingMode).
        ACTIVE (the default): Lambda's active tracing and Step Functions tracing, no tracing SDK in
        the functions. SDK: also Powertools' Tracer on the X-Ray SDK (a subsegment per AWS call;
        the SDK's end of support is 2027-02-25). OTEL: also the AWS-managed ADOT layer
        (adot_layer_arns). OFF: none.
    adot_layer_arns: the ADOT Python layer per region for the OTEL mode; pinned
        (ADOT_PYTHON_LAYER_ARNS). A stack in a region not listed fails at deploy.
    sdk_layer: True (the default): the functions run on the boto3 and botocore the handlers are
        tested with (lambda_assets.SDK_VERSIONS), shipped in one layer per stack built from the
        synthesizing environment, which must have exactly those versions installed (synth says
        which pip command otherwise). False: they run on the boto3 the Lambda runtime ships, which
        AWS updates on its own schedule (untested versions, nothing to pin).
    """

    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    log_level: str = "INFO"
    powertools_layer_version: str = POWERTOOLS_LAYER_VERSION
    tracing: TracingMode = TracingMode.ACTIVE
    adot_layer_arns: Mapping[str, str] = field(default_factory=lambda: ADOT_PYTHON_LAYER_ARNS)
    sdk_layer: bool = True

    @property
    def retain_data(self) -> bool:
        return self.removal_policy == RemovalPolicy.RETAIN

    def validate(self) -> None:
        if self.removal_policy not in _REMOVAL_POLICIES:
            raise ConfigError("removal_policy must be RemovalPolicy.RETAIN or RemovalPolicy.DESTROY")
        if not isinstance(self.log_retention, logs.RetentionDays):
            raise ConfigError("log_retention must be an aws_logs.RetentionDays")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"log_level {self.log_level!r} is not a Powertools log level ({', '.join(LOG_LEVELS)})")
        if not re.fullmatch(r"3\.\d+\.\d+", self.powertools_layer_version):
            raise ConfigError("powertools_layer_version must be a Powertools v3 release such as 3.37.0")
        if not isinstance(self.tracing, TracingMode):
            choices = ", ".join(f"TracingMode.{mode.name}" for mode in TracingMode)
            raise ConfigError(f"tracing must be a TracingMode ({choices}), not {self.tracing!r}")
        for region, arn in self.adot_layer_arns.items():
            match = _ADOT_LAYER_ARN.fullmatch(arn)
            if match is None or match["region"] != region:
                wanted = "that region's AWSOpenTelemetryDistroPython layer version ARN"
                raise ConfigError(f"adot_layer_arns[{region!r}] must be {wanted}, not {arn!r}")
        if not isinstance(self.sdk_layer, bool):
            raise ConfigError(f"sdk_layer must be True or False, not {self.sdk_layer!r}")
        if self.tracing is TracingMode.OTEL and not self.adot_layer_arns:
            raise ConfigError("tracing OTEL needs the ADOT layer of at least one region in adot_layer_arns")


@dataclass(frozen=True)
class TableOptions:
    """How the construct's DynamoDB tables are billed and removed.

    billing_mode: PAY_PER_REQUEST (the default: nothing to plan, and a burst of redeliveries is
        never throttled) or PROVISIONED, which needs read_capacity and write_capacity. They apply
        to each table and index. A throttled write is retried, then redelivered; nothing is lost,
        but the pipeline falls behind.
    removal_policy: the tables' own, in place of CommonProps.removal_policy; None (the default)
        follows it.
    """

    billing_mode: dynamodb.BillingMode = dynamodb.BillingMode.PAY_PER_REQUEST
    read_capacity: int | None = None
    write_capacity: int | None = None
    removal_policy: RemovalPolicy | None = None

    def validate(self) -> None:
        if self.billing_mode == dynamodb.BillingMode.PAY_PER_REQUEST:
            if self.read_capacity is not None or self.write_capacity is not None:
                raise ConfigError("tables: read_capacity and write_capacity apply only to billing_mode PROVISIONED")
        elif self.billing_mode == dynamodb.BillingMode.PROVISIONED:
            for name, capacity in (("read_capacity", self.read_capacity), ("write_capacity", self.write_capacity)):
                if capacity is None or not 1 <= capacity <= 40_000:
                    raise ConfigError(f"tables: billing_mode PROVISIONED needs {name} of 1..40000 units")
        else:
            raise ConfigError("tables: billing_mode must be dynamodb.BillingMode.PAY_PER_REQUEST or PROVISIONED")
        if self.removal_policy is not None and self.removal_policy not in _REMOVAL_POLICIES:
            raise ConfigError("tables: removal_policy must be RemovalPolicy.RETAIN, RemovalPolicy.DESTROY or None")

    def removal(self, common: CommonProps) -> RemovalPolicy:
        return self.removal_policy or common.removal_policy


def check_reserved_concurrency(owner: str, reserved: int | None, *, at_least: int = 1, why: str = "") -> None:
    """A reserved concurrency of 0 would stop the function; one below what its event source runs at
    once would throttle it forever."""
    if reserved is not None and not at_least <= reserved <= 10_000:
        reason = f" ({why})" if why else ""
        raise ConfigError(f"{owner} reserved concurrency must be {at_least}..10000{reason}")


def require_positive(prefix: str, thresholds: object, exclude: tuple[str, ...] = ()) -> None:
    for name, value in vars(thresholds).items():
        if name not in exclude and value < 1:
            raise ConfigError(f"{prefix}.{name} must be at least 1")


class Validated(Protocol):
    def validate(self) -> None: ...


def validate_pipeline_props(owner: str, settings: Validated, settings_type: type, common: CommonProps, tables: TableOptions) -> None:
    """A pipeline construct's props: each part of the right type (a clear error for, say, the repository's
    EnvConfig where the pipeline's settings belong), then each part's own checks."""
    expect_types(owner, settings=(settings, settings_type), common=(common, CommonProps), tables=(tables, TableOptions))
    settings.validate()
    common.validate()
    tables.validate()


def expect_types(owner: str, **fields: tuple[object, type]) -> None:
    """A clear error for a prop of the wrong type (say, the repository's EnvConfig where the pipeline's settings belong)."""
    for name, (value, expected) in fields.items():
        if not isinstance(value, expected):
            raise ConfigError(f"{owner}.{name} must be a {expected.__name__}, not {type(value).__name__}")
