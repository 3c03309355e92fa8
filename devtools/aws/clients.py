"""SDK clients for the embedded cloud: one region, built on demand inside moto's mock."""

from __future__ import annotations

from typing import Any

REGION = "us-east-1"


def new_client(service: str = "dynamodb") -> Any:
    """A fresh client of `service` (untyped: the worlds pass service names as strings)."""
    import boto3

    factory: Any = boto3.client
    return factory(service, region_name=REGION)
