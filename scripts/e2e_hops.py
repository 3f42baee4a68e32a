"""Where one message's end-to-end latency goes, hop by hop (docs/benchmarks.md, "e2e latency per
hop (issue 32)").

Runs ``pocketmq bench latency``'s workload (the default ``Producer`` and push consumer in this
process, ``send_async`` per message at a steady rate, 1 KiB bodies, a 4-queue topic) against a
``pocketmq serve`` process started here, and timestamps each message at every hop with
``time.perf_counter_ns`` (CLOCK_MONOTONIC on Linux: one clock for both processes). Nothing in
src is changed: this process wraps its connections' transports, ``data_received``,
``ClientConnection.request``, ``Producer.send`` and the listener; the broker does the same
through a ``sitecustomize`` put on its ``PYTHONPATH`` (its ``ServerConnection`` and
``MessageStore.append``). Frames are recorded as they pass and decoded after the run, so the
bookkeeping per hop is an append to a list. Each message's body starts with its send time and
sequence number, which ties the hops together; the client also counts its event-loop turns.

    PYTHONPATH=src python scripts/e2e_hops.py --rate 2000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import pickle
import struct
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

_STAMP = struct.Struct("<dQ")
_now = time.perf_counter_ns
Record = tuple[int, int, str, Any, int]  # (time ns, connection id, what, data, loop turn)
_TURNS = [0]  # this process's event-loop turns (counted on stock asyncio only)


class _TimedTransport:
    """A transport that records what is written through it (the rest is passed on)."""

    def __init__(self, inner: Any, sink: list[Record], key: int) -> None:
        self._inner = inner
        self._sink = sink
        self._key = key

    def write(self, data: Any) -> None:
        began = _now()
        self._sink.append((began, self._key, "out", bytes(data), _TURNS[0]))
        self._inner.write(data)
        self._sink.append((began, self._key, "took", _now() - began, 0))

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _wrap_protocol(cls: Any, sink: list[Record]) -> None:
    """Record what ``cls`` instances read and write (the time a read entered the protocol)."""
    made, received = cls.connection_made, cls.data_received

    def connection_made(self: Any, transport: Any) -> None:
        made(self, _TimedTransport(transport, sink, id(self)))

    def data_received(self: Any, data: bytes) -> None:
        sink.append((_now(), id(self), "in", bytes(data), _TURNS[0]))
        received(self, data)

    cls.connection_made, cls.data_received = connection_made, data_received


def _sequence(body: bytes) -> int:
    return int(_STAMP.unpack_from(body)[1])


def install_broker() -> None:
    """In the broker process (``sitecustomize``): record its native connections and appends."""
    from pocketmq.server.native.connection import ServerConnection
    from pocketmq.store.store import MessageStore

    sink: list[Record] = []
    _wrap_protocol(ServerConnection, sink)
    append = MessageStore.append

    def timed_append(self: Any, messages: Any) -> Any:
        results = append(self, messages)
        sink.append((_now(), 0, "appended", [m.body[:16] for m in messages], 0))
        return results

    MessageStore.append = timed_append  # type: ignore[method-assign]
    if os.environ.get("POCKETMQ_HOPS_DETAIL"):
        _install_broker_detail(sink)
    out = os.environ["POCKETMQ_HOPS_OUT"]
    atexit.register(lambda: Path(out).write_bytes(pickle.dumps(sink)))


def _install_broker_detail(sink: list[Record]) -> None:
    """``--broker-detail``: when a woken long poll's task resumes (``ArrivalNotifier.wait``
    returns) and when its read of the store (``Reader.get_messages``) begins and ends."""
    from pocketmq.broker.longpoll import ArrivalNotifier
    from pocketmq.store.reader import Reader

    woke: dict[Any, int] = {}
    wait, get = ArrivalNotifier.wait, Reader.get_messages

    async def timed_wait(self: Any, key: Any, max_wait: float) -> bool:
        result = await wait(self, key, max_wait)
        woke[asyncio.current_task()] = _now()
        return result

    def timed_get(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = _now()
        got = get(self, *args, **kwargs)
        if got.messages:
            task = asyncio.current_task()
            bodies = [m.body[:16] for m in got.messages]
            sink.append((began, 0, "read", (bodies, woke.pop(task, None), _now()), 0))
        return got

    ArrivalNotifier.wait = timed_wait  # type: ignore[method-assign]
    Reader.get_messages = timed_get  # type: ignore[method-assign]


def _frames(records: list[Record]) -> dict[int, list[tuple[tuple[int, int], str, Any]]]:
    """Per connection, the frames read and written with the time of the read or write that
    completed them."""
    from pocketmq.protocol import FrameDecoder

    decoders: dict[tuple[int, str], Any] = {}
    frames: dict[int, list[tuple[tuple[int, int], str, Any]]] = defaultdict(list)
    for at, key, what, data, turn in records:
        if what not in ("in", "out"):
            continue
        decoder = decoders.setdefault((key, what), FrameDecoder())
        for frame in decoder.feed(data):
            frames[key].append(((at, turn), what, frame))
    return frames


def _hops(records: list[Record], requester: str) -> dict[str, dict[int, tuple[int, int]]]:
    """For each side's frames: when each message's SEND and its PULL answer passed, keyed by
    sequence number. ``requester`` is the direction requests travel on this side."""
    from pocketmq.protocol import FrameKind, RequestCode, decode_body
    from pocketmq.protocol import structs as w

    seen: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    for frames in _frames(records).values():
        pulls: set[int] = set()
        sends: dict[int, list[int]] = {}
        for at, what, frame in frames:
            if frame.kind == FrameKind.REQUEST and what == requester:
                if frame.code == RequestCode.SEND:
                    sequences = [
                        _sequence(m.body) for m in decode_body(frame.body, w.SendRequest).messages
                    ]
                    sends[frame.request_id] = sequences
                    for sequence in sequences:
                        seen["send"].setdefault(sequence, at)
                elif frame.code == RequestCode.PULL:
                    pulls.add(frame.request_id)
            elif frame.kind == FrameKind.RESPONSE and frame.request_id in pulls:
                for m in decode_body(frame.body, w.PullResponse).messages:
                    seen["pull answer"].setdefault(_sequence(m.body), at)
            elif frame.kind == FrameKind.RESPONSE and frame.request_id in sends:
                for sequence in sends.pop(frame.request_id):
                    seen["send answered"].setdefault(sequence, at)
    for at, _, what, data, turn in records:
        if what == "appended":
            for body in data:
                seen["appended"].setdefault(_sequence(body), (at, turn))
        elif what == "read":
            bodies, woken, ended = data
            for body in bodies:
                if woken is not None:
                    seen["woken"].setdefault(_sequence(body), (woken, 0))
                seen["read begun"].setdefault(_sequence(body), (at, 0))
                seen["read ended"].setdefault(_sequence(body), (ended, 0))
    return seen


async def _workload(address: str, rate: int, seconds: float, marks: dict[str, Any]) -> None:
    from pocketmq.bench.broker import _topic
    from pocketmq.client import (
        ConsumeStatus,
        Message,
        MessageView,
        Producer,
        PushConsumer,
        PushConsumerConfig,
    )

    await _topic(address, "bench-latency", group="bench-latency", queues=4)
    total = int(rate * seconds)
    done = asyncio.Event()
    entered: dict[int, tuple[int, int]] = marks["listener"]
    turns = _TURNS
    stamps: dict[int, int] = marks["stamps"]
    stamp_turns: dict[int, int] = marks["stamp turns"]

    async def listener(messages: list[MessageView]) -> ConsumeStatus:
        at = _now()
        for message in messages:
            sent, sequence = _STAMP.unpack_from(message.body)
            entered.setdefault(sequence, (at, turns[0]))
            stamps.setdefault(sequence, int(sent * 1e9))
        if len(entered) >= total:
            done.set()
        return ConsumeStatus.SUCCESS

    config = PushConsumerConfig(report_outcomes=False)
    async with (
        PushConsumer("bench-latency", "bench-latency", listener, servers=address, config=config),
        Producer(servers=address) as producer,
    ):
        await asyncio.sleep(0.5)
        # warm-up: sequence numbers past the measured ones
        for n in range(500):
            await producer.send(Message(topic="bench-latency", body=_body(total + n)))
            await asyncio.sleep(1.0 / rate)
        await asyncio.sleep(0.5)
        marks["start"] = len(marks["client"])
        start, interval = time.perf_counter(), 1.0 / rate
        pending: set[asyncio.Task[Any]] = set()
        for n in range(total):
            delay = start + n * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            stamp_turns[n] = turns[0]
            task = producer.send_async(Message(topic="bench-latency", body=_body(n)))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        await asyncio.wait_for(done.wait(), 60)


def _body(sequence: int) -> bytes:
    from pocketmq.bench.broker import BODY

    return _STAMP.pack(time.perf_counter(), sequence) + BODY[_STAMP.size :]


def _install_client(marks: dict[str, Any]) -> None:
    """Record this process's connections, the producer's ``send`` entry, where a pull's answer
    is handed on (``ClientConnection.request`` returning it, or its ``early`` hand-off to the
    workers taking it) and loop turns."""
    from pocketmq.client.connection import ClientConnection
    from pocketmq.client.producer.producer import Producer
    from pocketmq.protocol import structs as w

    sink: list[Record] = marks["client"]
    _wrap_protocol(ClientConnection, sink)
    turns = _TURNS
    entries: dict[int, tuple[int, int]] = marks["send entry"]
    resumed: dict[int, tuple[int, int]] = marks["pull resumed"]
    send, request = Producer.send, ClientConnection.request
    from pocketmq.client.producer import accumulator

    limit = getattr(accumulator, "ALONE_IN_FLIGHT", 1)  # 1 before issue 32's change

    async def timed_send(self: Any, message: Any) -> Any:
        sequence = _sequence(message.body)
        entries.setdefault(sequence, (_now(), turns[0]))
        if self._accumulator._sending.get(message.topic, 0) >= limit:  # adaptive batching holds it
            marks["held"].add(sequence)
        return await send(self, message)

    async def timed_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        early = kwargs.get("early")
        if early is not None:  # the answer handed to the workers as it is read (pull.py)

            def timed_early(reply: Any) -> None:
                early(reply)
                if early.taken:
                    at = _now()
                    for m in reply.messages:
                        resumed.setdefault(_sequence(m.body), (at, turns[0]))

            kwargs["early"] = timed_early
        reply = await request(self, *args, **kwargs)
        if isinstance(reply, w.PullResponse):
            at = _now()
            for m in reply.messages:
                resumed.setdefault(_sequence(m.body), (at, turns[0]))
        return reply

    Producer.send = timed_send  # type: ignore[method-assign]
    ClientConnection.request = timed_request  # type: ignore[method-assign]
    run_once: Callable[[Any], None] = asyncio.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def counted(self: Any) -> None:
        turns[0] += 1
        run_once(self)

    asyncio.BaseEventLoop._run_once = counted  # type: ignore[attr-defined]


def _gc_pauses() -> dict[int, list[int]]:
    """This process's garbage collections from now on: their durations by generation (a
    collection stops the loop; the broker freezes its heap at start, ``pocketmq serve``)."""
    import gc

    pauses: dict[int, list[int]] = defaultdict(list)
    began = [0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = _now()
        else:
            pauses[info["generation"]].append(_now() - began[0])

    gc.callbacks.append(timed)
    return pauses


def _percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--broker-detail",
        action="store_true",
        help="split the broker's woken pull: task resumed, store read begun and ended "
        "(messages whose pull was not woken are left out)",
    )
    args = parser.parse_args()
    from pocketmq.testing.process import BrokerProcess

    marks: dict[str, Any] = {
        "client": [],
        "listener": {},
        "send entry": {},
        "pull resumed": {},
        "stamps": {},
        "stamp turns": {},
        "held": set(),
    }
    _install_client(marks)
    pauses = _gc_pauses()
    with tempfile.TemporaryDirectory(prefix="e2e-hops-") as directory:
        hook = Path(directory, "hook")
        hook.mkdir()
        here = Path(__file__).resolve().parent
        hook.joinpath("sitecustomize.py").write_text(
            f"import sys\nsys.path.insert(0, {str(here)!r})\n"
            "import e2e_hops\ne2e_hops.install_broker()\n"
        )
        out = Path(directory, "broker.pickle")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])
        env["POCKETMQ_HOPS_OUT"] = str(out)
        if args.broker_detail:
            env["POCKETMQ_HOPS_DETAIL"] = "1"
        broker = BrokerProcess(Path(directory, "data"), env=env)
        try:
            asyncio.run(_workload(broker.address, args.rate, args.seconds, marks))
        finally:
            broker.stop()
        broker_records: list[Record] = pickle.loads(out.read_bytes())
    client = _hops(marks["client"][marks["start"] :], requester="out")
    server = _hops(broker_records, requester="in")
    total = int(args.rate * args.seconds)
    client_side = (
        lambda n: (marks["stamps"].get(n), marks["stamp turns"].get(n)),
        lambda n: marks["send entry"].get(n),
        lambda n: client["send"].get(n),
    )
    points: list[tuple[str, Callable[[int], Any], bool]] = [
        ("stamp (before send_async)", client_side[0], True),
        ("Producer.send entry", client_side[1], True),
        ("SEND handed to the transport (client)", client_side[2], True),
        ("SEND read (broker data_received)", lambda n: server["send"].get(n), False),
        ("append returned (broker)", lambda n: server["appended"].get(n), False),
    ]
    if args.broker_detail:
        points += [
            (
                "the SEND's answer handed to the transport",
                lambda n: server["send answered"].get(n),
                False,
            ),
            ("woken pull's task resumed (broker)", lambda n: server["woken"].get(n), False),
            ("its store read begun (broker)", lambda n: server["read begun"].get(n), False),
            ("its store read ended (broker)", lambda n: server["read ended"].get(n), False),
        ]
    points += [
        (
            "pull answer handed to the transport (broker)",
            lambda n: server["pull answer"].get(n),
            False,
        ),
        ("pull answer read (client data_received)", lambda n: client["pull answer"].get(n), True),
        (
            "handed on (pull loop resumed, or the hand-off)",
            lambda n: marks["pull resumed"].get(n),
            True,
        ),
        ("listener entry", lambda n: marks["listener"].get(n), True),
    ]
    times: dict[str, list[int]] = defaultdict(list)
    turns: dict[str, list[int]] = defaultdict(list)
    whole: list[int] = []
    for n in range(total):
        seen = [get(n) for _, get, _ in points]
        if any(s is None or s[0] is None for s in seen):
            continue
        for index in range(1, len(points)):
            name, _, counted = points[index]
            times[name].append(seen[index][0] - seen[index - 1][0])
            if counted and points[index - 1][2]:
                turns[name].append(seen[index][1] - seen[index - 1][1])
        whole.append(seen[-1][0] - seen[0][0])
    print(f"{len(whole)} of {total} messages traced at {args.rate} msg/s")
    print(f"{'hop (from the point above)':48} {'p50 ms':>7} {'p99 ms':>7} {'turns p50/p99':>14}")
    for name, values in times.items():
        counted = turns.get(name)
        turn = (
            f"{_percentile(counted, 0.5) * 1e6:.0f} / {_percentile(counted, 0.99) * 1e6:.0f}"
            if counted
            else ""
        )
        print(
            f"{name:48} {_percentile(values, 0.5):7.3f} {_percentile(values, 0.99):7.3f} {turn:>14}"
        )
    for generation, times_ns in sorted(pauses.items()):
        print(
            f"client GC generation {generation}: {len(times_ns)} collections, "
            f"max {max(times_ns) / 1e6:.3f} ms, total {sum(times_ns) / 1e6:.1f} ms"
        )
    for side, records in (
        ("client", marks["client"][marks["start"] :]),
        ("broker", broker_records),
    ):
        took = [data for _, _, what, data, _ in records if what == "took"]
        print(
            f"{side} transport.write() calls: {len(took)}, p50 {_percentile(took, 0.5):.3f} ms, "
            f"p99 {_percentile(took, 0.99):.3f} ms"
        )
    held = sum(1 for n in range(total) if n in marks["held"])
    print(f"held by adaptive batching (a send of the topic in flight): {held / total:.1%}")
    print(
        f"{'total (stamp → listener entry)':48} {_percentile(whole, 0.5):7.3f} "
        f"{_percentile(whole, 0.99):7.3f}"
    )


if __name__ == "__main__":
    sys.exit(main())
