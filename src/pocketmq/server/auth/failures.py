"""Refused credentials and permissions, counted for ``pocketmq_auth_failures_total``
(docs/operations.md, "Metrics"): by protocol (``native``, ``grpc``) and reason
(``unauthenticated``: no or a malformed credential, an unknown user or a wrong signature;
``forbidden``: a known user the ACL does not allow). One counter per process: a process serves
one broker."""

from __future__ import annotations

import collections

__all__ = ["FAILURES", "count"]

FAILURES: collections.Counter[tuple[str, str]] = collections.Counter()


def count(protocol: str, reason: str) -> None:
    """One more refusal."""
    FAILURES[(protocol, reason)] += 1
