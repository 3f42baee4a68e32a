"""A signed-in connection's or stream's proof, checked again when the users change.

docs/security.md, "Authentication": once a user is deleted or its secret changed, its open
connections are refused from then on — not only new ones. A :class:`Credential` remembers which
user signed in and the fingerprint of the secret it signed in with; per request the holder
compares one number (the users' generation, bumped whenever ``users.json`` is read again) and
looks the user up only when it moved, so the check costs two attribute reads and a comparison on
the hot path. :func:`watch_users` is what reads the file again, once a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pocketmq.server.auth.users import UserStore

__all__ = ["Credential", "watch_users"]

log = logging.getLogger("pocketmq.server")


class Credential:
    """Who signed in, with which secret (module doc). Once it stops holding, it never holds
    again: signing in again is the way back."""

    __slots__ = ("_fingerprint", "revoked", "seen", "store", "user")

    def __init__(self, store: UserStore, user: str) -> None:
        self.store = store
        self.user = user
        self._fingerprint = store.fingerprint(user)
        self.revoked = self._fingerprint is None
        # the users' generation it was last found valid in (-1: never again)
        self.seen = -1 if self.revoked else store.generation

    def holds(self) -> bool:
        """Whether the user still exists with the secret it signed in with."""
        store = self.store
        if self.seen == store.generation:
            return True
        if self.revoked or store.fingerprint(self.user) != self._fingerprint:
            self.revoked = True
            self.seen = -1
            return False
        self.seen = store.generation
        return True

    def why(self) -> str:
        """The refusal's text."""
        return (
            f"user {self.user!r} was deleted or its secret changed since this connection "
            "signed in: connect and authenticate again"
        )


async def watch_users(
    store: UserStore, on_change: Callable[[], None] | None = None, interval: float = 1.0
) -> None:
    """Read the users again every ``interval`` seconds (a ``stat`` when nothing changed), and
    call ``on_change`` after they changed: what makes :meth:`Credential.holds` see an edit
    within a second even on a connection that never looks at the file."""
    seen = store.generation
    while True:
        await asyncio.sleep(interval)
        try:
            store.refresh(0.0)
        except Exception:  # a file being rewritten: the next round reads it
            log.debug("reading the users again failed", exc_info=True)
            continue
        if store.generation != seen:
            seen = store.generation
            if on_change is not None:
                on_change()
