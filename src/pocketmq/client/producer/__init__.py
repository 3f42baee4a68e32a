"""The producer, split the way aiokafka splits its own (docs/design.md, "Clients"):

- :mod:`.producer`: the :class:`Producer` front (lifecycle, send variants, statistics);
- :mod:`.accumulator`: auto-batching (``linger``);
- :mod:`.sender` and :mod:`.handlers`: the one retry loop, and one handler per request type;
- :mod:`.selector`: queue choice and broker isolation;
- :mod:`.transaction`, :mod:`.heartbeat` and :mod:`.checks`: the transaction producer, built on
  a producer and its sender. They are not imported here: ``pocketmq send`` must stay lean.
"""

from pocketmq.client.producer.config import ProducerConfig, ProducerStatistics, SendCallback
from pocketmq.client.producer.producer import Producer

__all__ = ["Producer", "ProducerConfig", "ProducerStatistics", "SendCallback"]
