"""Replication between the brokers of a group (docs/replication.md): the master's side
(``master``), the slave's (``slave``), and the framed stream both use (``stream``)."""
