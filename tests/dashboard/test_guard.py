"""The HTTP port's access rules when it is reachable from other machines: pages and the API need
the HTTP token (Bearer, or a session from /login); metrics and health stay open
(server/http/dashboard/guard.py, docs/security.md)."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from pocketmq.server.auth.users import UserStore
from pocketmq.server.http.dashboard.guard import Guard, is_loopback, load_token
from pocketmq.server.http.settings import HttpSettings

TOKEN = "t" * 48
GUARD = web.AppKey("guard", Guard)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="content")


async def _login(request: web.Request) -> web.Response:
    form = await request.post()
    if not guard_of(request).token_matches(str(form.get("token", ""))):
        return web.Response(status=401)
    response = web.Response(text="in")
    response.set_cookie("pocketmq_session", guard_of(request).session_cookie())
    return response


def guard_of(request: web.Request) -> Guard:
    return request.app[GUARD]


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    guard = Guard(TOKEN, open_reads=False)
    app = web.Application(middlewares=[guard.middleware])
    app[GUARD] = guard
    for path in ("/", "/api/groups", "/metrics", "/healthz"):
        app.router.add_get(path, _ok)
    app.router.add_post("/api/groups/g/policy", _ok)
    app.router.add_post("/login", _login)
    jar = aiohttp.CookieJar(unsafe=True)
    async with TestClient(TestServer(app), cookie_jar=jar) as test_client:
        yield test_client


async def test_pages_and_api_need_the_token_but_metrics_and_health_do_not(
    client: TestClient[web.Request, web.Application],
) -> None:
    page = await client.get("/", allow_redirects=False)
    assert page.status == 302
    assert page.headers["Location"] == "/login?next=/"
    assert (await client.get("/api/groups")).status == 401
    assert (await client.get("/metrics")).status == 200
    assert (await client.get("/healthz")).status == 200
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/api/groups", headers=bearer)).status == 200
    assert (await client.post("/api/groups/g/policy", headers=bearer)).status == 200
    wrong = {"Authorization": "Bearer " + "x" * 48}
    assert (await client.get("/api/groups", headers=wrong)).status == 401


async def test_a_browser_signs_in_once_and_still_needs_the_csrf_token_to_change_things(
    client: TestClient[web.Request, web.Application],
) -> None:
    assert (await client.post("/login", data={"token": "nope"})).status == 401
    assert (await client.get("/", allow_redirects=False)).status == 302
    assert (await client.post("/login", data={"token": TOKEN})).status == 200
    page = await client.get("/")
    assert page.status == 200
    csrf = page.cookies["pocketmq_csrf"].value
    assert (await client.post("/api/groups/g/policy")).status == 403
    changed = await client.post("/api/groups/g/policy", headers={"X-Pocketmq-Csrf": csrf})
    assert changed.status == 200


def test_the_token_file_is_private_and_stable(tmp_path: Path) -> None:
    first = load_token(str(tmp_path))
    assert len(first) >= 32
    assert stat.S_IMODE(os.stat(tmp_path / "http.token").st_mode) == 0o600
    assert load_token(str(tmp_path)) == first


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("10.1.2.3", False), ("broker.example", False)],
)  # fmt: skip
def test_only_loopback_addresses_open_the_pages(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_user_sessions_cannot_be_forged_expire_and_end_with_the_user_or_its_secret(
    tmp_path: Path,
) -> None:
    users = UserStore(tmp_path)
    users.create("alice", "alices-secret")
    users.create("bob", "bobs-secret")
    now = [1_800_000_000.0]
    settings = HttpSettings(session_seconds=3600)
    guard = Guard(TOKEN, open_reads=False, users=users, settings=settings, clock=lambda: now[0])
    assert guard.user_matches("alice", "alices-secret")
    assert not guard.user_matches("alice", "wrong")
    assert not guard.user_matches("mallory", "alices-secret")
    assert not Guard(TOKEN, open_reads=False).user_matches("alice", "alices-secret")
    cookie = guard.session_cookie("alice")
    assert cookie.startswith("alice:1800000000:")
    assert cookie != guard.session_cookie("bob")
    other_token = Guard("u" * 48, open_reads=False, users=users, settings=settings)
    assert other_token.sessions.user_of(cookie) is None

    def who(value: str) -> str | None:
        request = make_mocked_request("GET", "/", headers={"Cookie": f"pocketmq_session={value}"})
        return guard.user_of(request)

    assert who(cookie) == "alice"
    assert who(guard.session_cookie()) == ""  # the token's holder
    assert who("bob" + cookie[5:]) is None  # another name under alice's MAC
    assert who(cookie[:-1] + ("0" if cookie[-1] != "0" else "1")) is None
    assert who(cookie.replace(":1800000000:", ":1800003000:")) is None  # made to last longer
    assert who("alice:" + "9" * 5000 + ":00") is None
    now[0] += 3599
    assert who(cookie) == "alice"
    now[0] += 2
    assert who(cookie) is None  # 12 hours by default; an hour here
    cookie = guard.session_cookie("alice")
    bobs = guard.session_cookie("bob")
    users.update("alice", secret="alices-new-secret")
    assert who(cookie) is None  # a rotated secret ends the sessions made with the old one
    assert who(guard.session_cookie("alice")) == "alice"
    assert who(bobs) == "bob"
    users.delete("bob")
    assert who(bobs) is None
