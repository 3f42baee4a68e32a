"""The few etcd operations failover needs, over the endpoints a ``--controller`` URL names.

etcd is the group's source of truth for who is master (docs/replication.md §9). This wrapper
gives the failover logic JSON values, transactions and one lease, moves to the next endpoint when
one fails, and bounds every call by a timeout, so a partitioned etcd can never stall a broker's
event loop: each call either answers within ``timeout`` or raises :class:`ControllerUnavailable`.
The etcd client library (and gRPC under it) is imported on first use: a broker without
``--controller``, and every CLI command, starts without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pocketmq.errors import InvalidArgumentError

__all__ = ["ControllerUnavailable", "Etcd", "Lease", "parse_controller"]

_WATCH_RENEWAL = 30.0


class ControllerUnavailable(Exception):
    """No etcd endpoint answered in time."""


def parse_controller(url: str) -> list[tuple[str, int]]:
    """``etcd://H:P[,H:P...]`` as (host, port) pairs; InvalidArgumentError otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "etcd" or not parts.netloc:
        raise InvalidArgumentError(
            f"--controller must look like etcd://host:port[,host:port], not {url!r}"
        )
    endpoints = []
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgumentError(f"--controller: {item!r} is not host:port")
        endpoints.append((host, int(port)))
    return endpoints


@dataclass(frozen=True, slots=True)
class Lease:
    """A granted lease: its id and time to live in seconds."""

    id: int
    ttl: int


class Etcd:
    """JSON keys, compare-and-swap transactions and a lease on the first etcd endpoint that
    answers."""

    def __init__(self, endpoints: list[tuple[str, int]], *, timeout: float = 1.0) -> None:
        self._endpoints = endpoints
        self._timeout = timeout
        self._index = 0
        self._client: Any = None

    async def _call(self, operation: Any) -> Any:
        """Run ``operation(client)`` on an endpoint; on failure try each other endpoint once."""
        import aetcd  # type: ignore[import-untyped]
        import grpc

        failures = (aetcd.exceptions.ClientError, grpc.RpcError, TimeoutError, OSError)
        last: BaseException | None = None
        for _ in range(len(self._endpoints)):
            if self._client is None:
                host, port = self._endpoints[self._index]
                self._client = aetcd.Client(host=host, port=port, timeout=self._timeout)
            try:
                async with asyncio.timeout(self._timeout + 0.5):
                    return await operation(self._client)
            except failures as exc:
                last = exc
                await self._drop()
                self._index = (self._index + 1) % len(self._endpoints)
        raise ControllerUnavailable(f"etcd unreachable ({last})")

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            # a broken channel may fail to close: it is gone either way
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._timeout):
                    await client.close()

    async def get(self, key: str) -> tuple[dict[str, Any] | None, int]:
        """The key's JSON value (None when absent) and its modification revision (0: absent)."""

        async def run(client: Any) -> tuple[dict[str, Any] | None, int]:
            found = await client.get(key.encode())
            if found is None:
                return None, 0
            return json.loads(found.value), int(found.mod_revision)

        result: tuple[dict[str, Any] | None, int] = await self._call(run)
        return result

    async def prefix(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every key under ``prefix`` with its JSON value."""

        async def run(client: Any) -> dict[str, dict[str, Any]]:
            found = await client.get_prefix(prefix.encode())
            return {item.key.decode(): json.loads(item.value) for item in found}

        result: dict[str, dict[str, Any]] = await self._call(run)
        return result

    async def grant(self, ttl: int) -> Lease:
        """A new lease of ``ttl`` seconds."""

        async def run(client: Any) -> Lease:
            granted = await client.lease(ttl)
            return Lease(int(granted.id), int(granted.ttl))

        result: Lease = await self._call(run)
        return result

    async def refresh(self, lease: Lease) -> bool:
        """Keep ``lease`` alive; False when etcd no longer has it (it expired)."""

        async def run(client: Any) -> bool:
            reply = await client.refresh_lease(lease.id)
            return reply is not None and int(reply.TTL) > 0

        result: bool = await self._call(run)
        return result

    async def revoke(self, lease: Lease) -> None:
        """End ``lease`` now (a clean shutdown hands mastership over without waiting)."""
        await self._call(lambda client: client.revoke_lease(lease.id))

    async def put(self, key: str, value: dict[str, Any], lease: Lease | None = None) -> None:
        """Set ``key`` (attached to ``lease`` when given: deleted when it expires)."""
        data = json.dumps(value).encode()
        lease_id = lease.id if lease is not None else None
        await self._call(lambda client: client.put(key.encode(), data, lease=lease_id))

    async def swap(
        self,
        expect: dict[str, int | dict[str, Any] | None],
        writes: dict[str, tuple[dict[str, Any], Lease | None]],
    ) -> bool:
        """One transaction: when every key in ``expect`` is as given — an int is its modification
        revision (0: absent), a dict its exact JSON value, None absent — make ``writes``; returns
        whether it did."""

        async def run(client: Any) -> bool:
            tx = client.transactions
            compare = []
            for key, wanted in expect.items():
                raw = key.encode()
                if wanted is None or wanted == 0:
                    compare.append(tx.version(raw) == 0)
                elif isinstance(wanted, int):
                    compare.append(tx.mod(raw) == wanted)
                else:
                    compare.append(tx.value(raw) == json.dumps(wanted).encode())
            success = [
                tx.put(key.encode(), json.dumps(value).encode(), lease.id if lease else None)
                for key, (value, lease) in writes.items()
            ]
            succeeded, _ = await client.transaction(compare=compare, success=success, failure=[])
            return bool(succeeded)

        result: bool = await self._call(run)
        return result

    async def watch(self, prefix: str, changed: Callable[[], None]) -> None:
        """Call ``changed`` whenever a key under ``prefix`` changes, until cancelled: a watch
        on its own connection, opened again on the next endpoint when it fails and renewed
        every ``_WATCH_RENEWAL`` seconds (a stream to a partitioned etcd can stay silent
        forever). Callers still poll: the watch only makes them look sooner."""
        import aetcd

        index = 0
        while True:
            host, port = self._endpoints[index % len(self._endpoints)]
            client = aetcd.Client(host=host, port=port, timeout=self._timeout)
            try:
                async with asyncio.timeout(_WATCH_RENEWAL):
                    events = await client.watch_prefix(prefix.encode())
                    changed()  # anything may have changed while no watch was open
                    async for _ in events:
                        changed()
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed stream, or the renewal: open another
                index += 1
                await asyncio.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self._timeout):
                        await client.close()

    async def close(self) -> None:
        """Close the connection."""
        await self._drop()
