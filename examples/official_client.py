"""Send and receive through pocketmq with Apache RocketMQ's own Python client.

The official client (``rocketmq-python-client``, installed with pocketmq) speaks gRPC to the
broker's RocketMQ 5 port. Start a broker and create a topic and a consumer group first::

    pocketmq serve                       # native 10911, gRPC 8081
    pocketmq topic create orders
    pocketmq group create billing

then run ``python examples/official_client.py [HOST:GRPC_PORT]``.
"""

from __future__ import annotations

import sys

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

endpoint = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
config = ClientConfiguration(endpoint, Credentials())  # plain text; no credentials needed

producer = Producer(config, ("orders",))
producer.startup()
try:
    message = Message()
    message.topic = "orders"
    message.body = b"order 42 created"
    message.tag = "created"
    message.keys = "order-42"
    message.add_property("region", "eu")
    receipt = producer.send(message)
    print("sent", receipt.message_id)
finally:
    producer.shutdown()

consumer = SimpleConsumer(config, "billing", {"orders": FilterExpression("created")}, 5)
consumer.startup()
try:
    # up to 16 messages, each hidden from the group's other consumers for 30 s until acked
    for received in consumer.receive(16, 30):
        print("received", received.message_id, received.body.decode(), received.properties)
        consumer.ack(received)
finally:
    consumer.shutdown()
