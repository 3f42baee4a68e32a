"""A writer for the kill -9 test: appends with sync flush, prints every acknowledged message.

Run as ``python writer_process.py DIR``; each line is ``<message id> <queue offset>`` and is
printed only after the store acknowledged the write (fsync done).
"""

from __future__ import annotations

import random
import sys
import threading

from pocketmq.store import FlushMode, MessageStore, PutStatus, StoreConfig, StoreMessage

CONFIG = StoreConfig(
    flush_mode=FlushMode.SYNC,
    segment_size=256 * 1024,
    consume_queue_entries_per_file=100,
    index_max_entries=500,
    checkpoint_interval=0.05,
    min_free_disk_bytes=0,
)


def main() -> None:
    store = MessageStore.open(sys.argv[1], CONFIG)
    lock = threading.Lock()
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)

    def write(worker: int) -> None:
        sequence = 0
        while True:
            batch = []
            for _ in range(rng.randint(1, 8)):
                message_id = f"W{worker}-{sequence}"
                sequence += 1
                batch.append(
                    StoreMessage(
                        topic="killed",
                        queue_id=worker % 3,
                        body=message_id.encode() * rng.randint(1, 60),
                        properties={"UNIQ_KEY": message_id},
                    )
                )
            results = store.put(batch)
            with lock:
                for message, result in zip(batch, results, strict=True):
                    if result.status is PutStatus.PUT_OK:
                        print(message.properties["UNIQ_KEY"], result.queue_id, result.queue_offset)
                sys.stdout.flush()

    for worker in range(4):
        threading.Thread(target=write, args=(worker,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
