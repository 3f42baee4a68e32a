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

No one retry policy suits every official client: the Python client reads only
``customized_backoff`` (anything else means 17 attempts 1 s apart), and the Node.js client only
``exponential_backoff`` (a customized one leaves it without a policy: one attempt, so a FIFO
consumer dead-letters at the first failure). So Node.js consumers, told apart by the language of
their user agent, get the group's schedule as an exponential policy — exact when the group's
delays are exponential, otherwise fitted to their first and largest delay — and everyone else the
exact customized one (docs/grpc.md, "The settings the broker sends").
"""

from __future__ import annotations

from typing import Any, Final

from pocketmq.model import GroupConfig, RetryPolicy
from pocketmq.protocol.checks import MAX_RETRY_MULTIPLIER
from pocketmq.server.grpc.convert import duration
from pocketmq.server.grpc.pb import ClientType, d

__all__ = [
    "CONSUMER_TYPES",
    "LONG_POLLING_TIMEOUT",
    "RECEIVE_BATCH_SIZE",
    "consumer_settings",
    "exponential_form",
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
    if request.user_agent.language == d.Language.NODE_JS:
        reply["backoff_policy"] = {
            "max_attempts": attempts,
            "exponential_backoff": _node_exponential(retry, delays, request.user_agent.version),
        }
    else:
        reply["backoff_policy"] = {
            "max_attempts": attempts,
            "customized_backoff": {"next": [duration(x) for x in delays]},
        }
    return d.Settings(**reply)


def exponential_form(retry: RetryPolicy, delays: list[float]) -> tuple[float, float, float]:
    """The group's delays as (initial, multiplier, maximum) seconds, for a client that reads only
    an exponential policy: the group's own when it is exponential, otherwise the curve through its
    first delay that reaches its largest delay at the same retry (so the first retry and the
    longest wait are the configured ones; a geometric list such as 1 s, 2 s, 4 s is exact)."""
    if retry.initial > 0:
        return retry.initial, retry.multiplier, retry.maximum
    positive = [x for x in delays if x > 0]
    if not positive:
        return 0.0, 1.0, 0.0
    initial, largest = positive[0], max(positive)
    steps = delays.index(largest) - delays.index(initial)
    multiplier = (largest / initial) ** (1 / steps) if steps > 0 and largest > initial else 1.0
    return initial, min(multiplier, MAX_RETRY_MULTIPLIER), largest


def _node_exponential(retry: RetryPolicy, delays: list[float], version: str) -> dict[str, Any]:
    """The exponential policy a Node.js consumer is sent. rocketmq-client-nodejs up to 1.0.8 reads
    the durations' whole seconds and waits that many *milliseconds*
    (``ExponentialBackoffRetryPolicy``, then ``setTimeout``/``createDuration``), so those versions
    are sent milliseconds in the seconds field, which they wait as intended; later versions get
    true durations."""
    initial, multiplier, maximum = exponential_form(retry, delays)
    if _reads_seconds_as_milliseconds(version):
        return {
            "initial": {"seconds": round(initial * 1000)},
            "max": {"seconds": round(maximum * 1000)},
            "multiplier": multiplier,
        }
    return {"initial": duration(initial), "max": duration(maximum), "multiplier": multiplier}


def _reads_seconds_as_milliseconds(version: str) -> bool:
    """Whether a Node.js client of ``version`` has 1.0.8's unit error (every release so far; an
    unreadable version is taken as one of them)."""
    try:
        release = tuple(int(part) for part in version.split("-")[0].split("."))
    except ValueError:
        return True
    return release <= (1, 0, 8)
