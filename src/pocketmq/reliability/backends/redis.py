"""The Redis lease store: the ``SETNX`` fast path of the idempotent consumer, done safely
(docs/reliability.md "Consumer: the idempotent wrapper", step 2).

Why a lease and not a bare flag: the key is set with ``SET key token NX PX ttl`` — atomic, with an
expiry, so a worker that dies mid-handler does not block the message forever — and released with
a compare-and-delete script, so a worker whose lease already expired cannot delete the lease a
second worker took in the meantime. The token is random per acquisition.

Keys are ``<prefix><group>:<message_id>`` with the prefix ``pocketmq:idem:`` by default. Redis is
only the fast path: the idempotent consumer falls back to the database when Redis fails, and the
database's conditional update decides in every case (see ``idempotent.py``).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pocketmq.errors import InvalidArgumentError
from pocketmq.reliability.backend import LeaseStore

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["DEFAULT_PREFIX", "DEFAULT_REDIS_URL", "RedisLeaseStore"]

DEFAULT_PREFIX = "pocketmq:idem:"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


class RedisLeaseStore(LeaseStore):
    """Leases as Redis keys with a TTL, through ``redis.asyncio``.

    Redis because a lease is checked on every message: an in-memory key with an expiry answers
    in a fraction of a database round trip, and it expires by itself when a worker dies.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._owns_client = owns_client
        self._release: Any = client.register_script(_RELEASE)

    @classmethod
    def from_url(
        cls, url: str = DEFAULT_REDIS_URL, *, prefix: str = DEFAULT_PREFIX
    ) -> RedisLeaseStore:
        """A store with its own client for ``url`` (closed by :meth:`aclose`)."""
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url)
        return cls(client, prefix=prefix, owns_client=True)

    def __repr__(self) -> str:
        return f"RedisLeaseStore(prefix={self.prefix!r})"

    def key(self, group: str, message_id: str) -> str:
        """The Redis key of a lease: one namespace per prefix, so several applications can share a
        Redis.
        """
        return f"{self.prefix}{group}:{message_id}"

    async def acquire(self, group: str, message_id: str, ttl: float) -> str | None:
        """``SET key token NX PX ttl``: atomic, and it expires if the holder dies."""
        if ttl <= 0:
            raise InvalidArgumentError("lease ttl must be positive")
        token = secrets.token_hex(8)
        ok = await self.client.set(
            self.key(group, message_id), token, nx=True, px=max(1, round(ttl * 1000))
        )
        return token if ok else None

    async def acquire_many(
        self, group: str, message_ids: Sequence[str], ttl: float
    ) -> list[str | None]:
        """Every ``SET NX`` of a batch in one pipelined round trip."""
        if ttl <= 0:
            raise InvalidArgumentError("lease ttl must be positive")
        tokens = [secrets.token_hex(8) for _ in message_ids]
        millis = max(1, round(ttl * 1000))
        async with self.client.pipeline(transaction=False) as pipe:
            for message_id, token in zip(message_ids, tokens, strict=True):
                pipe.set(self.key(group, message_id), token, nx=True, px=millis)
            results = await pipe.execute()
        return [token if ok else None for token, ok in zip(tokens, results, strict=True)]

    async def release(self, group: str, message_id: str, token: str) -> bool:
        """Compare-and-delete in one script: a holder whose lease expired cannot delete a newer
        holder's lease.
        """
        deleted = await self._release(keys=[self.key(group, message_id)], args=[token])
        return bool(deleted)

    async def aclose(self) -> None:
        """Close the client if this store created it (``from_url``); a client passed in stays the
        caller's.
        """
        if self._owns_client:
            await self.client.aclose()
