"""The HTTP port's rules as units (docs/security.md, "Dashboard and HTTP API"): which host names
it answers to, the sign-in throttle on a fake clock, where a sign-in may lead, the connection cap
and the deadline on a client that stops reading. tests/security/test_web.py attacks a real
broker with the same rules."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pocketmq.server.http.dashboard.signin import safe_target
from pocketmq.server.http.dashboard.throttle import SignInThrottle
from pocketmq.server.http.dashboard.views import _inert
from pocketmq.server.http.hosts import HostPolicy
from pocketmq.server.http.limits import ConnectionCap, _Limited, address_key


def test_a_loopback_port_answers_to_loopback_names_and_configured_ones_only() -> None:
    hosts = HostPolicy.build("127.0.0.1", ["dash.example"], advertised="127.0.0.1")
    for host in ("127.0.0.1:5557", "localhost", "LocalHost.:80", "[::1]:5557", "dash.example",
                 "DASH.EXAMPLE:443"):  # fmt: skip
        assert hosts.allows(host), host
    for host in ("evil.example", "127.0.0.2", "10.0.0.1:5557", "localhost.evil.example", "",
                 "dash.example@evil.example", "dash.example/x", "[::2]", "a b"):  # fmt: skip
        assert not hosts.allows(host), host


def test_a_wildcard_port_answers_to_any_address_but_only_named_names() -> None:
    hosts = HostPolicy.build("0.0.0.0", advertised="broker-1.internal")
    for host in ("10.1.2.3:5557", "[2001:db8::1]:5557", "localhost", "broker-1.internal"):
        assert hosts.allows(host), host
    assert not hosts.allows("evil.example:5557")
    specific = HostPolicy.build("10.1.2.3")
    assert specific.allows("10.1.2.3:5557")
    assert not specific.allows("10.1.2.4:5557")
    assert not specific.allows("localhost:5557")


def test_an_origin_must_be_ours_at_the_port_the_request_came_to() -> None:
    hosts = HostPolicy.build("127.0.0.1", ["dash.example"])
    assert hosts.allows_origin("http://127.0.0.1:5557", "127.0.0.1:5557")
    assert hosts.allows_origin("http://localhost:5557", "127.0.0.1:5557")
    assert hosts.allows_origin("https://dash.example", "dash.example")  # 443 both
    assert not hosts.allows_origin("http://127.0.0.1:8080", "127.0.0.1:5557")
    assert not hosts.allows_origin("http://evil.example:5557", "evil.example:5557")
    assert not hosts.allows_origin("null", "127.0.0.1:5557")
    assert not hosts.allows_origin("file://", "127.0.0.1:5557")
    assert not hosts.allows_origin("http://127.0.0.1:99999", "127.0.0.1:5557")


def test_wrong_sign_ins_are_throttled_per_address_and_refill_over_time() -> None:
    now = [0.0]
    throttle = SignInThrottle(burst=3, rate=0.5, clock=lambda: now[0], max_addresses=2)
    for _ in range(3):
        assert throttle.wait("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") == pytest.approx(2.0)
    assert throttle.wait("10.0.0.2") == 0  # another address is not held up
    assert SignInThrottle.retry_after(throttle.wait("10.0.0.1")) == "2"
    now[0] += 2.0
    assert throttle.wait("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.wait("10.0.0.1") > 0
    throttle.failed("10.0.0.2")
    throttle.failed("10.0.0.3")  # the table keeps 2 addresses: the least recently wrong goes
    assert throttle.wait("10.0.0.1") == 0


@pytest.mark.parametrize(
    ("target", "safe"),
    [("/", "/"), ("/groups/a?page=2", "/groups/a?page=2"), ("", "/"), ("//evil.example", "/"),
     ("/\t/evil.example", "/"), ("/\\evil.example", "/"), ("/\n/evil", "/"), ("/ /x", "/"),
     ("http://evil.example", "/"), ("/\u2215\u2215evil", "/"), ("/%5Cevil", "/%5Cevil")],
)  # fmt: skip
def test_a_sign_in_only_leads_to_a_path_of_the_dashboard(target: str, safe: str) -> None:
    assert safe_target(target) == safe


@pytest.mark.parametrize(
    ("cell", "shown"),
    [("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@A1", "'@A1"), ("\t=1", "'\t=1"),
     ("\r=1", "'\r=1"), ("plain", "plain"), ("a=1", "a=1"), ("", "")],
)  # fmt: skip
def test_csv_cells_that_a_spreadsheet_would_run_are_made_text(cell: str, shown: str) -> None:
    assert _inert(cell) == shown


def test_connections_are_counted_per_address_and_ipv6_per_64() -> None:
    assert address_key(("2001:db8::1", 5, 0, 0)) == address_key(("2001:db8::ffff", 6, 0, 0))
    assert address_key(("::ffff:10.0.0.1", 5, 0, 0)) == "10.0.0.1"
    cap = ConnectionCap(total=3, per_address=2)
    assert cap.admit("a")
    assert cap.admit("a")
    assert not cap.admit("a")
    assert cap.admit("b")
    assert not cap.admit("c")  # the total
    cap.release("a")
    assert cap.admit("c")


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = asyncio.Event()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted.set()


class _Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[str] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


async def test_a_client_that_stops_reading_an_answer_is_dropped() -> None:
    cap = ConnectionCap(total=1, per_address=1)
    inner, transport = _Inner(), _Transport()
    limited = _Limited(inner, cap, write_timeout=0.05)
    limited.connection_made(transport)
    limited.pause_writing()
    limited.resume_writing()  # it read again in time
    await asyncio.sleep(0.1)
    assert not transport.aborted.is_set()
    limited.pause_writing()
    await asyncio.wait_for(transport.aborted.wait(), 2)
    limited.connection_lost(None)
    assert inner.events == ["made", "pause", "resume", "pause", "lost"]
    assert cap.open == 0
    refused_inner, refused = _Inner(), _Transport()
    assert cap.admit("x")  # the only slot is taken
    _Limited(refused_inner, cap, write_timeout=1).connection_made(refused)
    assert refused.written.startswith(b"HTTP/1.1 503")
    assert refused.closed
    assert refused_inner.events == []
