"""Hash index files: message id and business key to physical offsets (docs/storage-format.md §3).

The code is in the private module ``_index``, compiled by the build with ``_consumequeue`` and
``_commitlog`` as one group (docs/design.md, "Compiled hot paths"); this module exports the
compiled twin when it was built from the same sources and ``POCKETMQ_NO_EXTENSIONS`` is not
set, else the pure module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.compiled import load

__all__ = [
    "ID_HASH_SEED",
    "IndexFile",
    "IndexService",
    "id_hash",
    "id_key",
    "key_hashes",
    "topic_key",
]

if TYPE_CHECKING:
    from pocketmq.store._index import (
        ID_HASH_SEED,
        IndexFile,
        IndexService,
        _PackedSlots,
        id_hash,
        id_key,
        key_hashes,
        topic_key,
    )
else:
    _impl = load("pocketmq.store._index")
    ID_HASH_SEED, IndexFile, IndexService = _impl.ID_HASH_SEED, _impl.IndexFile, _impl.IndexService
    id_hash, id_key, key_hashes, topic_key = (
        _impl.id_hash,
        _impl.id_key,
        _impl.key_hashes,
        _impl.topic_key,
    )
    _PackedSlots = _impl._PackedSlots  # a big-endian host's slot table (tests)
