"""The dashboard's session cookie (docs/security.md, "Dashboard and HTTP API").

``pocketmq_session=<user>:<issued>:<mac>``: the access key of a signed-in user ("" for the HTTP
token's holder), when the sign-in was made (Unix seconds), and an HMAC-SHA256 of both and of the
user's current secret key under a key derived from the HTTP token. So a cookie cannot be forged
or edited; it ends after its lifetime (12 hours by default, ``[server] http_session_hours``); and
it ends when its user is deleted or the user's secret changes (the MAC no longer matches), or
for the token's holder when the token changes.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

from pocketmq.server.auth.users import UserStore

__all__ = ["SESSION_COOKIE", "Sessions", "same"]

SESSION_COOKIE = "pocketmq_session"
_CLOCK_SKEW = 60.0  # a cookie issued this far in the future still counts (clock steps)


def same(given: str, expected: str) -> bool:
    """Constant-time equality of any two strings (compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


class Sessions:
    """Makes and checks session cookies (module doc)."""

    def __init__(
        self,
        token: str,
        users: UserStore | None,
        lifetime: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = hmac.new(token.encode(), b"dashboard session", hashlib.sha256).digest()
        self._users = users
        self.lifetime = lifetime
        self._clock = clock

    def _secret(self, user: str) -> str | None:
        """What a session of ``user`` is bound to: the user's secret key now (None: no such
        user), or "" for the token's holder (the key itself is derived from the token)."""
        if not user:
            return ""
        if self._users is None:
            return None
        self._users.refresh()
        return self._users.secret(user)

    def _mac(self, user: str, issued: int, secret: str) -> str:
        message = f"{user}\0{issued}\0{secret}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, user: str) -> str:
        """A new session of ``user`` ("" for the token's holder), from now."""
        secret = self._secret(user)
        if secret is None:
            raise ValueError(f"no user {user!r}")
        issued = int(self._clock())
        return f"{user}:{issued}:{self._mac(user, issued, secret)}"

    def user_of(self, cookie: str) -> str | None:
        """The user a cookie names ("" for the token's holder), or None when it is not a valid
        session now: malformed, forged, expired, or its user deleted or given a new secret."""
        rest, sep, mac = cookie.rpartition(":")
        user, sep_issued, issued_text = rest.rpartition(":")
        digits = issued_text.isascii() and issued_text.isdigit() and len(issued_text) <= 12
        if not (sep and sep_issued and digits):
            return None
        issued = int(issued_text)
        now = self._clock()
        if not issued - _CLOCK_SKEW <= now < issued + self.lifetime:
            return None
        secret = self._secret(user)
        if secret is None or not same(mac, self._mac(user, issued, secret)):
            return None
        return user
