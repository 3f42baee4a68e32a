"""The store's compiled group (consume queue and commit log: docs/design.md, "Compiled hot
paths") against its pure modules: the same random appends, reads, lookups, restarts and
retention give the same answers and the same bytes in every file. One child process runs each
implementation (a process uses one or the other for all its stores); skipped without a
compiled build unless ``POCKETMQ_REQUIRE_EXTENSIONS=1``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.twins import compiled_twin

from .conftest import store_files

# run in a child: appends random batches (refusals, segment, queue-file and index-file roll-overs
# included) with a fixed clock, reopens the store half-way, reads and looks keys up, and prints
# what it was answered; the files it leaves are compared byte for byte
_SCRIPT = r"""
import json, random, sys
from pocketmq.compiled import COMPILED
from pocketmq.store import MessageStore, StoreConfig, StoreMessage

config = StoreConfig(
    segment_size=64 * 1024,
    consume_queue_entries_per_file=50,
    index_max_entries=300,
    min_free_disk_bytes=0,
    flush_interval=3600.0,
    checkpoint_interval=3600.0,
)
rng = random.Random(32)
group = ("pocketmq.store._commitlog", "pocketmq.store._consumequeue", "pocketmq.store._writer")
answers = [sorted(n for n in COMPILED if n in group)]


def batch(number):
    messages = []
    for i in range(rng.randint(1, 40)):
        topic = rng.choice(["orders", "payments", "%RETRY%g", "bad topic"])
        body = bytes(rng.randrange(256) for _ in range(rng.choice([1, 50, 700, 3000])))
        props = {"UNIQ_KEY": f"M{number}-{i}"}
        if rng.random() < 0.5:
            props["KEYS"] = " ".join(f"k{rng.randrange(30)}" for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.3:
            props["TAGS"] = rng.choice(["a", "b"])
        messages.append(
            StoreMessage(topic, rng.randrange(-1, 4), body, props, born_timestamp=1_700_000_000_000)
        )
    return messages


def clock():
    return 1_700_000_000.0


for round in range(2):
    with MessageStore.open(sys.argv[1], config, clock=clock) as store:
        for number in range(30):
            results = store.append(batch(round * 100 + number))
            answers.append([[r.status.name, r.queue_offset, r.physical_offset] for r in results])
        for topic in ("orders", "payments"):
            for queue_id in range(4):
                got = store.get_messages(topic, queue_id, 0, max_count=64)
                answers.append([got.status.name, got.next_offset, got.max_offset,
                                [m.message_id for m in got.messages]])
        answers.append([len(store.query_by_key("orders", f"k{k}")) for k in range(30)])
        answers.append([m.queue_offset for m in store.query_by_id(f"M{round * 100 + 7}-0")])
print(json.dumps(answers))
"""


def _run(directory: Path, pure: bool) -> list[object]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("POCKETMQ_NO_EXTENSIONS", None)
    if pure:
        env["POCKETMQ_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(directory)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    answers: list[object] = json.loads(done.stdout)
    return answers


def test_the_compiled_group_answers_and_writes_what_the_pure_modules_do(tmp_path: Path) -> None:
    for module in ("_consumequeue", "_commitlog", "_writer"):
        compiled_twin("pocketmq.store." + module)
    pure = _run(tmp_path / "pure", pure=True)
    fast = _run(tmp_path / "fast", pure=False)
    assert pure[0] == [], "the pure run loaded a compiled module"
    assert fast[0] == [
        "pocketmq.store._commitlog",
        "pocketmq.store._consumequeue",
        "pocketmq.store._writer",
    ]
    assert fast[1:] == pure[1:]
    assert any(status == "PUT_OK" for batch in pure[1:61] for status, *_ in batch)  # type: ignore[attr-defined]
    assert store_files(tmp_path / "fast") == store_files(tmp_path / "pure")


@pytest.mark.parametrize("name", ["consumequeue", "commitlog", "writer"])
def test_the_public_module_exports_the_private_modules_names(name: str) -> None:
    """What importers use is there whichever implementation was loaded."""
    import importlib

    public = importlib.import_module(f"pocketmq.store.{name}")
    for exported in public.__all__:
        assert getattr(public, exported) is not None
