"""A broker's links to the other brokers of its cluster, for the cluster view
(docs/operations.md, "Cluster view"): ``BROKER_OVERVIEW`` over their native port (server/link.py
does the work), signed in as a member of the cluster with the cluster key when the cluster
authenticates, each call bounded by a short timeout so one broker that does not answer never
holds up the page that asked.
"""

from __future__ import annotations

from pocketmq.server.link import NativeLink

__all__ = ["PEER_TIMEOUT", "PeerLink"]

PEER_TIMEOUT = 2.0
"""How long a peer has to answer one call (the page shows it unreachable after that)."""


class PeerLink(NativeLink):
    """One connection to one peer broker's native port (module doc)."""

    what = "broker"
