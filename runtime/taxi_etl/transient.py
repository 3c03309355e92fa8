"""Which failures are AWS's and not the rows': a pure classification, and the one place a task
turns them into TransientInfrastructureError, the error name the state machine retries longer.

The SDK (standard mode, runtime.shared.aws) has already retried each call a few times when one of
these reaches a handler. What remains is an outage of seconds to minutes: a closed connection, an
endpoint that cannot be reached, a read or connect timeout, a throttle, a 5xx, or DynamoDB keeping
keys unprocessed (StoreUnavailable). None of them says anything about a row, so none may become a
data verdict: the task fails with one named error, and the state machine's Retry for it (and for
Lambda's own service errors) waits longer than its Retry for a crash or a bug
(infra/taxi_etl/construct.py). Anything else, a conditional check, a validation error, access
denied, a StoreConflict, a bug, is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from runtime.taxi_etl.errors import StoreUnavailable, TransientInfrastructureError

# Error codes AWS answers when it is busy or briefly broken (botocore's standard retry mode treats
# the same codes as throttles or transient errors). DynamoDB's own are in the first group.
THROTTLING_CODES: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "TransactionInProgressException",
        "LimitExceededException",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
TRANSIENT_CODES: Final = frozenset(
    {
        "InternalServerError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def is_transient(error: BaseException) -> bool:
    """True when `error` is AWS failing the call (see the module's docstring), not a verdict on the data."""
    if isinstance(error, (TransientInfrastructureError, StoreUnavailable)):
        return True
    # ConnectionClosedError, ReadTimeoutError, ResponseStreamingError (HTTPClientError);
    # EndpointConnectionError, ConnectTimeoutError, SSLError, ProxyConnectionError (ConnectionError)
    if isinstance(error, (HTTPClientError, BotocoreConnectionError)):
        return True
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in THROTTLING_CODES or code in TRANSIENT_CODES or (isinstance(status, int) and status >= 500)
    return False


def as_transient(error: BaseException) -> TransientInfrastructureError:
    """The task's error for a transient `error`, its message naming the original class."""
    if isinstance(error, TransientInfrastructureError):
        return error
    return TransientInfrastructureError(f"{type(error).__name__}: {error}")


@contextmanager
def transient_errors() -> Iterator[None]:
    """Around a task's work: a transient failure leaves it as TransientInfrastructureError (chained to the
    original), every other exception unchanged."""
    try:
        yield
    except Exception as error:
        if not is_transient(error) or isinstance(error, TransientInfrastructureError):
            raise
        raise as_transient(error) from error
