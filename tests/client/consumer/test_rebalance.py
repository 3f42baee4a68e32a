"""How a clustering consumer computes its share of a topic's queues (RocketMQ's "allocate
average"): every member computes the same split without talking to the others."""

from __future__ import annotations

from pocketmq.client.consumer.rebalance import allocate_average
from pocketmq.client.routes import QueueRef


def test_allocation_is_contiguous_complete_and_disjoint() -> None:
    queues = [QueueRef("b", "addr", n, 6) for n in range(10)]
    members = ["c1", "c2", "c3"]
    shares = [allocate_average(queues, members, m) for m in members]
    assert [len(s) for s in shares] == [4, 3, 3]
    assert [q for share in shares for q in share] == queues
    assert allocate_average(queues, members, "stranger") == []
    many = [f"c{n:02d}" for n in range(12)]
    assert sum(len(allocate_average(queues, many, m)) for m in many) == 10
