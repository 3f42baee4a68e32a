"""The operator dashboard served on the broker's HTTP port (docs/operations.md, "Dashboard")."""
