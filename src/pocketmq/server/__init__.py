"""Adapters that put the broker core on the network: native TCP, gRPC, and the name server."""

from pocketmq.server.app import AppConfig, BrokerApp
from pocketmq.server.namesrv.server import NameServer

__all__ = ["AppConfig", "BrokerApp", "NameServer"]
