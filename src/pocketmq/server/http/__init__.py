"""The broker's HTTP port: Prometheus metrics and health checks (docs/operations.md)."""
