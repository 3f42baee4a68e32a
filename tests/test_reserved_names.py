"""The broker's reserved topic names are written in pocketmq/names.py and nowhere else."""

from __future__ import annotations

from pathlib import Path

from pocketmq import names

SRC = Path(__file__).resolve().parents[1] / "src" / "pocketmq"
RESERVED = [
    names.TOMBSTONE_TOPIC,
    names.HISTORY_TOPIC,
    names.SCHEDULE_TOPIC,
    names.TIMER_TOPIC,
    names.HALF_TOPIC,
    names.OP_TOPIC,
    names.REDRIVE_AUDIT_TOPIC,
]


def test_every_reserved_topic_is_a_storable_system_topic_no_user_may_create() -> None:
    assert len(set(RESERVED)) == len(RESERVED)
    for topic in RESERVED:
        assert topic.startswith(names.SYSTEM_PREFIX)
        assert names.is_storable_topic(topic)


def test_no_other_module_spells_a_system_topic() -> None:
    spelled = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.name != "names.py" and f'"{names.SYSTEM_PREFIX}' in path.read_text()
    ]
    assert spelled == []
