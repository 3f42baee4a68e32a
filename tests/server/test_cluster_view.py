"""The cluster view's fetching and summing (server/http/cluster.py; docs/operations.md, "Cluster
view"), with fake peers: a replicated group's figures counted once, a peer that refuses or does
not answer shown with the reason while the others are shown, all peers asked at once within the
timeout, one refresh per cache period whoever asks, a broker the name server drops kept on the
page as not registered, and a lost name server leaving the brokers known before."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pocketmq.errors import BrokerConnectionError, BrokerError
from pocketmq.protocol import structs as w
from pocketmq.server.http.cluster import FORGET_AFTER, ClusterView


def figures(name: str, broker_id: int, role: str, *, epoch: int = 1, log_end: int = 100,
            groups: tuple[tuple[str, int], ...] = (), topics: tuple[str, ...] = ()
            ) -> w.BrokerOverviewResponse:  # fmt: skip
    return w.BrokerOverviewResponse(
        broker_name=name,
        broker_id=broker_id,
        version="test",
        uptime_seconds=1.0,
        http_address=f"{name}-{broker_id}:80",
        replication={"role": role, "epoch": epoch, "log_end": log_end, "controller": {}},
        store={"disk_free_bytes": 1, "disk_total_bytes": 2},
        messages_in=0,
        messages_out=0,
        bytes_in=0,
        bytes_out=0,
        groups=[w.GroupFigures(g, lag, 1, 2, 0, 1, list(topics)) for g, lag in groups],
        topics=[w.TopicFigures(t, "normal", 4, 10, 10, 1.5) for t in topics],
    )


class FakePeers:
    """Addresses -> what their BROKER_OVERVIEW does: figures, an exception, or hang."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.calls: list[str] = []

    def link(self, address: str) -> Any:
        peers = self

        class Link:
            async def call(self, code: int, body: Any, reply: Any) -> Any:
                peers.calls.append(address)
                answer = peers.answers[address]
                if answer == "hang":
                    await asyncio.sleep(3600)
                if isinstance(answer, BaseException):
                    raise answer
                return answer

            async def close(self) -> None:
                pass

        return Link()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _address(name: str, broker_id: int, role: str = "master") -> w.BrokerAddress:
    return w.BrokerAddress(name, f"{name}-{broker_id}:1", "", broker_id, role, 1, "", "")


def _view(peers: FakePeers, listed: list[Any], own: w.BrokerOverviewResponse,
          clock: Clock | None = None, **options: Any) -> ClusterView:  # fmt: skip
    clock = clock or Clock()

    async def members() -> list[w.BrokerAddress]:
        answer = listed[0]
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)

    return ClusterView(
        members,
        lambda: own,
        lambda: (own.broker_name, own.broker_id),
        peers.link,
        namesrv="ns:9876",
        clock=clock,
        wall=clock,
        **options,
    )


async def test_a_replicated_group_counts_once_and_groups_sum_over_broker_groups() -> None:
    peers = FakePeers()
    peers.answers["g1-1:1"] = figures("g1", 1, "slave", groups=(("billing", 10),), topics=("T",))
    peers.answers["g2-0:1"] = figures("g2", 0, "master", groups=(("billing", 5),), topics=("T",))
    own = figures("g1", 0, "master", groups=(("billing", 10),), topics=("T",))
    listed = [[_address("g1", 0), _address("g1", 1, "slave"), _address("g2", 0)]]
    snapshot = await _view(peers, listed, own).snapshot()
    assert sorted(peers.calls) == ["g1-1:1", "g2-0:1"]  # never itself over the network
    assert [(b.group, b.broker_id, b.role, b.error) for b in snapshot.brokers] == [
        ("g1", 0, "master", ""),
        ("g1", 1, "slave", ""),
        ("g2", 0, "master", ""),
    ]
    (billing,) = snapshot.groups
    assert (billing.lag, billing.dlq_depth, billing.retry_backlog) == (15, 2, 4)
    assert billing.brokers == ["g1", "g2"]
    (topic,) = snapshot.topics
    assert (topic.queues, topic.stored, topic.rate_in) == (8, 20, 3.0)


async def test_a_peer_that_refuses_or_hangs_is_shown_with_the_reason_within_the_timeout() -> None:
    peers = FakePeers()
    peers.answers["g1-1:1"] = BrokerConnectionError("broker g1-1:1 unreachable: refused")
    peers.answers["g2-0:1"] = "hang"
    peers.answers["g3-0:1"] = "hang"
    peers.answers["g4-0:1"] = figures("g4", 0, "master")
    own = figures("g1", 0, "master")
    listed = [[_address("g1", 0), _address("g1", 1, "slave"), _address("g2", 0),
               _address("g3", 0), _address("g4", 0)]]  # fmt: skip
    started = time.monotonic()
    snapshot = await _view(peers, listed, own, timeout=0.3).snapshot()
    took = time.monotonic() - started
    errors = {(b.group, b.broker_id): b.error for b in snapshot.brokers}
    assert errors == {
        ("g1", 0): "",
        ("g1", 1): "broker g1-1:1 unreachable: refused",
        ("g2", 0): "no answer within 0.3 s",
        ("g3", 0): "no answer within 0.3 s",
        ("g4", 0): "",
    }
    assert took < 0.9, took  # the two hanging peers were waited for at once


async def test_page_views_within_the_cache_period_share_one_refresh() -> None:
    peers = FakePeers()
    peers.answers["g2-0:1"] = figures("g2", 0, "master")
    clock = Clock()
    view = _view(peers, [[_address("g1", 0), _address("g2", 0)]], figures("g1", 0, "master"),
                 clock, cache_seconds=2.0)  # fmt: skip
    first, second = await asyncio.gather(view.snapshot(), view.snapshot())
    assert first is second
    clock.now += 1.9
    assert await view.snapshot() is first
    assert peers.calls == ["g2-0:1"]
    clock.now += 0.2
    assert await view.snapshot() is not first
    assert peers.calls == ["g2-0:1", "g2-0:1"]


async def test_a_broker_the_name_server_drops_stays_as_not_registered_for_an_hour() -> None:
    peers = FakePeers()
    peers.answers["g1-1:1"] = BrokerConnectionError("broker g1-1:1 unreachable: refused")
    clock = Clock()
    listed: list[Any] = [[_address("g1", 0), _address("g1", 1, "slave")]]
    own = figures("g1", 0, "master")
    view = _view(peers, listed, own, clock, cache_seconds=0)
    await view.snapshot()
    listed[0] = [_address("g1", 0)]  # the killed broker's registration ended
    clock.now += 5
    gone = (await view.snapshot()).brokers[1]
    assert (gone.broker_id, gone.gone_since, gone.role) == (1, 1000.0, "slave")
    assert "refused" in gone.error  # still asked: a broker alive but unregistered shows so
    clock.now += FORGET_AFTER
    assert [b.broker_id for b in (await view.snapshot()).brokers] == [0]


async def test_without_its_name_server_the_page_shows_the_brokers_known_before() -> None:
    peers = FakePeers()
    peers.answers["g2-0:1"] = figures("g2", 0, "master")
    listed: list[Any] = [[_address("g1", 0), _address("g2", 0)]]
    view = _view(peers, listed, figures("g1", 0, "master"), cache_seconds=0)
    await view.snapshot()
    listed[0] = BrokerConnectionError("name server ns:9876 unreachable: refused")
    snapshot = await view.snapshot()
    assert "unreachable" in snapshot.namesrv_error
    assert [(b.group, b.error, b.gone_since) for b in snapshot.brokers] == [
        ("g1", "", 0.0),
        ("g2", "", 0.0),
    ]


async def test_a_group_without_an_answering_master_counts_its_longest_slave() -> None:
    peers = FakePeers()
    peers.answers["g1-0:1"] = BrokerConnectionError("broker g1-0:1 unreachable: refused")
    peers.answers["g1-2:1"] = figures("g1", 2, "slave", log_end=90, groups=(("b", 1),))
    own = figures("g1", 1, "slave", log_end=100, groups=(("b", 7),))
    listed = [[_address("g1", 0), _address("g1", 1, "slave"), _address("g1", 2, "slave")]]
    snapshot = await _view(peers, listed, own).snapshot()
    assert [(g.name, g.lag) for g in snapshot.groups] == [("b", 7)]


@pytest.mark.parametrize("error", [RuntimeError("bug"), BrokerError("refused", code=1)])
async def test_no_error_of_one_broker_breaks_the_page(error: Exception) -> None:
    peers = FakePeers()
    peers.answers["g2-0:1"] = error
    snapshot = await _view(
        peers, [[_address("g1", 0), _address("g2", 0)]], figures("g1", 0, "master")
    ).snapshot()
    assert snapshot.brokers[1].figures is None
    assert snapshot.brokers[1].error
