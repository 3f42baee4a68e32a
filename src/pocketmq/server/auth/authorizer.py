"""Checks a request's needs against the ACL for its authenticated user (docs/security.md,
"Authorization"), with decisions cached per (user, resource, action, source) until the users or
rules change, so a producer's thousandth send costs a dictionary lookup, not a rule scan.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pocketmq.errors import NoPermissionError
from pocketmq.server.auth.acl import AclStore, Action, decide, resource_of_topic
from pocketmq.server.auth.cluster import CLUSTER_USER
from pocketmq.server.auth.users import GATEWAY_USER, UserStore

__all__ = ["Authorizer", "Need", "topic_need"]

#: What a request needs: (resource type, resource name, action).
Need = tuple[str, str, Action]

_CACHE_LIMIT = 100_000


def topic_need(topic: str, action: Action) -> Need:
    """``action`` on a topic (its group's, for retry and dead-letter topics)."""
    kind, name = resource_of_topic(topic)
    return (kind, name, action)


class Authorizer:
    """The users' types and the rules, with a decision cache."""

    def __init__(self, users: UserStore, acl: AclStore) -> None:
        self._users = users
        self._acl = acl
        self._cache: dict[tuple[str, str, str, Action, str], tuple[bool, str]] = {}
        self._generation = (-1, -1.0)
        self._next_refresh = 0.0

    def current(self) -> tuple[int, float]:
        """The rules' and users' version now (files read again at most once a second): what a
        connection's own cache of allowed topics is valid for."""
        now = time.monotonic()
        if now >= self._next_refresh:
            self._next_refresh = now + 1.0
            self._users.refresh(0.0)
            self._acl.refresh(0.0)
            generation = (self._acl.generation, self._users.loaded_at)
            if generation != self._generation:
                self._cache.clear()
                self._generation = generation
        return self._generation

    def check(self, user: str, needs: Iterable[Need], source: str) -> None:
        """Raise :class:`NoPermissionError` naming the first need the rules do not allow."""
        self.current()
        for kind, name, action in needs:
            key = (user, kind, name, action, source)
            verdict = self._cache.get(key)
            if verdict is None:
                verdict = self._decide(user, kind, name, action, source)
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[key] = verdict
            if not verdict[0]:
                raise NoPermissionError(verdict[1])

    def allows(self, user: str, needs: Iterable[Need], source: str) -> bool:
        """:meth:`check` as a yes or no (a decision about a push, not a request to refuse)."""
        try:
            self.check(user, needs, source)
        except NoPermissionError:
            return False
        return True

    def _decide(
        self, user: str, kind: str, name: str, action: Action, source: str
    ) -> tuple[bool, str]:
        if user == GATEWAY_USER or self._users.user_type(user) == "super":
            return True, "super user"
        if user == CLUSTER_USER:  # what a member may ask is the port's rule (native/handshake.py)
            return True, "member of the cluster"
        return decide(self._acl.rules(user), user, kind, name, action, source)
