"""A message's attempt history reads oldest first even when attempts share a millisecond."""

from __future__ import annotations

from pathlib import Path

from pocketmq import properties as props
from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage


async def test_the_last_failure_comes_before_its_dead_lettering_in_the_same_millisecond(
    tmp_path: Path,
) -> None:
    frozen = 1_700_000_000.0  # every record carries the same time: only written order decides
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)), clock=lambda: frozen)
    await broker.start()
    try:
        broker.create_topic("orders", queues=1)
        broker.create_group(GroupConfig(name="g"))
        [sent] = await broker.send([InboundMessage("orders", b"x", {props.MESSAGE_ID: "M1"})])
        outcome = await broker.send_back(
            "g", sent.physical_offset, "M1", max_reconsume_times=0, outcome="EXCEPTION"
        )
        assert outcome == "dlq"
        history = broker.message_history("M1")
        assert [a.outcome for a in history] == ["EXCEPTION", "DLQ"]
    finally:
        await broker.close()
