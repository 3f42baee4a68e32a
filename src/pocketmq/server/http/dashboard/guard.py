"""Who may look and who may act (docs/security.md, "Dashboard and HTTP API").

- ``/metrics``, ``/healthz``, ``/readyz`` and static files are open: Prometheus and
  orchestrators scrape them without credentials.
- Reading pages and ``/api/`` is open when the HTTP port is bound to a loopback address;
  otherwise it needs the **HTTP token** (``config/http.token`` in the data directory, created
  0600 at first start): as ``Authorization: Bearer <token>``, or in a browser by signing in once
  at ``/login`` (an HttpOnly, SameSite=Strict session cookie derived from the token).
- Every request that changes something (any method but GET/HEAD) must prove it was not forged by
  another site: either the Bearer token (a browser never adds it on its own), or the double-submit
  CSRF token — the ``X-Pocketmq-Csrf`` header equal to the ``pocketmq_csrf`` cookie, which only a
  page of this dashboard can read and htmx sends with each request — and an ``Origin``, when the
  browser sends one, naming this host.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from multidict import CIMultiDict

from pocketmq.broker.persist import write_files
from pocketmq.server.auth.network import is_loopback
from pocketmq.server.auth.users import UserStore

__all__ = ["CSRF_COOKIE", "CSRF_HEADER", "Guard", "is_loopback", "load_token"]

CSRF_COOKIE = "pocketmq_csrf"
CSRF_HEADER = "X-Pocketmq-Csrf"
SESSION_COOKIE = "pocketmq_session"
_OPEN_PREFIXES = ("/metrics", "/healthz", "/readyz", "/static/", "/login")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def load_token(config_dir: str) -> str:
    """The HTTP token, created (0600) on first use."""
    path = os.path.join(config_dir, "http.token")
    try:
        with open(path, encoding="ascii") as file:
            token = file.read().strip()
        if len(token) >= 32:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_hex(24)
    write_files([(path, f"{token}\n".encode())])  # 0600 from its creation (docs/security.md)
    return token


class Guard:
    """The aiohttp middleware enforcing the rules of the module doc."""

    def __init__(self, token: str, open_reads: bool, users: UserStore | None = None) -> None:
        self._token = token
        self._key = hmac.new(token.encode(), b"dashboard session", hashlib.sha256).digest()
        self._users = users  # with authentication on, users may sign in with their keys
        self.open_reads = open_reads

    def session_cookie(self, user: str = "") -> str:
        """The session cookie a sign-in sets: ``user`` ("" for the HTTP token's holder) and a
        MAC of it under a key derived from the token (a cookie cannot be forged or edited)."""
        mac = hmac.new(self._key, user.encode(), hashlib.sha256).hexdigest()
        return f"{user}:{mac}"

    @property
    def users_enabled(self) -> bool:
        """Whether users may sign in with their keys (authentication is on)."""
        return self._users is not None

    def token_matches(self, candidate: str) -> bool:
        """Whether ``candidate`` is the HTTP token (constant time)."""
        return _same(candidate.strip(), self._token)

    def user_matches(self, access_key: str, secret_key: str) -> bool:
        """Whether a user of ``pocketmq user`` has these keys (authentication on only)."""
        if self._users is None or not access_key:
            return False
        self._users.refresh()
        secret = self._users.secret(access_key)
        return secret is not None and _same(secret_key, secret)

    def user_of(self, request: web.Request) -> str | None:
        """Who is asking: an access key for a user's session, "" for the token's holder, None
        for nobody signed in (allowed only on loopback)."""
        if self._bearer(request):
            return ""
        cookie = request.cookies.get(SESSION_COOKIE, "")
        user, sep, _ = cookie.rpartition(":")
        if not sep or not _same(cookie, self.session_cookie(user)):
            return None
        if user and (self._users is None or not self._users.user_type(user)):
            return None  # the user was deleted since signing in
        return user

    def _bearer(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value)

    def _signed_in(self, request: web.Request) -> bool:
        return self.user_of(request) is not None

    @staticmethod
    def _same_site(request: web.Request) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        header = request.headers.get(CSRF_HEADER, "")
        if not cookie or not _same(cookie, header):
            return False
        origin = request.headers.get("Origin")
        return origin is None or urlsplit(origin).netloc == request.host

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse what the rules do not allow; give every page its CSRF cookie."""
        if request.path.startswith(_OPEN_PREFIXES):
            return await handler(request)
        bearer = self._bearer(request)
        if not (bearer or self.open_reads or self._signed_in(request)):
            if request.path.startswith("/api/"):
                raise web.HTTPUnauthorized(text="sign in: Authorization: Bearer <http token>\n")
            raise web.HTTPFound("/login?next=" + request.path)
        if request.method not in ("GET", "HEAD") and not (bearer or self._same_site(request)):
            raise web.HTTPForbidden(
                text="refused: a change needs the Bearer token or this dashboard's CSRF token\n"
            )
        fresh = ""
        if CSRF_COOKIE not in request.cookies:
            # a first visit: the pages render with the token the response's cookie sets
            fresh = secrets.token_hex(16)
            cookies = "; ".join(
                filter(None, (request.headers.get("Cookie"), f"{CSRF_COOKIE}={fresh}"))
            )
            request = request.clone(headers=CIMultiDict({**request.headers, "Cookie": cookies}))
        response = await handler(request)
        if fresh:
            response.set_cookie(CSRF_COOKIE, fresh, samesite="Strict", path="/", httponly=False)
        return response


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of any two strings (compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def csrf_token(request: web.Request) -> str:
    """The browser's CSRF token (its cookie; the guard gives a first visit one)."""
    return request.cookies.get(CSRF_COOKIE, "")
