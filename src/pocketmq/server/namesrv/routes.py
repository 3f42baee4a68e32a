"""The name server's table: which brokers of which groups hold which topics.

Every broker of a group registers (its address, role, epoch and topics); a broker silent for
``expiry`` (120 s, RocketMQ's default) is dropped, and so is one whose registering connection
closes (RocketMQ's name server does the same when a broker's channel goes away): a master killed
with its machine up is out of the routes at once, and consumers read from its slaves. A topic's
route lists each group that holds it: its master first (the one with the highest epoch among those
registered as master), then its slaves, and the queues as the master serves them — or, while a
group has no live master, as its slaves do, read-only (docs/replication.md §5). A master that
registers with a lower epoch than its group's master learns who the master is from the answer
(and steps down once that master confirmed it, §6).

A master on a controller lease says how long it is master (``lease_ms``); past that, without a
new registration, it is no longer taken for the group's master (a frozen master is not listed as
one past its lease, §9). Brokers that registered as master but are not their group's master now
— an older epoch, or a lease run out — are listed as ``fenced``: one master per group, never two.

A broker that goes away is remembered for a day (its address, topics and why it left), so a
client asking for a topic only gone brokers held is told they are unreachable, not that the topic
does not exist; and a name server no broker ever registered with says that (issue 29 item 15).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from pocketmq.errors import ServiceUnavailableError, TooManyRequestsError, TopicNotFoundError
from pocketmq.protocol import structs as w

__all__ = ["BROKER_EXPIRY", "DEPARTED_MEMORY", "MAX_REGISTERED_BROKERS", "RouteTable"]

BROKER_EXPIRY = 120.0
# how long a broker that went away is remembered for the error a client gets (module doc)
DEPARTED_MEMORY = 24 * 3600.0
MAX_REGISTERED_BROKERS = 1024
"""How many brokers a name server keeps at most (docs/protocol.md, REGISTER_BROKER): a bound on
what registrations may make it hold, whoever sends them."""
PERM_READ = 4


@dataclass(slots=True)
class _Registration:
    broker: w.BrokerAddress
    topics: dict[str, w.TopicSpec]
    last_seen: float
    channel: object = None
    master_until: float | None = None  # a leased master: master until then (clock time)


@dataclass(slots=True)
class _Departure:
    broker: w.BrokerAddress
    topics: frozenset[str]
    at: float
    why: str  # "its connection closed", "it shut down", "it was silent for 120 s"


class RouteTable:
    """Registrations by (group, broker id), and the routes and masters derived from them."""

    def __init__(
        self,
        expiry: float = BROKER_EXPIRY,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_brokers: int = MAX_REGISTERED_BROKERS,
    ):
        self._expiry = expiry
        self._clock = clock
        self._max_brokers = max_brokers
        self._brokers: dict[tuple[str, int], _Registration] = {}
        self._departed: dict[tuple[str, int], _Departure] = {}

    def register(
        self,
        broker: w.BrokerAddress,
        topics: list[w.TopicSpec],
        channel: object = None,
        lease_ms: int = 0,
    ) -> w.RegisterBrokerResponse:
        """Record a broker's registration (made over ``channel``, a connection; ``lease_ms``: a
        leased master's time left); the answer names its group's master. A new broker past
        ``max_brokers`` is refused (:class:`TooManyRequestsError`); the known ones always
        register again."""
        key = (broker.name, broker.broker_id)
        if key not in self._brokers and len(self._brokers) >= self._max_brokers:
            self.expire()
            if len(self._brokers) >= self._max_brokers:
                raise TooManyRequestsError(
                    f"this name server holds {len(self._brokers)} brokers, its limit "
                    f"(max_registered_brokers {self._max_brokers})"
                )
        now = self._clock()
        until = now + lease_ms / 1000 if lease_ms > 0 and broker.role == "master" else None
        self._brokers[key] = _Registration(broker, {t.name: t for t in topics}, now, channel, until)
        self._departed.pop((broker.name, broker.broker_id), None)
        master = self.master(broker.name)
        if master is None:
            return w.RegisterBrokerResponse()
        return w.RegisterBrokerResponse(master.address, master.ha_address, master.epoch)

    def expire(self) -> list[tuple[str, int]]:
        """Drop brokers silent for longer than the expiry; returns their (group, id) keys."""
        now = self._clock()
        gone = [k for k, r in self._brokers.items() if now - r.last_seen > self._expiry]
        for key in gone:
            self._depart(key, f"it was silent for {self._expiry:.0f} s")
        for key in [k for k, d in self._departed.items() if now - d.at > DEPARTED_MEMORY]:
            del self._departed[key]
        return gone

    def _depart(self, key: tuple[str, int], why: str) -> None:
        """Drop a registration, remembering the broker for the errors clients get."""
        registration = self._brokers.pop(key)
        self._departed[key] = _Departure(
            registration.broker, frozenset(registration.topics), self._clock(), why
        )

    def unregister(self, name: str, broker_id: int) -> None:
        """Forget one broker of a group (it announced its shutdown)."""
        if (name, broker_id) in self._brokers:
            self._depart((name, broker_id), "it shut down")

    def disconnected(self, channel: object) -> list[tuple[str, int]]:
        """A connection closed: drop the brokers whose latest registration came over it."""
        gone = [k for k, r in self._brokers.items() if channel is not None and r.channel is channel]
        for key in gone:
            self._depart(key, "its connection closed")
        return gone

    def master(self, group: str) -> w.BrokerAddress | None:
        """The group's master: the highest epoch among the brokers registered as master whose
        lease, if they have one, has not run out."""
        now = self._clock()
        masters = [
            r.broker
            for (name, _), r in self._brokers.items()
            if name == group
            and r.broker.role == "master"
            and (r.master_until is None or r.master_until > now)
        ]
        return max(masters, key=lambda b: (b.epoch, -b.broker_id), default=None)

    def _members(self, group: str) -> list[_Registration]:
        """The group's registrations: its master first, then slaves by id, then the brokers
        that say (or said) master but are not (they serve no reads for a masterless group)."""
        master = self.master(group)
        members = [r for (name, _), r in self._brokers.items() if name == group]
        return sorted(
            members,
            key=lambda r: (r.broker != master, r.broker.role != "slave", r.broker.broker_id),
        )

    def _as_listed(
        self, registration: _Registration, master: w.BrokerAddress | None
    ) -> w.BrokerAddress:
        """A broker as routes and listings show it: ``fenced`` when it registered as master
        but is not its group's master now."""
        broker = registration.broker
        if broker.role == "master" and broker != master:
            return msgspec.structs.replace(broker, role="fenced")
        return broker

    def route(self, topic: str) -> w.RouteResponse:
        """Every live group holding ``topic``: its brokers (master first) and queues; a topic
        no broker holds is :class:`TopicNotFoundError`."""
        self.expire()
        brokers: list[w.BrokerAddress] = []
        queues: list[w.QueueRoute] = []
        topic_type = "normal"
        for group in sorted({name for name, _ in self._brokers}):
            members = [r for r in self._members(group) if topic in r.topics]
            if not members:
                continue
            master = self.master(group)
            leader = members[0]
            spec = leader.topics[topic]
            topic_type = spec.topic_type
            if master is not None and leader.broker != master:
                # a stale master (a lower epoch) holds the topic, the real one not yet
                continue
            perm = spec.perm if leader.broker == master else spec.perm & PERM_READ
            brokers.extend(self._as_listed(r, master) for r in members)
            queues.extend(w.QueueRoute(group, q, perm) for q in range(spec.queues))
        if not brokers:
            raise self._no_route(topic)
        return w.RouteResponse(topic, topic_type, brokers, queues)

    def _no_route(self, topic: str) -> Exception:
        """Why no live broker serves ``topic``: the brokers that held it went away (retriable:
        they may come back, or their group fail over), no broker ever registered here, or no
        broker has the topic."""
        now = self._clock()
        held = sorted(
            (d for d in self._departed.values() if topic in d.topics),
            key=lambda d: (d.broker.name, d.broker.broker_id),
        )
        if held:
            gone = "; ".join(
                f"{d.broker.name}/{d.broker.broker_id} at {d.broker.address} went away "
                f"{now - d.at:.0f} s ago ({d.why})"
                for d in held
            )
            return ServiceUnavailableError(
                f"topic {topic!r} is on no reachable broker: {gone}; start it again (a group "
                "with slaves keeps serving reads and, with --controller, fails over)"
            )
        if not self._brokers:
            last = max(self._departed.values(), key=lambda d: d.at, default=None)
            since = (
                f"now: the last one, {last.broker.name}/{last.broker.broker_id} at "
                f"{last.broker.address}, went away {now - last.at:.0f} s ago ({last.why})"
                if last is not None
                else "yet"
            )
            return ServiceUnavailableError(
                f"no broker is registered with this name server {since}; start one with "
                "`pocketmq serve --namesrv HOST:PORT` (this name server's address)"
            )
        return TopicNotFoundError(
            f"topic {topic!r} does not exist on any broker; create it with "
            f"`pocketmq topic create {topic}`"
        )

    def topics(self) -> list[str]:
        """Every topic a live broker holds, sorted."""
        self.expire()
        return sorted({topic for r in self._brokers.values() for topic in r.topics})

    def brokers(self) -> list[w.BrokerAddress]:
        """Every live broker of every group, sorted by group and id."""
        self.expire()
        masters = {name: self.master(name) for name, _ in self._brokers}
        return [self._as_listed(r, masters[name]) for (name, _), r in sorted(self._brokers.items())]
