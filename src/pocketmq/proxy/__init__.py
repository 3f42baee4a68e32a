"""``pocketmq proxy``: a gRPC gateway in front of a broker (docs/proxy.md)."""
