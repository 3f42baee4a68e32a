"""The cluster as one broker's dashboard sees it (docs/operations.md, "Cluster view").

Every broker serves ``/cluster``: it asks its name server for every broker (``LIST_BROKERS``),
then each of them for its figures (``BROKER_OVERVIEW``, over the native port with this broker's
peer credentials, server/peers.py) — all at once, each within a short timeout — and builds its
own row in-process. The result is cached for a few seconds and shared by every page view and
API call meanwhile, so a page refreshing every two seconds in ten browsers still costs each
peer one small request per cache period.

A broker that cannot be reached is shown with the reason and never breaks the page. A broker the
name server stops listing (a killed broker's registration ends with its connection) stays on the
page as *not registered* for :data:`FORGET_AFTER`, and is still asked for its figures meanwhile:
an operator sees a dead broker as dead, not as absent.

Groups and topics are summed over the cluster's broker groups, each counted once: a replicated
group's figures come from its master (the highest epoch) or, when no master answers, from the
member whose log is longest (its slaves hold the same queues; adding them would count every
message twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pocketmq.errors import PocketMQError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.peers import PeerLink

__all__ = [
    "FORGET_AFTER",
    "MAX_BROKERS",
    "BrokerRow",
    "ClusterSnapshot",
    "ClusterView",
    "GroupRow",
    "TopicRow",
]

log = logging.getLogger("pocketmq.server.http")

CACHE_SECONDS: Final = 2.0
"""How long one set of fetches answers every page view and API call."""
FETCH_TIMEOUT: Final = 1.5
"""How long a peer has to answer before it is shown unreachable."""
FORGET_AFTER: Final = 3600.0
"""How long a broker the name server no longer lists stays on the page."""
MAX_BROKERS: Final = 256
"""Brokers asked at most per refresh (the rest are listed without figures)."""


@dataclass(slots=True)
class BrokerRow:
    """One broker: where it is, what the name server says of it, its own figures when it
    answered, or why not."""

    group: str
    broker_id: int
    address: str
    http_address: str
    role: str  # its own word when it answered, else the name server's
    epoch: int
    figures: w.BrokerOverviewResponse | None = None
    error: str = ""  # why there are no figures
    gone_since: float = 0.0  # wall time the name server stopped listing it; 0: listed
    this: bool = False  # the broker serving the page

    @property
    def replication(self) -> dict[str, Any]:
        """Its replication status (empty without figures)."""
        return dict(self.figures.replication) if self.figures is not None else {}

    @property
    def controller(self) -> dict[str, Any]:
        """What its failover controller says (empty without one)."""
        return dict(self.replication.get("controller") or {})


@dataclass(slots=True)
class GroupRow:
    """A consumer group summed over the broker groups holding its topics."""

    name: str
    lag: int = 0
    dlq_depth: int = 0
    retry_backlog: int = 0
    inflight: int = 0
    consumers: int = 0  # the most on one broker group (the same clients join each)
    brokers: list[str] = field(default_factory=list)


@dataclass(slots=True)
class TopicRow:
    """A topic summed over the broker groups holding it."""

    name: str
    topic_type: str
    queues: int = 0
    stored: int = 0
    messages_in: int = 0
    rate_in: float = 0.0
    rate_known: bool = True
    brokers: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ClusterSnapshot:
    """One refresh: every broker, grouped; the cluster's groups and topics; when it was taken."""

    taken_at: float  # wall time
    namesrv: str
    namesrv_error: str
    brokers: list[BrokerRow]
    groups: list[GroupRow]
    topics: list[TopicRow]

    def broker_groups(self) -> list[tuple[str, list[BrokerRow]]]:
        """The brokers by group (sorted), each group's members by id."""
        out: dict[str, list[BrokerRow]] = {}
        for row in self.brokers:
            out.setdefault(row.group, []).append(row)
        return [
            (name, sorted(rows, key=lambda r: r.broker_id)) for name, rows in sorted(out.items())
        ]


Members = Callable[[], Awaitable[list[w.BrokerAddress]]]


class ClusterView:
    """Fetches, caches and sums the cluster's figures (module doc).

    ``members`` lists the brokers (the name server's ``LIST_BROKERS``; it raises when the name
    server cannot be reached), ``own`` builds this broker's figures in-process, ``own_key`` is
    this broker's ``(group, id)``, ``link`` opens a :class:`PeerLink` to an address."""

    def __init__(
        self,
        members: Members,
        own: Callable[[], w.BrokerOverviewResponse],
        own_key: Callable[[], tuple[str, int]],
        link: Callable[[str], PeerLink],
        *,
        namesrv: str = "",
        cache_seconds: float = CACHE_SECONDS,
        timeout: float = FETCH_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._members = members
        self._own = own
        self._own_key = own_key
        self._link = link
        self.namesrv = namesrv
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._clock = clock
        self._wall = wall
        self._links: dict[str, PeerLink] = {}
        self._known: dict[tuple[str, int], tuple[w.BrokerAddress, float]] = {}
        self._cached: tuple[float, ClusterSnapshot] | None = None
        self._refreshing: asyncio.Task[ClusterSnapshot] | None = None

    async def snapshot(self) -> ClusterSnapshot:
        """The cluster as of at most ``cache_seconds`` ago; concurrent callers share one
        refresh (a caller that goes away does not cancel it for the others)."""
        cached = self._cached
        if cached is not None and self._clock() - cached[0] < self._cache_seconds:
            return cached[1]
        task = self._refreshing
        if task is None:
            task = self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
            task.add_done_callback(self._refreshed)
        return await asyncio.shield(task)

    def _refreshed(self, task: asyncio.Task[ClusterSnapshot]) -> None:
        if self._refreshing is task:
            self._refreshing = None
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have gone

    async def _refresh(self) -> ClusterSnapshot:
        now = self._wall()
        error = ""
        try:
            listed = await asyncio.wait_for(self._members(), self._timeout)
        except (PocketMQError, OSError, TimeoutError) as exc:
            listed = None
            error = str(exc) or "no answer in time"
        rows = self._rows(listed, now)
        await asyncio.gather(*(self._fill(row) for row in rows[:MAX_BROKERS]))
        for row in rows[MAX_BROKERS:]:
            row.error = f"not asked: more than {MAX_BROKERS} brokers"
        await self._forget_links({row.address for row in rows})
        groups, topics = _sums(rows)
        snapshot = ClusterSnapshot(now, self.namesrv, error, rows, groups, topics)
        self._cached = (self._clock(), snapshot)
        return snapshot

    def _rows(self, listed: list[w.BrokerAddress] | None, now: float) -> list[BrokerRow]:
        """Rows for the listed brokers and for those listed before (gone, or the name server
        unreachable), this broker always among them."""
        own_key = self._own_key()
        if listed is not None:
            for address in listed:
                self._known[(address.name, address.broker_id)] = (address, now)
        rows = []
        for key, (address, seen) in sorted(self._known.items()):
            gone = listed is not None and all((b.name, b.broker_id) != key for b in listed)
            if gone and now - seen > FORGET_AFTER:
                del self._known[key]
                continue
            rows.append(
                BrokerRow(
                    address.name,
                    address.broker_id,
                    address.address,
                    address.http_address,
                    address.role,
                    address.epoch,
                    gone_since=seen if gone else 0.0,
                    this=key == own_key,
                )
            )
        if not any(row.this for row in rows):
            group, broker_id = own_key
            rows.append(BrokerRow(group, broker_id, "", "", "", 0, this=True))
        return rows

    async def _fill(self, row: BrokerRow) -> None:
        """The row's figures, or why there are none."""
        try:
            if row.this:
                figures = self._own()
            else:
                link = self._links.get(row.address)
                if link is None:
                    link = self._links[row.address] = self._link(row.address)
                async with asyncio.timeout(self._timeout):
                    figures = await link.call(
                        RequestCode.BROKER_OVERVIEW, w.Empty(), w.BrokerOverviewResponse
                    )
        except TimeoutError:
            row.error = f"no answer within {self._timeout:g} s"
            return
        except (PocketMQError, OSError) as exc:
            row.error = str(exc)
            return
        except Exception as exc:  # a bug shows as this row's error, never as a broken page
            log.exception("cluster view: figures of %s", row.address or "this broker")
            row.error = f"internal error: {exc!r}"
            return
        row.figures = figures
        row.role = str(figures.replication.get("role", row.role))
        row.epoch = int(figures.replication.get("epoch", row.epoch))
        row.http_address = figures.http_address or row.http_address

    async def _forget_links(self, addresses: set[str]) -> None:
        for address in [a for a in self._links if a not in addresses]:
            await self._links.pop(address).close()

    async def close(self) -> None:
        """Close every peer link (and a refresh in progress)."""
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(BaseException):
                await self._refreshing
        for link in self._links.values():
            await link.close()
        self._links.clear()


def _source(members: Iterable[BrokerRow]) -> BrokerRow | None:
    """The member whose groups and topics count for its broker group: the answering master of
    the highest epoch, else the answering member with the longest log."""
    answering = [m for m in members if m.figures is not None]
    masters = [m for m in answering if m.role == "master"]
    if masters:
        return max(masters, key=lambda m: m.epoch)
    return max(answering, key=lambda m: int(m.replication.get("log_end", 0)), default=None)


def _sums(rows: list[BrokerRow]) -> tuple[list[GroupRow], list[TopicRow]]:
    by_group: dict[str, list[BrokerRow]] = {}
    for row in rows:
        by_group.setdefault(row.group, []).append(row)
    groups: dict[str, GroupRow] = {}
    topics: dict[str, TopicRow] = {}
    for name, members in sorted(by_group.items()):
        source = _source(members)
        if source is None or source.figures is None:
            continue
        for g in source.figures.groups:
            total = groups.setdefault(g.name, GroupRow(g.name))
            total.lag += g.lag
            total.dlq_depth += g.dlq_depth
            total.retry_backlog += g.retry_backlog
            total.inflight += g.inflight
            total.consumers = max(total.consumers, g.consumers)
            total.brokers.append(name)
        for t in source.figures.topics:
            topic = topics.setdefault(t.name, TopicRow(t.name, t.topic_type))
            topic.queues += t.queues
            topic.stored += t.stored
            topic.messages_in += t.messages_in
            if t.rate_in >= 0:
                topic.rate_in += t.rate_in
            else:
                topic.rate_known = False
            topic.brokers.append(name)
    ranked = sorted(groups.values(), key=lambda g: (-g.dlq_depth, -g.retry_backlog, -g.lag, g.name))
    return ranked, sorted(topics.values(), key=lambda t: t.name)
