"""The HTTP port attacked as a web page, a local process and a flood would attack it
(docs/security.md, "Dashboard and HTTP API"; issue 28 findings 4, 6, 9).

Two real brokers: ``open_broker`` on loopback without authentication (the dashboard open to
this machine, short HTTP timeouts), and ``secure_broker`` on loopback with TLS, authentication
and authorization (a user must sign in, even from this machine). Requests are raw, as an
attacker writes them: a DNS-rebinding page's forged ``Host`` and its own cookies, a cross-site
form, a slow-loris client, a burst of wrong passwords, a crowd of sockets.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import trustme

from pocketmq.client import (
    Admin,
    ClientConfig,
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    PushConsumer,
)
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, eventually
from ..scratch import scratch_broker

pytestmark = pytest.mark.integration

CARD = "4111 1111 1111 1111"
ROOT = ClientConfig(access_key="root", secret_key="root-secret")
OPEN_HTTP = {"http_header_timeout": 1.0, "http_body_timeout": 1.0}
SECURE_HTTP = {"http_max_connections": 8}  # two per source address


# -- brokers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {**FAST_BROKER, "server": OPEN_HTTP}
    with scratch_broker(tmp_path_factory, "web-open", config=config, grpc_port=None,
                        http_port=0) as process:  # fmt: skip
        asyncio.run(_orders(process.address))
        yield process


async def _orders(address: str, client: ClientConfig | None = None) -> None:
    async with Admin(servers=address, client=client) as admin:
        await admin.create_topic("orders", queues=1)
        await admin.create_group("billing")
    async with Producer(servers=address, client=client) as producer:
        await producer.send(Message(topic="orders", body=f"card {CARD}".encode(), keys=("k",)))


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("web-tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    ca_file, cert, key = root / "ca.pem", root / "cert.pem", root / "key.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    server.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    for blob in server.cert_chain_pems:
        blob.write_to_path(str(cert), append=True)
    return ca_file, cert, key


@pytest.fixture(scope="module")
def secure_broker(
    tmp_path_factory: pytest.TempPathFactory, ca: tuple[Path, Path, Path]
) -> Iterator[BrokerProcess]:
    ca_file, cert, key = ca
    args = ("--tls-cert", str(cert), "--tls-key", str(key), "--authentication", "--authorization")
    config = {**FAST_BROKER, "server": SECURE_HTTP}
    with scratch_broker(tmp_path_factory, "web-secure", config=config, grpc_port=None,
                        http_port=0, extra_args=args) as process:  # fmt: skip
        for user in (
            ["user", "create", "root", "--secret", "root-secret", "--type", "super"],
            ["user", "create", "carol", "--secret", "carol-secret", "--type", "super"],
        ):
            _cli(process, *user)
        time.sleep(1.1)  # a running broker reads users.json again within a second
        tls = ClientConfig(
            access_key="root",
            secret_key="root-secret",
            tls=ssl.create_default_context(cafile=str(ca_file)),
        )
        asyncio.run(_orders(process.address, tls))
        yield process


def _cli(broker: BrokerProcess, *args: str) -> None:
    data = str(broker.data_dir / "data")
    command = [sys.executable, "-m", "pocketmq", *args, "--data-dir", data]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def _token(broker: BrokerProcess) -> str:
    return (broker.data_dir / "data" / "config" / "http.token").read_text().strip()


# -- raw HTTP ------------------------------------------------------------------------------


def _connect(
    address: str, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> socket.socket:
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    return tls.wrap_socket(raw, server_hostname=host) if tls else raw


def _read_all(sock: socket.socket, limit: float = 10.0) -> bytes:
    """Everything the server sends until it closes (or ``limit`` seconds pass)."""
    sock.settimeout(limit)
    chunks = []
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError, ssl.SSLError):
        pass
    return b"".join(chunks)


def _request(
    address: str,
    method: str,
    path: str,
    *,
    host: str | None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    tls: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, as written (``host=None``: no ``Host`` at all, as an
    HTTP/1.0 client)."""
    lines = [f"{method} {path} HTTP/{'1.1' if host is not None else '1.0'}"]
    if host is not None:
        lines.append(f"Host: {host}")
    for name, value in {**(headers or {}), "Connection": "close"}.items():
        lines.append(f"{name}: {value}")
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    with _connect(address, tls=tls) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        answer = _read_all(sock)
    head, _, content = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), parsed, content


def _stored(broker: BrokerProcess) -> int:
    """Messages stored in ``orders`` (asked with the Bearer token through the right host)."""
    status, _, body = _request(
        broker.http, "GET", "/api/topics", host=broker.http,
        headers={"Authorization": f"Bearer {_token(broker)}"},
    )  # fmt: skip
    assert status == 200
    return int(next(t["stored"] for t in json.loads(body) if t["name"] == "orders"))


# -- finding 4: DNS rebinding and loopback trust -------------------------------------------


def test_a_dns_rebinding_page_reads_sends_and_resets_nothing(open_broker: BrokerProcess) -> None:
    """The attacker's name now resolves to 127.0.0.1: its page's requests reach the broker as
    same-origin ones, with cookies the page set itself."""
    evil = f"evil.example:{open_broker.http.rsplit(':', 1)[1]}"
    forged = {"Origin": f"http://{evil}", "Cookie": "pocketmq_csrf=x", "X-Pocketmq-Csrf": "x",
              "Content-Type": "application/json"}  # fmt: skip
    before = _stored(open_broker)
    for method, path, body in (
        ("GET", "/api/messages?topic=orders&key=k", b""),
        ("GET", "/messages?topic=orders&key=k", b""),
        ("GET", "/", b""),
        ("GET", "/metrics", b""),
        ("POST", "/api/topics/orders/messages", b'{"body": "forged"}'),
        ("POST", "/api/groups/billing/reset-offset", b'{"topic": "orders", "to": "latest"}'),
    ):
        status, _, content = _request(
            open_broker.http, method, path, host=evil, headers=forged, body=body
        )
        assert status == 421, (method, path, content)
        assert CARD.encode() not in content
        assert b"http_hosts" in content  # the refusal names the setting
    assert _stored(open_broker) == before
    # the broker's own names (any case, a trailing dot) and an HTTP/1.0 probe without Host
    port = open_broker.http.rsplit(":", 1)[1]
    for host in (open_broker.http, f"LOCALHOST:{port}", f"localhost.:{port}", f"[::1]:{port}"):
        status, _, content = _request(open_broker.http, "GET", "/api/groups", host=host)
        assert status == 200, (host, content)
    for host in (f"127.0.0.1.evil.example:{port}", f"localhost@evil.example:{port}", ""):
        assert _request(open_broker.http, "GET", "/healthz", host=host)[0] == 421, host
    assert _request(open_broker.http, "GET", "/healthz", host=None)[0] == 200


def test_a_cross_origin_post_is_refused_even_from_another_local_port(
    open_broker: BrokerProcess,
) -> None:
    port = int(open_broker.http.rsplit(":", 1)[1])
    csrf = {"Cookie": "pocketmq_csrf=x", "X-Pocketmq-Csrf": "x", "Content-Type": "application/json"}
    before = _stored(open_broker)
    for origin in ("http://evil.example", f"http://127.0.0.1:{port + 1}", "null",
                   f"http://evil.example:{port}"):  # fmt: skip
        status, _, content = _request(
            open_broker.http, "POST", "/api/topics/orders/messages", host=open_broker.http,
            headers={**csrf, "Origin": origin}, body=b'{"body": "forged"}',
        )  # fmt: skip
        assert status == 403, (origin, content)
    assert _stored(open_broker) == before
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        status, _, content = _request(
            open_broker.http, "POST", "/api/topics/orders/messages", host=open_broker.http,
            headers={**csrf, "Origin": origin}, body=b'{"body": "from the dashboard"}',
        )  # fmt: skip
        assert status == 200, (origin, content)
    assert _stored(open_broker) == before + 2


def test_with_authentication_a_local_process_must_sign_in_too(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    tls = ssl.create_default_context(cafile=str(ca[0]))
    address = secure_broker.http
    for path in ("/api/groups", "/api/messages?topic=orders&key=k", "/api/topics",
                 "/api/cluster", "/api/history", "/api/history?group=billing"):  # fmt: skip
        status, _, content = _request(address, "GET", path, host=address, tls=tls)
        assert status == 401, (path, content)
        assert CARD.encode() not in content
    status, headers, _ = _request(address, "GET", "/topics?x=1", host=address, tls=tls)
    assert status == 302
    location = urlsplit(headers["location"])
    assert (location.path, parse_qs(location.query)) == ("/login", {"next": ["/topics?x=1"]})
    for path in ("/cluster", "/cluster/body", "/charts"):
        assert _request(address, "GET", path, host=address, tls=tls)[0] == 302, path
    for path in ("/metrics", "/healthz", "/readyz", "/static/htmx.min.js", "/login",
                 "/static/uplot.min.js", "/static/charts.js"):  # fmt: skip
        assert _request(address, "GET", path, host=address, tls=tls)[0] == 200, path
    bearer = {"Authorization": f"Bearer {_token(secure_broker)}"}
    status, _, content = _request(address, "GET", "/api/messages?topic=orders&key=k",
                                  host=address, headers=bearer, tls=tls)  # fmt: skip
    assert status == 200
    assert CARD.encode() in content


# -- finding 6: what one client may hold ---------------------------------------------------


def test_a_slow_loris_client_is_cut_off_and_others_are_served(open_broker: BrokerProcess) -> None:
    address = open_broker.http
    with _connect(address) as idle, _connect(address) as slow:
        slow.sendall(f"GET / HTTP/1.1\r\nHost: {address}\r\n".encode())
        started = time.monotonic()
        closed = None
        while time.monotonic() - started < 6:  # a header line every 0.2 s, never the blank one
            try:
                slow.sendall(b"X-Slow: a\r\n")
            except OSError:
                closed = time.monotonic() - started
                break
            slow.settimeout(0.2)
            try:
                if slow.recv(4096) == b"":
                    closed = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = time.monotonic() - started
                break
        assert closed is not None, "a slow-loris connection was held 6 s (header timeout 1 s)"
        assert closed < 4
        assert _read_all(idle, limit=4) == b""  # an idle connection is closed too
    print(f"a slow-loris connection was closed {closed:.2f} s into its headers (timeout 1 s)")
    assert _request(address, "GET", "/healthz", host=address)[0] == 200


def test_a_body_that_never_arrives_is_cut_off(open_broker: BrokerProcess) -> None:
    address = open_broker.http
    with _connect(address) as sock:
        sock.sendall(
            f"POST /api/topics/orders/messages HTTP/1.1\r\nHost: {address}\r\n"
            "Cookie: pocketmq_csrf=x\r\nX-Pocketmq-Csrf: x\r\nContent-Type: application/json\r\n"
            'Content-Length: 1000\r\n\r\n{"body": '.encode()
        )
        started = time.monotonic()
        answer = _read_all(sock, limit=8)
        closed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert closed < 5  # body timeout 1 s, then at most 2 s of lingering
    print(f"a body that never came: 408 and closed after {closed:.2f} s (timeout 1 s)")


def test_one_address_cannot_take_every_connection(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    tls = ssl.create_default_context(cafile=str(ca[0]))
    address = secure_broker.http
    with ExitStack() as held:
        for _ in range(2):  # two per address (http_max_connections = 8)
            held.enter_context(_hold(address, "127.0.0.1", tls))
        with _connect(address, "127.0.0.1", tls) as third:
            assert _read_all(third, limit=5).startswith(b"HTTP/1.1 503")
        # other addresses still get in, up to the total
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            for _ in range(2):
                held.enter_context(_hold(address, source, tls))
        with _connect(address, "127.0.0.5", tls) as ninth:
            assert _read_all(ninth, limit=5).startswith(b"HTTP/1.1 503")
    assert _eventually_ok(address, tls)


def _hold(address: str, source: str, tls: ssl.SSLContext) -> socket.socket:
    """A connection that was let in (it answered a request) and stays open (keep-alive)."""
    sock = _connect(address, source, tls)
    sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\nok\n"):
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return sock


def _request_from(
    address: str, source: str, path: str, tls: ssl.SSLContext
) -> tuple[int, bytes, bytes]:
    with _connect(address, source, tls) as sock:
        request = f"GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        sock.sendall(request.encode())
        answer = _read_all(sock)
    return int(answer.split(b" ", 2)[1]), answer[:200], answer


def _eventually_ok(address: str, tls: ssl.SSLContext) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the server notices the closed sockets
        if _request_from(address, "127.0.0.1", "/healthz", tls)[0] == 200:
            return True
        time.sleep(0.1)
    return False


# -- sign-in: throttling, CSRF, redirects, the session cookie ------------------------------


@asynccontextmanager
async def _browser(
    broker: BrokerProcess, ca: tuple[Path, Path, Path], source: str = "127.0.0.1"
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    tls = ssl.create_default_context(cafile=str(ca[0]))
    connector = aiohttp.TCPConnector(ssl=tls, local_addr=(source, 0))
    async with aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.CookieJar(unsafe=True),
        timeout=aiohttp.ClientTimeout(total=30),
    ) as session:
        base = f"https://{broker.http}"
        async with session.get(f"{base}/login") as page:
            assert page.status == 200
        yield session, base


def _csrf(session: aiohttp.ClientSession) -> str:
    return next((c.value for c in session.cookie_jar if c.key == "pocketmq_csrf"), "")


async def _sign_in(
    session: aiohttp.ClientSession, base: str, user: str, secret: str, **extra: str
) -> aiohttp.ClientResponse:
    form = {"access_key": user, "secret_key": secret, "csrf": _csrf(session), **extra}
    async with session.post(f"{base}/login", data=form, allow_redirects=False) as reply:
        await reply.read()
        return reply


async def test_a_burst_of_wrong_passwords_is_throttled_but_not_for_others(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    async with _browser(secure_broker, ca, "127.0.0.7") as (attacker, base):
        started = time.monotonic()
        statuses = [(await _sign_in(attacker, base, "root", f"guess-{i}")).status
                    for i in range(40)]  # fmt: skip
        elapsed = time.monotonic() - started
        assert statuses[:10] == [401] * 10
        assert set(statuses[10:]) == {429}, statuses
        refused = await _sign_in(attacker, base, "root", "guess-x")
        assert int(refused.headers["Retry-After"]) >= 1
        # a throttled address gets no answer about the password, even a right one
        assert (await _sign_in(attacker, base, "root", "root-secret")).status == 429
    print(f"40 sign-ins from one address in {elapsed:.2f} s: 10 checked, 30 refused with 429")
    async with _browser(secure_broker, ca, "127.0.0.8") as (user, base):
        signed_in = await _sign_in(user, base, "root", "root-secret")
        assert signed_in.status == 302
        async with user.get(f"{base}/api/groups") as reply:
            assert reply.status == 200


async def test_the_sign_in_form_cannot_be_posted_by_another_site(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    tls = ssl.create_default_context(cafile=str(ca[0]))
    address = secure_broker.http
    form = b"access_key=root&secret_key=root-secret&next=/"
    urlencoded = {"Content-Type": "application/x-www-form-urlencoded"}
    # a cross-site form: no CSRF cookie of ours, no token field
    status, headers, _ = _request(address, "POST", "/login", host=address, headers=urlencoded,
                                  body=form, tls=tls)  # fmt: skip
    assert status == 403
    assert "pocketmq_session" not in headers.get("set-cookie", "")
    async with _browser(secure_broker, ca) as (session, base):
        evil = {"Origin": "https://evil.example"}
        data = {"access_key": "root", "secret_key": "root-secret", "csrf": _csrf(session)}
        async with session.post(f"{base}/login", data=data, headers=evil,
                                allow_redirects=False) as reply:  # fmt: skip
            assert reply.status == 403
        assert not [c for c in session.cookie_jar if c.key == "pocketmq_session"]


@pytest.mark.parametrize(
    ("target", "location"),
    [("/\t/evil.example", "/"), ("//evil.example", "/"), ("/\\evil.example", "/"),
     ("https://evil.example/", "/"), ("/\r\n/evil.example", "/"), ("/%2F%2Fevil", "/%2F%2Fevil"),
     ("/topics?x=1", "/topics?x=1"), ("javascript:alert(1)", "/")],
)  # fmt: skip
async def test_after_signing_in_a_browser_only_goes_to_a_page_of_this_dashboard(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path], target: str, location: str
) -> None:
    async with _browser(secure_broker, ca) as (session, base):
        reply = await _sign_in(session, base, "root", "root-secret", next=target)
        assert reply.status == 302
        assert reply.headers["Location"] == location


async def test_the_session_cookie_is_secure_expires_and_ends_with_the_users_secret(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    async with _browser(secure_broker, ca) as (session, base):
        reply = await _sign_in(session, base, "carol", "carol-secret")
        assert reply.status == 302
        cookie = reply.cookies["pocketmq_session"]
        assert cookie["secure"]
        assert cookie["httponly"]
        assert cookie["samesite"] == "Strict"
        assert cookie["max-age"] == str(12 * 3600)
        tls = ssl.create_default_context(cafile=str(ca[0]))
        address = secure_broker.http
        _, headers, _ = _request(address, "GET", "/login", host=address, tls=tls)
        assert "pocketmq_csrf=" in headers["set-cookie"]  # a first visit's CSRF cookie
        assert "Secure" in headers["set-cookie"]
        async with session.get(f"{base}/api/groups") as answer:
            assert answer.status == 200
        _cli(secure_broker, "user", "update", "carol", "--secret", "carol-rotated")

        async def refused() -> bool:
            async with session.get(f"{base}/api/groups") as answer:
                return answer.status == 401

        await eventually(refused, timeout=5)
        assert (await _sign_in(session, base, "carol", "carol-rotated")).status == 302
        async with session.get(f"{base}/api/groups") as answer:
            assert answer.status == 200
        _cli(secure_broker, "user", "delete", "carol")
        await eventually(refused, timeout=5)


# -- finding 9: what browsers are told ----------------------------------------------------


async def test_every_answer_forbids_framing_sniffing_and_inline_script(
    secure_broker: BrokerProcess, ca: tuple[Path, Path, Path]
) -> None:
    async with _browser(secure_broker, ca) as (session, base):
        assert (await _sign_in(session, base, "root", "root-secret")).status == 302
        for path in ("/", "/topics", "/groups/billing", "/groups/billing/dlq",
                     "/groups/billing/redrives", "/messages?topic=orders&key=k", "/login",
                     "/api/groups", "/static/htmx.min.js", "/healthz", "/nowhere", "/charts",
                     "/cluster", "/cluster/body", "/api/cluster", "/api/history",
                     "/static/charts.js", "/static/uplot.min.js"):  # fmt: skip
            async with session.get(base + path) as reply:
                page = await reply.text()
                headers = reply.headers
            csp = headers.get("Content-Security-Policy", "")
            assert "frame-ancestors 'none'" in csp, path
            assert "script-src 'self'" in csp, path
            assert "unsafe-inline" not in csp, path
            assert headers.get("X-Frame-Options") == "DENY", path
            assert headers.get("X-Content-Type-Options") == "nosniff", path
            assert headers.get("Referrer-Policy") == "same-origin", path
            if "text/html" in headers.get("Content-Type", ""):
                assert not re.search(r"<script(?![^>]*\bsrc=)", page), path
                assert not re.search(r"\son[a-z]+\s*=", page), path
                assert headers.get("Cache-Control") == "no-store", path


async def test_a_csv_export_never_hands_a_spreadsheet_a_formula(
    open_broker: BrokerProcess,
) -> None:
    address = open_broker.http
    async with Admin(servers=open_broker.address) as admin:
        await admin.create_topic("forms", queues=1)
        await admin.create_group("sheets", max_retries=0)
    payloads = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)",
                "\t=1", "\r=1", "plain"]  # fmt: skip
    async with Producer(servers=open_broker.address) as producer:
        for i, payload in enumerate(payloads):
            await producer.send(Message(topic="forms", body=payload.encode(), keys=(f"={i}",)))

    async def fail(messages: list[MessageView]) -> ConsumeStatus:
        raise RuntimeError("declined")

    async with PushConsumer("sheets", "forms", fail, servers=open_broker.address):

        async def all_dead() -> bool:
            status, _, body = _request(address, "GET", "/api/groups/sheets/dlq", host=address)
            return status == 200 and len(json.loads(body)["dead_letters"]) == len(payloads)

        await eventually(all_dead, timeout=20, interval=0.2)
    status, _, body = _request(address, "GET", "/groups/sheets/dlq.csv", host=address)
    assert status == 200
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert sorted(r["body"] for r in rows) == sorted(
        p if p == "plain" else "'" + p for p in payloads
    )
    assert all(r["keys"].startswith("'=") for r in rows)
