"""The consumers, one concept per module (docs/design.md, "Clients"):

- :mod:`.push`: the :class:`PushConsumer` front, wiring the parts below;
- :mod:`.config`: its settings, the context listeners get, its statistics;
- :mod:`.membership` and :mod:`.rebalance`: the group's members and this consumer's share;
- :mod:`.process_queue` and :mod:`.pull`: messages in hand per owned queue, and the pull loops;
- :mod:`.listener`, :mod:`.concurrent` and :mod:`.orderly`: calling the listener, with workers
  or with queue locks and message-group lanes;
- :mod:`.retry` and :mod:`.reports`: handing failures back, reporting successes;
- :mod:`.offsets`: progress on the brokers (clustering) or in a file (broadcasting);
- :mod:`.simple`: :class:`SimpleConsumer` (pop mode).

Nothing is imported here: ``pocketmq.client`` loads the modules a program uses on first use.
"""
