"""The dashboard with authentication and authorization on (docs/security.md, "Dashboard and HTTP
API"): users sign in with their keys, and what a signed-in normal user sees and changes follows
its ACL rules; a super user may do everything."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from pocketmq.client import Admin, ClientConfig
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER

pytestmark = pytest.mark.integration

ROOT = ClientConfig(access_key="root", secret_key="root-secret")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None, http_port=0,
                       extra_args=("--authentication", "--authorization")) as process:  # fmt: skip
        data = str(process.data_dir / "data")
        for args in (
            ["user", "create", "root", "--secret", "root-secret", "--type", "super"],
            ["user", "create", "alice", "--secret", "alice-secret"],
            ["acl", "grant", "alice", "Group:billing", "--actions", "Get"],
        ):
            command = [sys.executable, "-m", "pocketmq", *args, "--data-dir", data]
            subprocess.run(command, check=True, capture_output=True, timeout=60)
        time.sleep(1.1)
        yield process


@pytest.fixture
async def groups(broker: BrokerProcess) -> str:
    async with Admin(servers=broker.address, client=ROOT) as admin:
        await admin.create_group("billing")
        await admin.create_group("hr")
    return f"http://{broker.http}"


async def _signed_in(base: str, access_key: str, secret: str) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(f"{base}/login") as page:  # sets the CSRF cookie
        assert page.status == 200
        assert 'name="access_key"' in await page.text()
    csrf = _csrf(session)["X-Pocketmq-Csrf"]  # the form carries it (sign-in CSRF)
    form = {"access_key": access_key, "secret_key": secret, "next": "/api/groups/billing",
            "csrf": csrf}  # fmt: skip
    async with session.post(f"{base}/login", data=form, allow_redirects=False) as reply:
        assert reply.status == 302, await reply.text()
    async with session.get(f"{base}/api/groups/billing") as reply:
        assert reply.status == 200
    return session


def _csrf(session: aiohttp.ClientSession) -> dict[str, str]:
    token = next(c.value for c in session.cookie_jar if c.key == "pocketmq_csrf")
    return {"X-Pocketmq-Csrf": token}


async def test_a_normal_user_sees_and_changes_only_what_its_rules_allow(groups: str) -> None:
    base = groups
    alice = await _signed_in(base, "alice", "alice-secret")
    async with alice:
        async with alice.get(f"{base}/api/groups/billing") as reply:
            assert reply.status == 200
        async with alice.get(f"{base}/api/groups/hr") as reply:
            assert reply.status == 403
            assert "Get" in (await reply.json())["error"]
        async with alice.get(f"{base}/api/groups") as reply:  # the front page: Cluster Get
            assert reply.status == 403
        for path in ("/api/cluster", "/api/history", "/api/history?group=hr"):
            async with alice.get(f"{base}{path}") as reply:  # the cluster, the broker's charts
                assert reply.status == 403, path
        async with alice.get(f"{base}/api/history?group=billing") as reply:  # her group's
            assert reply.status == 200
        async with alice.post(f"{base}/api/groups/billing/policy", json={"max_retries": 3},
                              headers=_csrf(alice)) as reply:  # fmt: skip
            assert reply.status == 403
            assert "Update" in (await reply.json())["error"]
    root = await _signed_in(base, "root", "root-secret")
    async with root:
        async with root.post(f"{base}/api/groups/billing/policy", json={"max_retries": 3},
                             headers=_csrf(root)) as reply:  # fmt: skip
            assert reply.status == 200, await reply.text()
        async with root.get(f"{base}/api/groups") as reply:
            assert reply.status == 200


async def test_wrong_keys_do_not_sign_in(groups: str) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        async with session.get(f"{groups}/login") as page:  # the form's CSRF token
            assert page.status == 200
        csrf = _csrf(session)["X-Pocketmq-Csrf"]
        for form in ({"access_key": "alice", "secret_key": "wrong"},
                     {"access_key": "mallory", "secret_key": "alice-secret"},
                     {"token": "not-the-token"}):  # fmt: skip
            form = {**form, "csrf": csrf}
            async with session.post(f"{groups}/login", data=form, allow_redirects=False) as reply:
                assert reply.status == 401
                assert "not right" in await reply.text()
        assert not [c for c in session.cookie_jar if c.key == "pocketmq_session"]
