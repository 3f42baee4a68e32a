"""The broker's front as a rule: the servers talk to :class:`pocketmq.broker.Broker` through its
methods (broker/front.py) and the HA servers through ``broker.ha``, never into the parts behind
them (docs/design.md, "The broker's front").

A server that needs something the front does not offer adds a query method to the front (or a
function to broker/overview.py for the HTTP side) instead of reaching past it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pocketmq"

# the broker's parts: its state and the concept classes the front hands calls to
PARTS = (
    "store",
    "topics",
    "groups",
    "offsets",
    "pop_state",
    "consumers",
    "locks",
    "arrivals",
    "replication",
    "replica_log",
    "state_copy",
    "sending",
    "send_backs",
    "pulls",
    "pops",
    "dead_letters",
    "redrives",
    "catalog",
    "membership",
    "resets",
    "roles",
    "appender",
    "traffic",
    "counters",
    "flow",
    "history",
    "schedule",
    "transactions",
)
REACH = re.compile(r"\b_?broker\.(" + "|".join(PARTS) + r"|_\w+)\b")
# files where ``broker`` names something else than a Broker
NOT_A_BROKER = {
    "server/app_config.py": "self.broker is the [broker] BrokerConfig section",
}

SERVER_FILES = sorted(
    path
    for path in (SRC / "server").rglob("*.py")
    if path.relative_to(SRC).as_posix() not in NOT_A_BROKER
)


@pytest.mark.parametrize("path", SERVER_FILES, ids=lambda p: p.relative_to(SRC).as_posix())
def test_servers_do_not_reach_past_the_broker_front(path: Path) -> None:
    reaches = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith(("from ", "import ")) and REACH.search(line)
    ]
    assert reaches == [], "use the front's methods (broker/front.py) or broker.ha instead"


def test_the_rule_sees_a_reach() -> None:
    assert REACH.search("config = self._broker.topics.get(name)")
    assert REACH.search("broker.replication.role")
    assert REACH.search("broker._shared.closed")
    assert not REACH.search("broker.ha.replication.role")
    assert not REACH.search("broker.list_topics()")
