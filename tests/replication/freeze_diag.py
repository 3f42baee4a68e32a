"""What the failover tests show when an acknowledged message is lost (test_freeze.py).

A loss is a replication loss (the successor never held the record, or cut it as divergent when
it followed a longer log) or a read loss (the record is in the successor's commit log but not in
what its queues serve). :class:`GroupRecorder` keeps, cheaply, what decides which: etcd's keys
of the group (leader, epoch, ``isr``, candidacies) and every member's replication status over
time; :func:`loss_report` puts them next to the lost bodies, where each broker's data directory
holds them (commit log or quarantine), and the brokers' log lines about the failover.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any

from pocketmq.errors import PocketMQError
from pocketmq.server.ha.etcd import ControllerUnavailable, Etcd, parse_controller
from pocketmq.testing import BrokerProcess

from .probes import own_status

PREFIX = "/pocketmq/groups/g1/"
_FAILOVER_WORDS = re.compile(
    r"steps down|set aside|divergent|leads its group|elected|truncat|cut|lease|replicating from"
    r"|master of group|epoch|refused|in sync",
    re.IGNORECASE,
)


class GroupRecorder:
    """Polls etcd's keys of group ``g1`` (every ``etcd_every`` s) and each member's replication
    status (every ``status_every`` s), keeping only changes (monotonic time, what)."""

    def __init__(self, etcd_url: str, members: dict[int, str], *, etcd_every: float = 0.05,
                 status_every: float = 0.2) -> None:  # fmt: skip
        self._etcd = Etcd(parse_controller(etcd_url))
        self.members = members  # broker id -> native address
        self.etcd: list[tuple[float, dict[str, Any]]] = []
        self.statuses: dict[int, list[tuple[float, dict[str, Any]]]] = {i: [] for i in members}
        self._every = (etcd_every, status_every)
        # (monotonic time, the confirmed offset before, the status): the readers' limit moved back
        self.went_back: list[tuple[float, int, dict[str, Any]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch_etcd())] + [
            asyncio.create_task(self._watch_status(i)) for i in self.members
        ]

    async def stop(self) -> None:
        """Stop polling; bounded, so a stuck client call never holds the test up."""
        self._stopping = True  # a loop whose cancellation a client call swallowed ends too
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await self._etcd.close()

    async def _watch_etcd(self) -> None:
        while not self._stopping:
            with contextlib.suppress(ControllerUnavailable):
                keys = await self._etcd.prefix(PREFIX)
                now = {key.removeprefix(PREFIX): value for key, value in keys.items()}
                if not self.etcd or self.etcd[-1][1] != now:
                    self.etcd.append((time.monotonic(), now))
            await asyncio.sleep(self._every[0])

    async def _watch_status(self, broker_id: int) -> None:
        while not self._stopping:
            try:
                got = await own_status(self.members[broker_id], timeout=1.0)
                seen = _brief(got)
            except (PocketMQError, OSError) as exc:
                seen = {"down": type(exc).__name__}
            history = self.statuses[broker_id]
            if not history or history[-1][1] != seen:
                history.append((time.monotonic(), seen))
            await asyncio.sleep(self._every[1])

    def watch_confirmed(self, address: str, every: float = 0.05) -> None:
        """Note each time ``address``'s confirmed offset (the readers' limit) moves back."""
        self._tasks.append(asyncio.create_task(self._watch_confirmed(address, every)))

    async def _watch_confirmed(self, address: str, every: float) -> None:
        last: int | None = None  # -1: no limit
        while not self._stopping:
            with contextlib.suppress(PocketMQError, OSError):
                seen = _brief(await own_status(address, timeout=1.0))
                confirmed = int(seen["confirmed"])
                if last is not None and 0 <= confirmed < last:
                    self.went_back.append((time.monotonic(), last, seen))
                last = confirmed
            await asyncio.sleep(every)

    async def snapshot(self) -> dict[int, dict[str, Any]]:
        """Every member's replication status now (``down``: it did not answer)."""

        async def one(address: str) -> dict[str, Any]:
            try:
                return _brief(await own_status(address, timeout=1.0))
            except (PocketMQError, OSError) as exc:
                return {"down": type(exc).__name__}

        found = await asyncio.gather(*(one(a) for a in self.members.values()))
        return dict(zip(self.members, found, strict=True))


def _brief(status: dict[str, object]) -> dict[str, Any]:
    """The fields of a replication status that matter for a loss."""
    controller = status.get("controller") or {}
    assert isinstance(controller, dict)
    slaves = status.get("slaves") or []
    assert isinstance(slaves, list)
    return {
        "role": status.get("role"),
        "epoch": status.get("epoch"),
        "log_end": status.get("log_end"),
        "confirmed": status.get("confirmed"),
        "in_sync": status.get("in_sync"),
        "acked": {s["broker_id"]: s["acked"] for s in slaves},
        "gap": status.get("gap_bytes"),
        "missing": status.get("missing"),
        "state": controller.get("state"),
        "isr": controller.get("isr"),
    }


def where_bodies_are(broker: BrokerProcess, bodies: set[bytes]) -> dict[str, list[bytes]]:
    """Which of ``bodies`` each file of the broker's store holds (commit log segments and the
    quarantine: a slave's divergent cut goes there), by file name relative to the store."""
    store = broker.data_dir / "data" / "store"
    found: dict[str, list[bytes]] = {}
    if not store.exists():
        return found
    patterns = {b: re.compile(rb"(?<![0-9A-Za-z])" + re.escape(b) + rb"(?![0-9])") for b in bodies}
    for path in sorted(p for p in store.rglob("*") if p.is_file()):
        if "consumequeue" in path.parts or "index" in path.parts:
            continue
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            held = sorted(b for b, pattern in patterns.items() if pattern.search(data))
            if held:
                found[str(path.relative_to(store))] = held
    return found


def failover_lines(broker: BrokerProcess, limit: int = 60) -> list[str]:
    """The broker's log lines about roles, leases, links and cuts (the last ``limit``)."""
    lines = [line for line in broker.log().splitlines() if _FAILOVER_WORDS.search(line)]
    return lines[-limit:]


def loss_report(
    *,
    lost: set[bytes],
    answers: list[tuple[float, Any, bytes]],
    stopped: float,
    successor: str,
    members: dict[int, BrokerProcess],
    after_election: dict[int, dict[str, Any]],
    recorder: GroupRecorder,
    stored: set[bytes],
    elected: float,
    read: float,
) -> str:
    """Everything known about a loss, as text for the assertion message."""
    ids = {broker.address: i for i, broker in members.items()}
    out = [f"{len(lost)} acknowledged messages lost; successor: broker {ids.get(successor)}"]
    answered = {body: (at, status) for at, status, body in answers}
    for body in sorted(lost, key=lambda b: int(b[1:])):
        at, status = answered[body]
        out.append(f"  lost {body.decode()}: answered {status.name} at {at - stopped:+.3f} s")
    numbers = sorted(int(b[1:]) for b in lost)
    last_before = [f"{b.decode()} {at - stopped:+.3f}" for at, _, b in answers if at <= stopped]
    out.append(f"  last answers before the stop/kill: {last_before[-3:]}")
    after: dict[str, int] = {}
    for at, status, _ in answers:
        if at > stopped:
            after[status.name] = after.get(status.name, 0) + 1
    out.append(f"  answers after it: {after}")
    out.append(f"  lost numbers {numbers[0]}..{numbers[-1]}; read from the successor: "
               f"{len(stored)} bodies")  # fmt: skip
    out.append("where the lost bodies are (commit log / quarantine), per broker:")
    for broker_id, broker in members.items():
        places = where_bodies_are(broker, lost)
        shown = {name: f"{len(held)} of {len(lost)}" for name, held in places.items()}
        out.append(f"  broker {broker_id}: {shown or 'nowhere'}")
    out.append("status right after the election:")
    for broker_id, seen in after_election.items():
        out.append(f"  broker {broker_id}: {seen}")
    out.append(f"etcd's keys of the group (changes, s from the stop/kill; elected {elected:.2f}):")
    out += [f"  {at - stopped:+.3f} {keys}" for at, keys in recorder.etcd if at >= stopped - 3]
    for broker_id, history in recorder.statuses.items():
        out.append(f"broker {broker_id}'s status (changes, 1 s either side of the failover):")
        out += [
            f"  {at - stopped:+.3f} {seen}"
            for at, seen in history
            if stopped - 1 <= at <= stopped + elected + 1
        ]
    out.append(f"the successor's status (changes) around the read at {read - stopped:+.3f}:")
    for broker_id, broker in members.items():
        if broker.address == successor:
            history = recorder.statuses[broker_id]
            out += [f"  {at - stopped:+.3f} {seen}" for at, seen in history if at >= read - 3]
    for broker_id, broker in members.items():
        out.append(f"broker {broker_id}'s log ({broker.log_path}):")
        out += [f"  {line}" for line in failover_lines(broker)]
    return "\n".join(out)


def keep_logs(members: dict[int, BrokerProcess], report: str, root: Path) -> None:
    """Copy a loss's report and the brokers' logs to a new directory under ``root`` (pytest
    keeps only the last few tmp dirs of a test)."""
    into = root / f"loss-{time.strftime('%H%M%S')}-{os.getpid()}"
    into.mkdir(parents=True, exist_ok=True)
    (into / "loss_report.txt").write_text(report)
    for broker_id, broker in members.items():
        (into / f"broker{broker_id}.log").write_text(broker.log())


def election_summary(recorder: GroupRecorder, stopped: float) -> str:
    """One line on the election, also for runs that lost nothing (near misses): etcd's in-sync
    set when the master stopped, the master's own last view of its slaves, the candidacies
    published before the new leader appeared, and who won."""
    before = [keys for at, keys in recorder.etcd if at <= stopped]
    isr = before[-1].get("isr") if before else None
    master = [seen for at, seen in recorder.statuses.get(0, []) if at <= stopped and "role" in seen]
    last = master[-1] if master else {}
    epoch = (before[-1].get("epoch") or {}).get("epoch") if before else None
    candidates: dict[str, Any] = {}
    winner = None
    for _, keys in recorder.etcd:
        new_epoch = (keys.get("epoch") or {}).get("epoch")
        if new_epoch is not None and epoch is not None and new_epoch > epoch:
            winner = (keys.get("leader") or {}).get("broker_id")
            break
        candidates = {k: v for k, v in keys.items() if k.startswith("candidates/")}
    return (
        f"election: etcd isr at the stop {isr}; the master's last status before it "
        f"(log_end {last.get('log_end')}, in_sync {last.get('in_sync')}, "
        f"acked {last.get('acked')}); "
        f"candidacies before the new leader {candidates}; winner {winner}"
    )


def went_back_summary(recorder: GroupRecorder, stopped: float) -> str:
    """One line: when the successor's confirmed offset moved back, from what to what, and its
    slaves' acknowledgements then."""
    shown = [
        f"{at - stopped:+.2f} s {before} -> {seen['confirmed']} (log_end {seen['log_end']}, "
        f"acked {seen['acked']})"
        for at, before, seen in recorder.went_back[:5]
    ]
    return f"confirmed offset moved back {len(recorder.went_back)} times: {shown}"
