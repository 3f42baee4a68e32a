"""Business-level reliability on top of the broker: outbox stubs, message log, idempotent consumer.

Work in progress; the curated surface is assembled in later commits.
"""

__all__: list[str] = []
