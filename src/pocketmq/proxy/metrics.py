"""What a proxy's ``/metrics`` says (docs/operations.md, "Proxies measured"): how long its gRPC
calls took by RPC and status (``rocketmq_rpc_latency``, protocol ``grpc``, as the broker's
in-process adapter counts them), how many entries its merged requests to the broker carried
(``pocketmq_proxy_batch_size``), the official clients connected to it by kind and language
(``pocketmq_proxy_connections``), which broker and worker it is (``pocketmq_proxy_info``), and
the process's own CPU, memory and garbage collector (prometheus-client's collectors).

The broker's ``rocketmq_producer_connections``/``rocketmq_consumer_connections`` already count
the same clients (relayed by their proxies); the proxy's own gauge has another name so a sum
over every target never counts a client twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pocketmq.batching import BATCH_BUCKETS, BatchSizes
from pocketmq.server.http.metrics import rpc_latency_family
from pocketmq.server.rpcstats import RpcLatency
from pocketmq.version import VERSION

__all__ = ["ProxyCollector", "proxy_registry"]


class ProxyCollector(Collector):
    """The proxy's own series (module doc), read when Prometheus scrapes."""

    def __init__(
        self,
        identity: Callable[[], tuple[str, str]],
        latency: Callable[[], RpcLatency | None],
        batches: BatchSizes,
        clients: Callable[[], tuple[dict[str, int], dict[str, int]]],
    ) -> None:
        self._identity = identity  # (broker name, worker number or "")
        self._latency = latency
        self._batches = batches
        self._clients = clients

    def collect(self) -> Iterator[Metric]:
        """The series as of now."""
        broker, worker = self._identity()
        info = InfoMetricFamily("pocketmq_proxy", "The proxy's version, broker and worker")
        info.add_metric([], {"version": VERSION, "broker_name": broker, "worker": worker})
        yield info
        latency = self._latency()
        yield rpc_latency_family([latency] if latency is not None else [])
        sizes = HistogramMetricFamily(
            "pocketmq_proxy_batch_size",
            "Entries per request the proxy sent its broker (clients' sends or acks merged)",
            labels=["kind"],
        )
        for kind in ("send", "ack"):
            counts = self._batches.counts.get(kind, [0] * (len(BATCH_BUCKETS) + 1))
            cumulative, buckets = 0, []
            for bound, count in zip((*BATCH_BUCKETS, None), counts, strict=True):
                cumulative += count
                buckets.append((str(float(bound)) if bound is not None else "+Inf", cumulative))
            sizes.add_metric([kind], buckets, self._batches.sums.get(kind, 0))
        yield sizes
        connections = GaugeMetricFamily(
            "pocketmq_proxy_connections",
            "Official clients connected to this proxy, by kind and language",
            labels=["kind", "language"],
        )
        producers, consumers = self._clients()
        for kind, languages in (("producer", producers), ("consumer", consumers)):
            for language, count in sorted(languages.items()):
                connections.add_metric([kind, language], count)
        yield connections


def proxy_registry(collector: ProxyCollector) -> CollectorRegistry:
    """A registry with the proxy's series and the process collectors."""
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
