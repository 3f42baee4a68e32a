"""The broker's own link to a name server: register every 30 s, ask for routes (server/link.py
does the work; a failed registration is retried on the next round). With the cluster key it
signs in as a member and checks the name server's proof: a name server that cannot prove it
holds the key is not believed about routes or masters.
"""

from __future__ import annotations

from pocketmq.server.link import NativeLink

__all__ = ["NameServerLink"]


class NameServerLink(NativeLink):
    """The broker's one connection to its name server (module doc): registrations and route
    lookups, one request at a time."""

    what = "name server"
