"""pocketmq beside the brokers a user would pick instead of it: ``pocketmq bench peers``
(docs/benchmarks.md, "Side by side with the peers")."""
