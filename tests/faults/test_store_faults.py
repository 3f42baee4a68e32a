"""Damaged files and failing system calls against a real broker process.

For each fault the documented outcome (docs/storage-format.md §6-§7) is checked with real
clients: every acknowledged message is consumable afterwards, or the broker refuses to start and
names the file and offset, and ``pocketmq store repair`` then keeps everything but the damaged
record, which it lists. Never a silent loss.

Every broker here runs with sync flush, so an acknowledgement means "fsynced", and with a
checkpoint written only at shutdown, so recovery relies on the flush marker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Message
from pocketmq.client.sync import SyncAdmin, SyncProducer, SyncSimpleConsumer
from pocketmq.errors import (
    PocketMQError,
    SendOutcomeUnknownError,
    StorageFailedError,
    StorageFullError,
    TooManyRequestsError,
)
from pocketmq.testing import BrokerProcess

TOPIC = "faults"
SEGMENT_SIZE = 64 * 1024
CONFIG: dict[str, dict[str, Any]] = {
    "store": {
        "segment_size": SEGMENT_SIZE,
        "consume_queue_entries_per_file": 64,
        "index_max_entries": 128,
        "flush_mode": "sync",
        "checkpoint_interval": 3600.0,
        "min_free_disk_bytes": 0,
    },
    "broker": {"max_queue_wait": 5.0},
}
COUNT = 300


def _config(**store: Any) -> dict[str, dict[str, Any]]:
    return {"store": {**CONFIG["store"], **store}, "broker": CONFIG["broker"]}


def _start(home: Path, **store: Any) -> BrokerProcess:
    return BrokerProcess(home, config=_config(**store), grpc_port=None)


def _send(address: str, count: int, start: int = 0) -> list[tuple[str, int]]:
    """Send ``count`` messages one by one; returns (message id, queue) of each acknowledged."""
    acknowledged = []
    with SyncProducer(servers=address) as producer:
        for i in range(start, start + count):
            result = producer.send(Message(topic=TOPIC, body=b"m%d" % i, keys=(f"k{i}",)))
            acknowledged.append((result.message_id, result.queue_id))
    return acknowledged


def _consume_all(address: str, group: str) -> list[str]:
    with SyncAdmin(servers=address) as admin:
        admin.create_group(group)
    seen: list[str] = []
    with SyncSimpleConsumer(group, TOPIC, servers=address, await_duration=0.5) as consumer:
        empty = 0
        while empty < 2:
            batch = consumer.receive(max_messages=64, invisible_duration=30)
            if not batch:
                empty += 1
                continue
            empty = 0
            seen.extend(m.message_id for m in batch)
            consumer.ack_many(batch)
    return seen


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Path, list[tuple[str, int]]]:
    """A broker home holding COUNT acknowledged messages over several segments; the broker
    was killed with SIGKILL (no checkpoint since start)."""
    home = tmp_path / "broker"
    broker = _start(home)
    try:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic(TOPIC, queues=2)
        sent = _send(broker.address, COUNT)
    finally:
        broker.kill()
    return home, sent


def _store(home: Path) -> Path:
    return home / "data" / "store"


def _record_offsets(home: Path) -> list[int]:
    """Physical offsets of queue 0's records, from its consume-queue files."""
    offsets = []
    queue_dir = _store(home) / "consumequeue" / TOPIC / "0"
    for path in sorted(queue_dir.iterdir()):
        data = path.read_bytes()
        for i in range(0, len(data), 20):
            physical = int.from_bytes(data[i : i + 8], "little")
            size = int.from_bytes(data[i + 8 : i + 12], "little")
            if size:
                offsets.append(physical)
    return offsets


def _segment_of(home: Path, physical: int) -> Path:
    return _store(home) / "commitlog" / f"{physical // SEGMENT_SIZE * SEGMENT_SIZE:020d}"


def _pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- the commit log: damage to acknowledged records ----------------------------------------


def _flip_record(home: Path) -> int:
    victim = _record_offsets(home)[40]
    with open(_segment_of(home, victim), "r+b") as handle:
        handle.seek(victim % SEGMENT_SIZE + 70)
        byte = handle.read(1)[0]
        handle.seek(victim % SEGMENT_SIZE + 70)
        handle.write(bytes([byte ^ 0x01]))
    return victim


def _truncate_segment(home: Path) -> int:
    victim = _record_offsets(home)[40]
    os.truncate(_segment_of(home, victim), victim % SEGMENT_SIZE)
    return victim


def _delete_last_segment(home: Path) -> int:
    last = sorted((_store(home) / "commitlog").iterdir())[-1]
    last.unlink()
    return int(last.name)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_flip_record, id="flipped-bit"),
        pytest.param(_truncate_segment, id="truncated-segment"),
        pytest.param(_delete_last_segment, id="deleted-segment"),
    ],
)
def test_damaged_acknowledged_records_refuse_the_start_then_repair_keeps_the_rest(
    filled: tuple[Path, list[tuple[str, int]]], damage: Callable[[Path], int]
) -> None:
    home, sent = filled
    offset = damage(home)
    with pytest.raises(RuntimeError) as refused:
        _start(home)
    assert "StoreCorruptedError" in str(refused.value) or "confirmed durable" in str(refused.value)
    assert str(offset) in str(refused.value)
    assert "pocketmq store repair" in str(refused.value)

    data_dir = str(home / "data")
    check = _pocketmq(
        "store", "check", "--data-dir", data_dir, "--config", str(home / "broker.toml"), "--json"
    )
    report = json.loads(check.stdout)
    assert check.returncode == 1, check.stderr
    assert not report["healthy"]
    repair = _pocketmq(
        "store", "repair", "--data-dir", data_dir, "--config", str(home / "broker.toml")
    )
    assert repair.returncode == 0, repair.stderr
    lost = repair.stdout.count("\n  lost ")

    with _start(home) as broker:
        seen = _consume_all(broker.address, "after-repair")
        acknowledged = {message_id for message_id, _ in sent}
        assert set(seen) <= acknowledged
        # exactly what repair reported lost is missing: nothing else
        assert len(acknowledged - set(seen)) == lost
        assert lost >= 1
        assert _send(broker.address, 5, start=COUNT)  # writes go on


# -- derived files: the log is the truth, so everything comes back ---------------------------


def _queue_file(home: Path) -> Path:
    return sorted((_store(home) / "consumequeue" / TOPIC / "0").iterdir())[1]


def _index_files(home: Path) -> list[Path]:
    return sorted((_store(home) / "index").iterdir())


def _flip_queue_entry(home: Path) -> None:
    path = _queue_file(home)
    data = bytearray(path.read_bytes())
    data[3 * 20 + 1] ^= 0x40
    path.write_bytes(bytes(data))


DERIVED: dict[str, Callable[[Path], None]] = {
    "queue-entry-flipped": _flip_queue_entry,
    "queue-file-truncated": lambda home: os.truncate(_queue_file(home), 100),
    "queue-file-deleted": lambda home: _queue_file(home).unlink(),
    "queue-dir-deleted": lambda home: shutil.rmtree(_store(home) / "consumequeue"),
    "index-header-garbage": lambda home: _index_files(home)[0].write_bytes(b"\xff" * 64),
    "index-file-empty": lambda home: _index_files(home)[-1].write_bytes(b""),
    "index-deleted": lambda home: shutil.rmtree(_store(home) / "index"),
    "checkpoint-deleted": lambda home: (_store(home) / "checkpoint").unlink(missing_ok=True),
    "checkpoint-garbage": lambda home: (_store(home) / "checkpoint").write_bytes(b"{\x00garbage"),
    "marker-garbage": lambda home: (_store(home) / "flushed").write_bytes(b"\x01\x02\x03"),
}


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_damaged_derived_files_lose_nothing(
    filled: tuple[Path, list[tuple[str, int]]], name: str
) -> None:
    home, sent = filled
    DERIVED[name](home)
    with _start(home) as broker:
        seen = _consume_all(broker.address, "after")
        assert sorted(seen) == sorted(message_id for message_id, _ in sent)
        with SyncAdmin(servers=broker.address) as admin:
            [found] = admin.run(lambda a: a.query_by_key(TOPIC, "k123"))
            assert found.body == b"m123"


# -- failing system calls in a running broker ------------------------------------------------


def _arm(path: Path, *rules: dict[str, Any]) -> None:
    path.write_text(json.dumps({"rules": list(rules)}))


def test_an_fsync_error_stops_acknowledgements_and_a_restart_recovers(tmp_path: Path) -> None:
    home = tmp_path / "broker"
    faults = tmp_path / "faults.json"
    broker = _start(home, fault_file=str(faults))
    try:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic(TOPIC, queues=2)
        before = _send(broker.address, 20)
        _arm(faults, {"op": "fsync", "target": "commitlog", "errno": "EIO", "count": 1})
        outcomes: list[str] = []
        with SyncProducer(servers=broker.address) as producer:
            for i in range(5):
                try:
                    producer.send(Message(topic=TOPIC, body=b"after %d" % i))
                    outcomes.append("ok")
                except SendOutcomeUnknownError as exc:
                    cause = exc.__cause__
                    outcomes.append("unknown" if isinstance(cause, StorageFailedError) else "?")
                except StorageFailedError:
                    outcomes.append("failed")
        # never "ok" after the failed fsync, even though later fsyncs would succeed
        assert "ok" not in outcomes
        assert outcomes[0] == "unknown"
        assert "accepts no more writes" in broker.log()
        status = json.loads(
            _pocketmq("broker", "status", "--json", "--server", broker.address).stdout
        )
        assert "fsync of the commit log failed" in status["store"]["failure"]
    finally:
        broker.kill()
    faults.unlink()
    with _start(home) as broker:
        seen = set(_consume_all(broker.address, "after"))
        assert {message_id for message_id, _ in before} <= seen
        assert _send(broker.address, 3, start=100)


def test_a_full_disk_refuses_sends_and_keeps_serving_reads(tmp_path: Path) -> None:
    home = tmp_path / "broker"
    faults = tmp_path / "faults.json"
    with _start(home, fault_file=str(faults)) as broker:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic(TOPIC, queues=2)
        before = _send(broker.address, 10)
        _arm(faults, {"op": "allocate", "target": "commitlog", "errno": "ENOSPC", "count": -1})
        with SyncProducer(servers=broker.address) as producer:
            big = b"x" * 30_000  # a few of these need a new segment
            errors: list[PocketMQError] = []
            for _ in range(10):
                try:
                    producer.send(Message(topic=TOPIC, body=big))
                except PocketMQError as exc:
                    errors.append(exc)
            assert errors
            assert all(isinstance(e, StorageFullError) for e in errors), errors
        seen = _consume_all(broker.address, "reader")
        assert {message_id for message_id, _ in before} <= set(seen)
        faults.write_text(json.dumps({"rules": []}))
        time.sleep(0.05)
        assert _send(broker.address, 3, start=50)


def test_out_of_descriptors_for_a_queue_file_is_a_retriable_refusal(tmp_path: Path) -> None:
    home = tmp_path / "broker"
    faults = tmp_path / "faults.json"
    with _start(home, fault_file=str(faults)) as broker:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic(TOPIC, queues=2)
            admin.create_topic("other", queues=1)
        _send(broker.address, 4)
        # every attempt of one send fails: creating the file, and again after closing idle ones
        retries = 3  # the producer's own attempts
        rule = {"op": "open", "target": "consumequeue", "errno": "EMFILE", "count": 2 * retries}
        _arm(faults, rule)
        with SyncProducer(servers=broker.address) as producer:
            with pytest.raises(TooManyRequestsError) as refused:
                producer.send(Message(topic="other", body=b"new queue file needed"))
            assert "file descriptor" in str(refused.value)
            # the store is not failed: other queues keep working
            producer.send(Message(topic=TOPIC, body=b"still fine"))
        with SyncProducer(servers=broker.address) as producer:
            producer.send(Message(topic="other", body=b"works again"))
        assert "Traceback" not in broker.log()


def test_a_killed_broker_with_a_real_descriptor_limit_still_answers(tmp_path: Path) -> None:
    """The process's real RLIMIT_NOFILE lowered under it: sends to new queues are refused with
    a retriable error (never a hang), the connection keeps working, and nothing is lost."""
    home = tmp_path / "broker"
    with _start(home) as broker:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic("wide", queues=64)
        assert broker.process is not None
        pid = broker.process.pid
        with SyncProducer(servers=broker.address) as producer:
            producer.send(Message(topic="wide", body=b"warm-up"))
            used = len(os.listdir(f"/proc/{pid}/fd"))
            import resource

            old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (used + 4, old[1]))
            stored, refused = 0, []
            try:
                for i in range(64):
                    try:
                        producer.send(Message(topic="wide", body=b"%d" % i))
                        stored += 1
                    except PocketMQError as exc:
                        refused.append(exc)
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
            assert stored >= 1
            assert all(isinstance(e, TooManyRequestsError) for e in refused), refused
            producer.send(Message(topic="wide", body=b"after"))
        assert broker.process.poll() is None
    assert broker.process.returncode == 0 or broker.process.returncode == -signal.SIGTERM


def test_a_group_that_consumed_a_lost_tail_still_gets_every_new_message(tmp_path: Path) -> None:
    """A machine crash loses the last records and their queue entries, but the group had read
    them and its committed offset was saved: new messages must not take the offsets the group
    already passed (they were never delivered: 0 of 40 before the fix)."""
    home = tmp_path / "broker"
    lazy = {"flush_mode": "async", "flush_interval": 3600.0, "flush_dirty_bytes": 1 << 30}
    broker = _start(home, **lazy)
    try:
        with SyncAdmin(servers=broker.address) as admin:
            admin.create_topic(TOPIC, queues=1)
        _send(broker.address, 100)
        assert len(_consume_all(broker.address, "billing")) == 100
        time.sleep(1.5)  # the broker saves offsets and pop state every second
    finally:
        broker.kill()
    # what a machine crash leaves: the unflushed tail of the log and of the queue is gone
    cut = _record_offsets(home)[60]
    os.truncate(_segment_of(home, cut), cut % SEGMENT_SIZE)
    shutil.rmtree(_store(home) / "consumequeue" / TOPIC)
    with _start(home, **lazy) as broker:
        fresh = {message_id for message_id, _ in _send(broker.address, 40, start=1000)}
        seen = set(_consume_all(broker.address, "billing"))
        assert seen == fresh
