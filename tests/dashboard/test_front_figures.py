"""The dashboard's front page states what the broker holds, in words that agree with their
numbers (issue 29 item 16: a broker holding 60 messages showed "Messages stored 0" after a
restart, a since-start counter labelled as a total, and "1 segments")."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from pocketmq.client import Admin, Message, Producer
from pocketmq.testing import BrokerProcess

HELD = 60


def _fact(page: str, element_id: str) -> str:
    match = re.search(rf'<dd id="{element_id}">(.*?)</dd>', page, re.S)
    assert match, f"no #{element_id} on the front page"
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


async def test_the_front_page_counts_the_messages_held_across_a_restart(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", grpc_port=None, http_port=0) as broker:
        async with Admin(servers=broker.address) as admin:
            await admin.create_topic("held", queues=4)
        async with Producer(servers=broker.address) as producer:
            for number in range(HELD):
                await producer.send(Message(topic="held", body=b"%d" % number))
        broker.restart()  # the since-start counters begin again at 0; the store does not
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{broker.http}/") as response,
        ):
            assert response.status == 200
            page = await response.text()
    assert _fact(page, "messages-held") == f"{HELD} messages in the topics' queues"
    assert _fact(page, "messages-put").startswith("0 messages")
    assert re.fullmatch(r"[\d,]+ bytes \(1 segment\)", _fact(page, "commit-log"))
    assert "1 segments" not in page
