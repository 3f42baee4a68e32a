"""The name server (which broker serves which queues of a topic) and a broker's link to it."""

from pocketmq.server.namesrv.server import NameServer, RouteTable

__all__ = ["NameServer", "RouteTable"]
