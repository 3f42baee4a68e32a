"""``pocketmq outbox ...`` against a SQLite file (the commands never talk to a broker)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pocketmq.cli import main
from pocketmq.client import Message
from pocketmq.reliability.backends.sql import SqlBackend
from pocketmq.reliability.stub import StubStatus


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/outbox.db"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["outbox", *args])
    return result.exit_code, result.stdout, result.stderr


def seed(url: str) -> list[str]:
    async def go() -> list[str]:
        backend = SqlBackend.from_url(url)
        try:
            async with backend.transaction() as tx:
                a = tx.add_message(Message(topic="orders", body=b"first", keys=("o-1",)))
                b = tx.add_message(Message(topic="orders", body=b"second"))
            assert a.message_id is not None
            assert b.message_id is not None
            return [a.message_id, b.message_id]
        finally:
            await backend.aclose()

    return asyncio.run(go())


def status_of(url: str, message_id: str) -> StubStatus:
    async def go() -> StubStatus:
        backend = SqlBackend.from_url(url)
        try:
            status = await backend.stub_status(message_id)
            assert status is not None
            return status
        finally:
            await backend.aclose()

    return asyncio.run(go())


def test_outbox_commands(url: str) -> None:
    code, out, _ = invoke("init-db", "--url", url)
    assert code == 0
    assert "message_stub" in out
    code, out, _ = invoke("list", "--url", url)
    assert (code, out.strip()) == (0, "no stubs")

    first, second = seed(url)
    code, out, _ = invoke("list", "--url", url, "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["message_id"] for r in rows} == {first, second}
    row = next(r for r in rows if r["message_id"] == first)
    assert (row["status"], row["send_count"], row["body"], row["keys"]) == (
        "UNCONFIRMED",
        0,
        "first",
        ["o-1"],
    )
    code, out, _ = invoke("list", "--url", url)
    assert code == 0
    assert first in out
    assert "UNCONFIRMED" in out

    code, out, _ = invoke("void", first, "--url", url)
    assert code == 0
    assert "VOID" in out
    assert status_of(url, first) is StubStatus.VOID
    code, out, _ = invoke("list", "--url", url, "--status", "void", "--json")
    assert [json.loads(line)["message_id"] for line in out.splitlines()] == [first]

    code, out, _ = invoke("resend", first, "--url", url)
    assert code == 0
    assert "due now" in out
    assert status_of(url, first) is StubStatus.UNCONFIRMED

    code, _, err = invoke("void", "NOPE", "--url", url)
    assert code == 1
    assert "no message stub with id 'NOPE'" in err

    code, out, _ = invoke("list", "--url", url, "--status", "MANUAL")
    assert (code, out.strip()) == (0, "no stubs")
    code, out, _ = invoke("prune-log", "--url", url, "--older-than", "7d")
    assert (code, out.strip()) == (0, "removed 0 message-log rows")
    code, _, err = invoke("prune-log", "--url", url, "--older-than", "soon")
    assert code == 2
    assert "45s, 30m, 12h, 7d" in err


def test_help_says_resend_does_not_send() -> None:
    code, out, _ = invoke("resend", "--help")
    assert code == 0
    assert "does not send" in out
    code, out, _ = invoke("--help")
    assert {"init-db", "list", "resend", "void", "prune-log"} <= set(out.split())
