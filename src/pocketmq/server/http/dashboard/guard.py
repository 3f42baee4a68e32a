"""Who may look and who may act (docs/security.md, "Dashboard and HTTP API").

- Every request must name one of the broker's hosts in ``Host`` (server/http/hosts.py: the
  defence against DNS rebinding), or it is refused with 421 before anything else.
- ``/metrics``, ``/healthz``, ``/readyz`` and static files are open: Prometheus and
  orchestrators scrape them without credentials.
- Reading pages and ``/api/`` is open only when the HTTP port is bound to a loopback address and
  authentication is off; otherwise it needs a sign-in: the **HTTP token** (``config/http.token``
  in the data directory, created 0600 at first start) as ``Authorization: Bearer <token>``, or a
  session cookie (sessions.py) from signing in at ``/login`` (signin.py) with the token or, with
  authentication on, a user's keys.
- Every request that changes something (any method but GET/HEAD) must prove it was not forged by
  another site: either the Bearer token (a browser never adds it on its own), or the
  double-submit CSRF token — the ``X-Pocketmq-Csrf`` header equal to the ``pocketmq_csrf``
  cookie, which only a page of this dashboard can read and htmx sends with each request — and an
  ``Origin``, when the browser sends one, naming one of the broker's hosts at this port. The
  sign-in form carries the token as a field. Its body must arrive within ``body_timeout``.
- Every answer carries headers that keep browsers from framing, sniffing or scripting it
  (:func:`add_security_headers`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from aiohttp import hdrs, web
from multidict import CIMultiDict

from pocketmq.broker.persist import write_files
from pocketmq.server.auth.network import is_loopback
from pocketmq.server.auth.users import UserStore
from pocketmq.server.http.dashboard.sessions import SESSION_COOKIE, Sessions, same
from pocketmq.server.http.settings import HttpSettings
from pocketmq.server.ratelog import RateLimitedLog

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "Guard",
    "add_security_headers",
    "is_loopback",
    "load_token",
    "set_cookie",
]

CSRF_COOKIE = "pocketmq_csrf"
CSRF_HEADER = "X-Pocketmq-Csrf"
SIGN_IN_PATH = "/login"
_OPEN_PREFIXES = ("/metrics", "/healthz", "/readyz", "/static/")
_SAFE_METHODS = ("GET", "HEAD")
# the only script is htmx, a file of ours; no inline script or style, no framing, no plugins
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = RateLimitedLog(logging.getLogger("pocketmq.server.http"))


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


def set_cookie(
    response: web.StreamResponse,
    request: web.Request,
    name: str,
    value: str,
    *,
    httponly: bool,
    max_age: float | None = None,
) -> None:
    """A cookie of this dashboard: SameSite=Strict, for every path, Secure over HTTPS."""
    response.set_cookie(
        name,
        value,
        samesite="Strict",
        path="/",
        httponly=httponly,
        secure=request.secure,
        max_age=None if max_age is None else int(max_age),
    )


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` hook: every answer may not be framed, sniffed, or run inline
    script; pages and data are not cached (they may hold message bodies)."""
    headers = response.headers
    headers.setdefault("Content-Security-Policy", _CSP)
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "same-origin")
    if not request.path.startswith("/static/"):
        headers.setdefault("Cache-Control", "no-store")


class Guard:
    """The aiohttp middleware enforcing the rules of the module doc."""

    def __init__(
        self,
        token: str,
        open_reads: bool,
        users: UserStore | None = None,
        *,
        settings: HttpSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = settings or HttpSettings()
        self._token = token
        self._users = users  # with authentication on, users may sign in with their keys
        self.hosts = settings.hosts
        self.sessions = Sessions(token, users, settings.session_seconds, clock)
        self._body_timeout = settings.body_timeout
        self.open_reads = open_reads

    def session_cookie(self, user: str = "") -> str:
        """A new session cookie's value for ``user`` ("" for the HTTP token's holder)."""
        return self.sessions.issue(user)

    @property
    def users_enabled(self) -> bool:
        """Whether users may sign in with their keys (authentication is on)."""
        return self._users is not None

    def token_matches(self, candidate: str) -> bool:
        """Whether ``candidate`` is the HTTP token (constant time)."""
        return same(candidate.strip(), self._token)

    def user_matches(self, access_key: str, secret_key: str) -> bool:
        """Whether a user of ``pocketmq user`` has these keys (authentication on only)."""
        if self._users is None or not access_key:
            return False
        self._users.refresh()
        secret = self._users.secret(access_key)
        return secret is not None and same(secret_key, secret)

    def user_of(self, request: web.Request) -> str | None:
        """Who is asking: an access key for a user's session, "" for the token's holder, None
        for nobody signed in (allowed only where reads are open)."""
        if self._bearer(request):
            return ""
        return self.sessions.user_of(request.cookies.get(SESSION_COOKIE, ""))

    def _bearer(self, request: web.Request) -> bool:
        header = request.headers.get(hdrs.AUTHORIZATION, "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value)

    def from_this_site(self, request: web.Request, token: str) -> bool:
        """Whether a change comes from a page of this dashboard: ``token`` (the CSRF header, or
        the sign-in form's field) equals the CSRF cookie, and the browser's ``Origin``, when it
        sends one, is one of the broker's hosts at this port."""
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not same(token, cookie):
            return False
        origin = request.headers.get(hdrs.ORIGIN)
        return origin is None or self.hosts.allows_origin(origin, request.host)

    def _check_host(self, request: web.Request) -> None:
        host = request.headers.get(hdrs.HOST)
        # no Host at all: an HTTP/1.0 client (a load balancer's check), never a browser
        if host is not None and not self.hosts.allows(host):
            log.warning("host", "refused an HTTP request for an unknown host %r", host[:100])
            raise web.HTTPMisdirectedRequest(
                text="this broker does not answer to that host name: "
                "add it to [server] http_hosts (docs/security.md)\n"
            )

    async def _read_body(self, request: web.Request) -> None:
        """Read the body now (handlers then find it read), within the body timeout."""
        if not request.body_exists:
            return
        try:
            async with asyncio.timeout(self._body_timeout):
                await request.read()
        except TimeoutError:
            raise web.HTTPRequestTimeout(
                text="the request's body did not arrive in time\n", headers={"Connection": "close"}
            ) from None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse what the rules do not allow; give every page its CSRF cookie."""
        self._check_host(request)
        if request.path.startswith(_OPEN_PREFIXES):
            return await handler(request)
        bearer = self._bearer(request)
        signing_in = request.path == SIGN_IN_PATH
        if not (signing_in or bearer or self.open_reads or self.user_of(request) is not None):
            if request.path.startswith("/api/"):
                raise web.HTTPUnauthorized(text="sign in: Authorization: Bearer <http token>\n")
            raise web.HTTPFound(f"{SIGN_IN_PATH}?next={quote(request.path_qs, safe='/')}")
        if request.method not in _SAFE_METHODS:
            # the sign-in form's token is a field of its body: signin.py checks it
            if not (signing_in or bearer or self.from_this_site(request, _csrf_header(request))):
                raise web.HTTPForbidden(
                    text="refused: a change needs the Bearer token or this dashboard's CSRF token\n"
                )
            await self._read_body(request)
        return await self._with_csrf_cookie(request, handler)

    @staticmethod
    async def _with_csrf_cookie(request: web.Request, handler: Handler) -> web.StreamResponse:
        fresh = ""
        if CSRF_COOKIE not in request.cookies and request.method in _SAFE_METHODS:
            # a first visit: the pages render with the token the response's cookie sets
            fresh = secrets.token_hex(16)
            cookies = "; ".join(
                filter(None, (request.headers.get(hdrs.COOKIE), f"{CSRF_COOKIE}={fresh}"))
            )
            request = request.clone(headers=CIMultiDict({**request.headers, "Cookie": cookies}))
        response = await handler(request)
        if fresh:
            set_cookie(response, request, CSRF_COOKIE, fresh, httponly=False)
        return response


def _csrf_header(request: web.Request) -> str:
    return request.headers.get(CSRF_HEADER, "")


def csrf_token(request: web.Request) -> str:
    """The browser's CSRF token (its cookie; the guard gives a first visit one)."""
    return request.cookies.get(CSRF_COOKIE, "")
