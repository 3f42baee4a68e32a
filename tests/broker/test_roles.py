"""The role rules (broker/roles.py, docs/replication.md §5-§6), written once, on the front."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker import Broker, BrokerConfig, GroupConfig, InboundMessage
from pocketmq.broker.front import BrokerFront
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import InvalidReceiptHandleError, ServiceUnavailableError
from pocketmq.model.messages import SendBatch


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path), broker_name="b1"))
    broker.create_topic("orders", queues=1)
    broker.create_group(GroupConfig(name="g"))
    yield broker
    await broker.close()


# every operation that writes what a master owns, called with arguments that would be valid
MASTER_ONLY: dict[str, Callable[[Broker], Any]] = {
    "send_back": lambda b: b.send_back("g", 0, "id"),
    "dead_letter": lambda b: b.dead_letter("g", None, reason="r"),
    "forward_to_dead_letter": lambda b: b.forward_to_dead_letter("g", "orders", "handle"),
    "redrive": lambda b: b.redrive("g", [0]),
    "create_topic": lambda b: b.create_topic("other"),
    "update_topic": lambda b: b.update_topic("orders", queues=2),
    "delete_topic": lambda b: b.delete_topic("orders"),
    "create_group": lambda b: b.create_group(GroupConfig(name="g2")),
    "delete_group": lambda b: b.delete_group("g"),
    "reset_offsets": lambda b: b.reset_offsets("g", "orders", 0),
    "end_transaction": lambda b: b.end_transaction("p", "m", "t", commit=True),
}

POPS: dict[str, Callable[[Broker], Any]] = {
    "pop": lambda b: b.pop("g", "orders"),
    "pop_now": lambda b: b.pop_now("g", "orders"),
    "ack": lambda b: b.ack("g", "orders", "handle"),
    "change_invisible": lambda b: b.change_invisible("g", "orders", "handle", 5.0),
}


async def _call(operation: Callable[[Broker], Any], broker: Broker) -> Any:
    result = operation(broker)
    if isinstance(result, Awaitable):
        return await result
    return result


@pytest.mark.parametrize("name", sorted(MASTER_ONLY))
async def test_a_slave_refuses_what_a_master_owns_and_names_the_operation(
    broker: Broker, name: str
) -> None:
    broker.replication.role = Role.SLAVE
    with pytest.raises(ServiceUnavailableError, match=r"'b1' is a slave: .*master"):
        await _call(MASTER_ONLY[name], broker)


@pytest.mark.parametrize("name", sorted(MASTER_ONLY) + sorted(POPS))
async def test_a_fenced_master_refuses_writes_and_pops(broker: Broker, name: str) -> None:
    broker.replication.fence = "fenced: waiting for the name server"
    operations = MASTER_ONLY | POPS
    with pytest.raises(ServiceUnavailableError, match="waiting for the name server"):
        await _call(operations[name], broker)


async def test_sends_follow_the_same_rule_as_the_other_writes(broker: Broker) -> None:
    message = InboundMessage(topic="orders", body=b"x")
    broker.replication.role = Role.SLAVE
    outcomes = broker.send_now_many([_batch(message)])
    assert isinstance(outcomes[0], ServiceUnavailableError)
    assert "'b1' is a slave: send to its master" in str(outcomes[0])
    broker.replication.role = Role.MASTER
    broker.replication.fence = "fenced for the test"
    outcomes = broker.send_now_many([_batch(message)])
    assert isinstance(outcomes[0], ServiceUnavailableError)
    assert "fenced for the test" in str(outcomes[0])


@pytest.mark.parametrize("name", sorted(POPS))
async def test_a_slave_pops_only_while_its_master_is_away(broker: Broker, name: str) -> None:
    broker.replication.role = Role.SLAVE
    broker.replication.master_address = "127.0.0.1:1"
    with pytest.raises(ServiceUnavailableError, match="its master is up: pop from the master"):
        await _call(POPS[name], broker)
    broker.replication.master_address = ""
    with contextlib.suppress(InvalidReceiptHandleError):  # a made-up handle: past the role rule
        await _call(POPS[name], broker)
    assert broker.replication.acting, "the slave acts for its absent master"


def test_every_guarded_operation_is_a_method_of_the_front_with_its_rule() -> None:
    rules = {name: "master only" for name in MASTER_ONLY} | {
        name: "pops while the master is away" for name in POPS
    }
    for name, rule in rules.items():
        method = getattr(BrokerFront, name)
        assert inspect.isfunction(method), name
        assert getattr(method, "role_rule", None) == rule, name
    assert getattr(BrokerFront.send_now_many, "role_rule", None) is None  # its rule: SendPath


def test_the_front_has_no_operation_bound_at_runtime(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        bound = [n for n, v in vars(broker).items() if callable(v) and hasattr(BrokerFront, n)]
        assert bound == []
    finally:
        broker.store.close()


def test_an_operation_under_no_rule_is_the_current_concepts_own_method(tmp_path: Path) -> None:
    """``handed`` hands out the concept's bound method, read per access: a concept replaced
    (as a promotion may rebuild one) is the one called, and no forwarding frame is left."""
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        first = broker.sending
        assert broker.send_now_many.__self__ is first
        assert broker.send_now_many.__func__ is type(first).send_now_many
        assert BrokerFront.send_now_many.__doc__ == type(first).send_now_many.__doc__
        replacement = type(first).__new__(type(first))
        broker.sending = replacement
        assert broker.send_now_many.__self__ is replacement
        assert broker.pull_now.__self__ is broker.pulls
    finally:
        broker.store.close()


def _batch(message: InboundMessage) -> SendBatch:
    return SendBatch(messages=[message])
