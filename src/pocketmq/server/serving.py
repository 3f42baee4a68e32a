"""What the native and the remoting connection share, server side: naming the peer, writing
answers (every answer of one read in one write, answers finishing in one loop iteration in one
more), joining the requests a handler asked to be done together (:class:`Joined`), the tasks of
slow handlers and the buffer budget's books (docs/protocol.md, "Limits"; docs/remoting.md,
"Limits and errors").

Each protocol keeps its own decoding, dispatch and error answers (``server/native/connection.py``,
``server/remoting/connection.py``, which never import each other: ``tests/test_layering.py``);
this base holds only what is the same to the letter, and adds no per-message call: the read
loops keep their own inline code.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple, cast

from pocketmq.protocol.auth import normalize_address
from pocketmq.server.listening import Budget
from pocketmq.server.pacing import PacedReading

__all__ = [
    "JOIN_LIMIT",
    "Joined",
    "ServedConnection",
    "WriteBehind",
    "answers_expected",
    "write_behind",
]

#: At most this many joined requests are done in one call (bounds one event-loop turn).
JOIN_LIMIT: Final = 256


class Joined(NamedTuple):
    """A handler's answer that defers its work: requests that one read of the connection brought
    and that return the same ``run`` are done together, by one call of ``run`` with their
    ``item`` values in arrival order, before the next request of another kind and before the
    read's answers are written. ``run`` returns one result per item: what the protocol's
    handlers return (a response body, a remoting ``Reply``), an awaitable of one, or the
    exception that request failed with. Sends use it so a pipelining producer's requests reach
    the store in one append (docs/design.md "Sending")."""

    run: Callable[[list[Any]], Sequence[object]]
    item: Any


class WriteBehind:
    """One loop's answers finished outside a read (a woken long poll, a sync flush done): each
    connection's are written together once the handlers' callbacks of this loop turn have run.

    By default the flush is queued when a connection's first such answer is, and so runs one
    loop turn later (asyncio and uvloop run what is queued during a turn in the next one). A
    waker that has just queued the wake-ups of handlers about to answer calls :meth:`expect`:
    the flush then runs behind them, in the same turn, so a long poll woken by a send is
    answered in the send's turn instead of after one more poll of the loop (docs/design.md,
    "One message's path"; docs/benchmarks.md, "Writes per delivered message (issue 32)").
    A flush that a later one supersedes writes only the connections that were waiting when it
    was queued, and leaves the rest to the later one: wake-ups queued one after another (one
    send waking the pulls of several queues) still leave in one write per connection, and no
    answer waits longer than the first flush queued after it. One connection's failed write
    does not keep the others' answers back.

    It holds no reference to its loop (the loop's own callbacks hold it), so a loop that ends
    is not kept alive by :func:`write_behind`'s table."""

    __slots__ = ("__weakref__", "_added", "_dirty", "_latest", "_queued", "_written")

    def __init__(self) -> None:
        self._dirty: list[ServedConnection] = []
        self._queued = False  # a flush is queued that will write what is added now
        self._latest = 0  # the number of the last flush queued
        self._added = 0  # connections ever added to ``_dirty``
        self._written = 0  # of them, those taken out of it by a flush

    def expect(self) -> None:
        """Queue the flush behind the callbacks queued so far (the wake-ups of handlers that
        will answer): their answers leave in this loop turn."""
        self._latest += 1
        self._queued = True
        asyncio.get_running_loop().call_soon(self._flush, self._latest, self._added)

    def add(self, connection: ServedConnection) -> None:
        """``connection`` has answers waiting: written by the flush already queued, if any,
        else by one queued now."""
        self._dirty.append(connection)
        self._added += 1
        if not self._queued:
            self.expect()

    def _flush(self, number: int, waiting_when_queued: int) -> None:
        if number == self._latest:
            self._queued = False
            take = len(self._dirty)
        else:  # a later flush writes what came since; what waited already leaves now
            take = waiting_when_queued - self._written
            if take <= 0:
                return
        dirty, self._dirty = self._dirty[:take], self._dirty[take:]
        self._written += take
        for connection in dirty:
            try:
                connection._flush_later()
            except Exception as exc:  # a transport that refuses a write: its own problem
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "an answer's write failed", "exception": exc}
                )


_WRITE_BEHIND: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBehind] = (
    weakref.WeakKeyDictionary()
)


def write_behind(loop: asyncio.AbstractEventLoop | None = None) -> WriteBehind:
    """The :class:`WriteBehind` of ``loop`` (the running loop by default)."""
    loop = loop or asyncio.get_running_loop()
    behind = _WRITE_BEHIND.get(loop)
    if behind is None:
        behind = _WRITE_BEHIND[loop] = WriteBehind()
    return behind


def answers_expected() -> None:
    """Handlers were just woken that will answer: their answers leave in this loop turn (the
    running loop's :meth:`WriteBehind.expect`). The broker's long-poll notifier calls it after
    each wake-up (``ArrivalNotifier.on_wake``, set by the handlers that answer long polls);
    outside a running loop nothing is queued, so nothing is to be written."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    write_behind(loop).expect()


class ServedConnection(PacedReading):
    """The shared half of a server connection (module doc). A subclass calls this
    ``__init__`` first, :meth:`_note_transport` from ``connection_made`` and :meth:`_drop` from
    ``connection_lost``, and answers joined requests in :meth:`_answer_joined`."""

    def __init__(
        self, clock: Callable[[], float], budget: Budget, tasks: set[asyncio.Task[None]]
    ) -> None:
        self._clock = clock
        self._budget = budget  # the port's, shared by its connections
        self._tasks = tasks  # the port's tasks of slow handlers (closed with it)
        self._held = 0  # bytes of partly received frames, as accounted in the budget
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] | None = None  # the answers of the read being served
        self._later: list[bytes] = []  # answers finished since, written by a WriteBehind
        self._behind: WriteBehind | None = None  # the loop's, found at the first such answer
        self._close_after_reply = False
        self.connected = False  # connection_made was called (after a TLS handshake, if any)
        self.closed = False
        self.remote = ""
        self.peer_host = ""  # the peer's IP (failed logins are counted by it)
        self.local_address = ""  # where this connection arrived, normalized (protocol/auth.py)
        self.state: dict[str, Any] = {}  # the handlers' own per-connection space
        self.inflight = 0  # requests whose handler still runs (long polls, sync flushes)
        self.last_seen = 0.0
        self._polls: dict[int, asyncio.Task[None]] = {}  # long polls waiting, by request
        # requests of this read whose handlers asked to be done together (see Joined)
        self._joined: list[Any] = []
        self._join_run: Callable[[list[Any]], Sequence[object]] | None = None

    def _note_transport(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport and name the peer (for logs and per-address checks)."""
        # a stream transport, though not always an asyncio.Transport subclass (uvloop's is
        # not): check for what is used, not for the class
        self._transport = cast(asyncio.Transport, transport)
        self.connected = True
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = peer[0]
            self.remote = f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
            self.peer_host = normalize_address(host, 0).rpartition(":")[0]
        local = transport.get_extra_info("sockname")
        if isinstance(local, tuple) and len(local) >= 2:
            self.local_address = normalize_address(str(local[0]), int(local[1]))

    def _drop(self) -> None:
        """The connection is gone: give back its share of the budget and stop its long polls
        (nobody would receive what they took)."""
        self.closed = True
        self._release_buffer()
        for task in list(self._polls.values()):
            task.cancel()

    def _account_buffer(self, held: int) -> None:
        """Count the ``held`` bytes of the partly received frame against the port's budget;
        over it, :meth:`_over_budget` refuses that request."""
        if held == self._held:
            return
        if self._budget.change(self._held, held):
            self._held = held
            return
        self._over_budget(held)

    def _over_budget(self, held: int) -> None:
        """Refuse the partly received request the budget had no room for (the protocol's
        answer), and skip the rest of its bytes."""
        raise NotImplementedError

    def _release_buffer(self) -> None:
        if self._held:
            self._budget.change(self._held, 0)
            self._held = 0

    # -- joined requests and slow handlers ------------------------------------------------

    def _run_joined(self) -> None:
        """Do the joined requests' work in one call and answer each of them."""
        joined, self._joined = self._joined, []
        run = self._join_run
        if run is None or not joined:
            return
        try:
            # a lone request (an await-each producer) without a list comprehension's frame
            items = [joined[0][-1]] if len(joined) == 1 else [entry[-1] for entry in joined]
            results: Sequence[object] = run(items)
        except Exception as exc:  # a bug in the runner: each joined request fails alone
            results = [exc] * len(joined)
        self._answer_joined(joined, results)

    def _answer_joined(self, joined: list[Any], results: Sequence[object]) -> None:
        """Answer each joined request (an entry of ``_joined``) with its result."""
        raise NotImplementedError

    def _poll_done(self, key: int, task: asyncio.Task[None]) -> None:
        if self._polls.get(key) is task:
            del self._polls[key]

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.inflight -= 1
        self.last_seen = self._clock()  # idle time counts from the last answer, too
        self._tasks.discard(task)

    # -- writing --------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        if self.closed or self._transport is None:
            return
        if self._out is not None:
            self._out.append(frame)
            return
        # answers finishing in the same loop iteration leave in one write (WriteBehind)
        if not self._later:
            behind = self._behind
            if behind is None:
                behind = self._behind = write_behind()
            behind.add(self)
        self._later.append(frame)

    def _flush_later(self) -> None:
        later, self._later = self._later, []
        if later and self._transport is not None and not self.closed:
            self._transport.write(b"".join(later) if len(later) > 1 else later[0])

    def close(self) -> None:
        """Close the connection (the peer sees EOF after the frames already queued)."""
        if self._transport is not None and not self.closed:
            self._transport.close()
