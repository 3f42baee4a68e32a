"""Signing in to the dashboard (docs/security.md, "Dashboard and HTTP API"): ``GET /login``
shows the form, ``POST /login`` checks the HTTP token or a user's keys and sets the session
cookie (sessions.py).

The form carries the CSRF token (another site cannot sign a browser in to an account of its
choosing); wrong sign-ins are throttled per source address (throttle.py, answered 429); and
where to go next is only ever a path of this dashboard (never ``//evil.example``, however
spelled).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.http.dashboard.guard import SESSION_COOKIE, Guard, set_cookie
from pocketmq.server.http.dashboard.throttle import SignInThrottle
from pocketmq.server.http.limits import address_key

__all__ = ["SignIn", "safe_target"]

Render = Callable[..., web.Response]


def safe_target(target: str) -> str:
    """Where a sign-in may go next: a path of this dashboard, else ``/``. Browsers drop tabs and
    line breaks from URLs and read ``\\`` as ``/``, so ``/\\t/evil.example`` would be
    ``//evil.example`` — another site: only printable ASCII without spaces or backslashes, one
    leading ``/``."""
    if not target.startswith("/") or target.startswith("//"):
        return "/"
    if not target.isascii() or any(c <= " " or c in "\\\x7f" for c in target):
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


class SignIn:
    """The sign-in page and its form's handler."""

    def __init__(self, guard: Guard, render: Render, throttle: SignInThrottle | None = None):
        self._guard = guard
        self._render = render
        self.throttle = throttle or SignInThrottle()

    def add_routes(self, app: web.Application) -> None:
        """Register ``GET`` and ``POST /login``."""
        app.router.add_get("/login", self.page)
        app.router.add_post("/login", self.submit)

    def _page(self, request: web.Request, status: int, target: str, **values: Any) -> web.Response:
        defaults: dict[str, Any] = {"failed": False, "throttled": 0, "expired": False}
        response = self._render(request, "login.html", next=target, **{**defaults, **values})
        response.set_status(status)
        return response

    async def page(self, request: web.Request) -> web.Response:
        """The form (with the HTTP token, or a user's keys when authentication is on)."""
        return self._page(request, 200, safe_target(request.query.get("next", "/")))

    async def submit(self, request: web.Request) -> web.Response:
        """Check the form; on success set the session cookie and go on."""
        form = await request.post()
        target = safe_target(str(form.get("next", "/")))
        if not self._guard.from_this_site(request, str(form.get("csrf", ""))):
            count_failure("http", "forbidden")
            return self._page(request, 403, target, expired=True)
        address = address_key((request.remote or "",))
        wait = self.throttle.wait(address)
        if wait:
            count_failure("http", "unauthenticated")
            response = self._page(request, 429, target, throttled=int(wait) + 1)
            response.headers["Retry-After"] = SignInThrottle.retry_after(wait)
            return response
        access_key = str(form.get("access_key", "")).strip()
        if access_key and self._guard.user_matches(access_key, str(form.get("secret_key", ""))):
            user: str | None = access_key
        elif not access_key and self._guard.token_matches(str(form.get("token", ""))):
            user = ""
        else:
            user = None
        if user is None:
            self.throttle.failed(address)
            count_failure("http", "unauthenticated")
            return self._page(request, 401, target, failed=True)
        response = web.HTTPFound(target)
        lifetime = self._guard.sessions.lifetime
        cookie = self._guard.session_cookie(user)
        set_cookie(response, request, SESSION_COOKIE, cookie, httponly=True, max_age=lifetime)
        raise response
