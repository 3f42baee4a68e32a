"""The name server's table for replicated groups: which broker is a group's master, what a route
lists, and what happens when a broker's connection closes (docs/replication.md §5, §6)."""

from __future__ import annotations

import pytest

from pocketmq.errors import ServiceUnavailableError, TopicNotFoundError
from pocketmq.protocol import structs as w
from pocketmq.server.namesrv.routes import DEPARTED_MEMORY, RouteTable

TOPIC = [w.TopicSpec("T", 2, "normal", 6)]


def broker(broker_id: int, role: str, epoch: int, name: str = "g1") -> w.BrokerAddress:
    port = 10000 + broker_id
    return w.BrokerAddress(
        name, f"127.0.0.1:{port}", "", broker_id, role, epoch, f"127.0.0.1:{port + 1}"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_master_is_listed_first_and_its_queues_are_writable() -> None:
    table = RouteTable()
    table.register(broker(1, "slave", 1), TOPIC)
    table.register(broker(0, "master", 1), TOPIC)
    route = table.route("T")
    assert [b.broker_id for b in route.brokers] == [0, 1]
    assert {q.perm for q in route.queues} == {6}
    assert len(route.queues) == 2  # one group: its queues once, not once per replica


def test_without_a_master_the_slaves_serve_the_queues_read_only() -> None:
    table = RouteTable()
    table.register(broker(1, "slave", 1), TOPIC)
    route = table.route("T")
    assert [b.broker_id for b in route.brokers] == [1]
    assert {q.perm for q in route.queues} == {4}


def test_the_master_with_the_newest_epoch_wins_and_the_stale_one_is_told() -> None:
    table = RouteTable()
    table.register(broker(1, "master", 2), TOPIC)  # promoted
    answer = table.register(broker(0, "master", 1), TOPIC)  # the old master, back
    assert answer.master_address == "127.0.0.1:10001"
    assert answer.master_epoch == 2
    assert answer.master_ha_address == "127.0.0.1:10002"
    route = table.route("T")
    assert route.brokers[0].broker_id == 1
    assert {q.perm for q in route.queues} == {6}


def test_a_stale_master_alone_with_the_topic_gets_no_route() -> None:
    table = RouteTable()
    table.register(broker(1, "master", 2), [])  # the new master does not have the topic yet
    table.register(broker(0, "master", 1), TOPIC)
    with pytest.raises(TopicNotFoundError):
        table.route("T")


def test_a_closed_connection_drops_only_the_brokers_it_registered() -> None:
    table = RouteTable()
    master_link, slave_link = object(), object()
    table.register(broker(0, "master", 1), TOPIC, master_link)
    table.register(broker(1, "slave", 1), TOPIC, slave_link)
    assert table.disconnected(master_link) == [("g1", 0)]
    assert table.master("g1") is None
    assert {q.perm for q in table.route("T").queues} == {4}
    assert table.disconnected(object()) == []
    assert [b.broker_id for b in table.brokers()] == [1]


def test_a_registration_over_a_new_connection_survives_the_old_ones_close() -> None:
    table = RouteTable()
    old, new = object(), object()
    table.register(broker(0, "master", 1), TOPIC, old)
    table.register(broker(0, "master", 1), TOPIC, new)  # reconnected and registered again
    assert table.disconnected(old) == []
    assert table.master("g1") is not None


def test_silent_brokers_expire() -> None:
    clock = Clock()
    table = RouteTable(expiry=120, clock=clock)
    table.register(broker(0, "master", 1), TOPIC)
    clock.now = 100
    table.register(broker(1, "slave", 1), TOPIC)
    clock.now = 130
    assert table.expire() == [("g1", 0)]
    assert [b.broker_id for b in table.brokers()] == [1]


# -- what a client is told when no live broker serves a topic (issue 29 item 15) --------------


def test_a_topic_only_gone_brokers_held_is_unreachable_not_missing() -> None:
    clock = Clock()
    table = RouteTable(clock=clock)
    link = object()
    table.register(broker(0, "master", 1), TOPIC, link)
    clock.now = 40
    table.disconnected(link)
    clock.now = 52
    with pytest.raises(ServiceUnavailableError) as refused:
        table.route("T")
    text = str(refused.value)
    assert "topic 'T' is on no reachable broker" in text
    assert "g1/0 at 127.0.0.1:10000 went away 12 s ago (its connection closed)" in text
    assert "does not exist" not in text
    with pytest.raises(ServiceUnavailableError, match=r"no broker is registered .* now: the last"):
        table.route("other")  # no topic held by a gone broker, but no broker at all either
    table.register(broker(1, "master", 1, name="g2"), [])
    with pytest.raises(TopicNotFoundError, match="'other' does not exist on any broker"):
        table.route("other")  # a name no broker held is still a missing topic


def test_the_error_says_how_each_broker_left() -> None:
    clock = Clock()
    table = RouteTable(expiry=120, clock=clock)
    table.register(broker(0, "master", 1), TOPIC)
    table.register(broker(0, "master", 1, name="g2"), TOPIC)
    table.unregister("g1", 0)
    clock.now = 121
    with pytest.raises(ServiceUnavailableError) as refused:
        table.route("T")
    assert "g1/0 at 127.0.0.1:10000 went away 121 s ago (it shut down)" in str(refused.value)
    assert "g2/0 at 127.0.0.1:10000 went away 0 s ago (it was silent for 120 s)" in str(
        refused.value
    )


def test_a_broker_that_comes_back_serves_the_topic_again_and_is_forgotten_a_day_on() -> None:
    clock = Clock()
    table = RouteTable(clock=clock)
    table.register(broker(0, "master", 1), TOPIC)
    table.unregister("g1", 0)
    table.register(broker(0, "master", 1), TOPIC)
    assert table.route("T").brokers
    table.unregister("g1", 0)
    table.register(broker(5, "master", 1, name="g9"), [])  # someone else is here, without T
    clock.now = DEPARTED_MEMORY + 1
    table.register(broker(5, "master", 1, name="g9"), [])
    table.expire()
    with pytest.raises(TopicNotFoundError):
        table.route("T")


def test_a_name_server_no_broker_registered_with_says_so() -> None:
    with pytest.raises(
        ServiceUnavailableError, match="no broker is registered with this name server yet"
    ):
        RouteTable().route("T")


def test_one_master_per_group_is_listed_the_older_one_as_fenced() -> None:
    """docs/replication.md §9 (issue 29, 5d): while an old master's registration lingers (a
    frozen process keeps its connection open), listings show one master per group."""
    table = RouteTable()
    table.register(broker(0, "master", 1), TOPIC)  # frozen, still registered
    table.register(broker(1, "master", 2), TOPIC)  # elected
    table.register(broker(2, "slave", 2), TOPIC)
    roles = {b.broker_id: b.role for b in table.brokers()}
    assert roles == {0: "fenced", 1: "master", 2: "slave"}
    assert [(b.broker_id, b.role) for b in table.route("T").brokers] == [
        (1, "master"),
        (2, "slave"),
        (0, "fenced"),
    ]


def test_a_leased_master_is_no_master_past_its_lease() -> None:
    """A master on a controller lease says how long it is one (issue 29 item 3): frozen, it
    is not listed as master once that time is up, and its group's slaves serve reads."""
    clock = Clock()
    table = RouteTable(clock=clock)
    table.register(broker(0, "master", 1), TOPIC, lease_ms=4000)
    table.register(broker(1, "slave", 1), TOPIC)
    assert table.master("g1") is not None
    clock.now = 3.9
    assert {q.perm for q in table.route("T").queues} == {6}
    clock.now = 4.1  # no registration since: the lease is over
    assert table.master("g1") is None
    route = table.route("T")
    assert [(b.broker_id, b.role) for b in route.brokers] == [(1, "slave"), (0, "fenced")]
    assert {q.perm for q in route.queues} == {4}
    table.register(broker(0, "master", 1), TOPIC, lease_ms=4000)  # renewed
    assert table.master("g1") is not None
