"""A store's identity: which broker group it belongs to and which cluster it was born in.

A slave must never mix another cluster's log into its own (docs/replication.md §1): the
identity is made when a master's store is first created, taken over by a slave that starts
empty, and compared on every replication handshake.
"""

from __future__ import annotations

import os
import uuid

import msgspec

from pocketmq.store.files import atomic_write

__all__ = ["StoreIdentity", "read_identity", "write_identity"]

_FILE = "identity"


class StoreIdentity(msgspec.Struct, frozen=True):
    """The group (broker name) and the cluster id (random, made by the first master)."""

    group: str
    cluster_id: str

    @classmethod
    def new(cls, group: str) -> StoreIdentity:
        """The identity of a store created from scratch by a master: a new random cluster id."""
        return cls(group, uuid.uuid4().hex)


def read_identity(directory: str) -> StoreIdentity | None:
    """The store's identity, or None when it has none yet (or the file is unreadable)."""
    try:
        with open(os.path.join(directory, _FILE), "rb") as handle:
            return msgspec.json.decode(handle.read(), type=StoreIdentity)
    except (FileNotFoundError, msgspec.DecodeError):
        return None


def write_identity(directory: str, identity: StoreIdentity) -> None:
    """Store the identity atomically, so a crash never leaves a store with half an identity."""
    atomic_write(os.path.join(directory, _FILE), msgspec.json.encode(identity))
