"""The Settings the broker answers on a client's Telemetry stream.

The official clients take several decisions from this reply rather than from their own
configuration (docs/grpc.md, "The settings the broker sends"):

- producers copy ``publishing.max_body_size`` verbatim (absent = 0 = every send fails), and
  ``backoff_policy.max_attempts`` (the Python client uses nothing else of the policy);
- push consumers take ``subscription.fifo`` (from the group: orderly or concurrent consumption,
  decided by the *first* reply only), ``subscription.long_polling_timeout`` (absent = 0), and a
  ``customized_backoff`` whose ``next[attempt-1]`` is the invisible time after a failed attempt
  (whole seconds) and whose ``max_attempts`` is when a FIFO consumer gives up and forwards the
  message to the DLQ. Both come from the group's retry policy, so the redelivery schedule is the
  one ``pocketmq group create --retry-delays`` configured.
"""

from __future__ import annotations

from typing import Any, Final

from pocketmq.broker import GroupConfig
from pocketmq.server.grpc.convert import duration
from pocketmq.server.grpc.pb import ClientType, d

__all__ = [
    "CONSUMER_TYPES",
    "LONG_POLLING_TIMEOUT",
    "RECEIVE_BATCH_SIZE",
    "consumer_settings",
    "producer_settings",
]

CT = ClientType
CONSUMER_TYPES: Final = frozenset({CT.PUSH_CONSUMER, CT.SIMPLE_CONSUMER, CT.PULL_CONSUMER})
LONG_POLLING_TIMEOUT: Final = 20.0  # seconds; RocketMQ's default long poll
RECEIVE_BATCH_SIZE: Final = 32
PRODUCER_MAX_ATTEMPTS: Final = 3  # one send and two retries (docs/semantics.md, "Producer")
_MAX_INT32: Final = 2**31 - 1
_MAX_LISTED_DELAYS: Final = 64  # clients reuse the last delay for later attempts


def _common(request: Any) -> dict[str, Any]:
    reply: dict[str, Any] = {"client_type": request.client_type}
    if request.HasField("access_point"):
        reply["access_point"] = request.access_point
    if request.HasField("request_timeout"):
        reply["request_timeout"] = request.request_timeout
    reply["metric"] = {"on": False}
    return reply


def producer_settings(request: Any, max_body_size: int) -> Any:
    """The Settings reply to a producer: the broker's body limit (without it the client refuses
    every send), message-type validation, and the retry policy (module doc)."""
    reply = _common(request)
    reply["publishing"] = {
        "topics": list(request.publishing.topics),
        "max_body_size": max_body_size,
        "validate_message_type": True,
    }
    # Java clients wait this long before retrying a TOO_MANY_REQUESTS send (the SDK's flow-control
    # backoff, docs/semantics.md "Producer"); other failures are retried at once. Python 5.1.2
    # reads only max_attempts.
    reply["backoff_policy"] = {
        "max_attempts": PRODUCER_MAX_ATTEMPTS,
        "exponential_backoff": {
            "initial": duration(1.0),
            "max": duration(120.0),
            "multiplier": 1.6,
        },
    }
    return d.Settings(**reply)


def consumer_settings(
    request: Any, group: GroupConfig, delay_levels: tuple[float, ...], max_long_poll: float
) -> Any:
    """The Settings reply to a consumer: FIFO or not, the long-polling timeout and the retry
    schedule, all from its group, so the clients retry as ``pocketmq group create`` configured."""
    reply = _common(request)
    subscription = request.subscription
    polling = min(LONG_POLLING_TIMEOUT, max_long_poll)
    if subscription.HasField("long_polling_timeout"):  # simple consumers choose their own
        polling = min(
            max_long_poll,
            subscription.long_polling_timeout.seconds
            + subscription.long_polling_timeout.nanos / 1e9,
        )
    reply["subscription"] = {
        "group": subscription.group,
        "subscriptions": list(subscription.subscriptions),
        "fifo": group.fifo,
        "receive_batch_size": RECEIVE_BATCH_SIZE,
        "long_polling_timeout": duration(polling),
    }
    retry = group.retry
    if retry.max_retries < 0:  # never dead-letter
        attempts, listed = _MAX_INT32, _MAX_LISTED_DELAYS
    else:
        attempts, listed = retry.max_attempts, min(retry.max_retries, _MAX_LISTED_DELAYS)
    delays = [retry.delay(n, delay_levels) for n in range(1, listed + 1)]
    reply["backoff_policy"] = {
        "max_attempts": attempts,
        "customized_backoff": {"next": [duration(x) for x in delays]},
    }
    return d.Settings(**reply)
