"""Hard limits of the native protocol; both sides enforce them before allocating anything."""

from typing import Final

__all__ = [
    "HEADER_SIZE",
    "MAX_FRAME_BEFORE_HELLO",
    "MAX_FRAME_BODY",
    "MAX_QUERY_RESULTS",
    "PROTOCOL_VERSION",
]

PROTOCOL_VERSION: Final = 1
HEADER_SIZE: Final = 12
MAX_FRAME_BODY: Final = 16 * 1024 * 1024
# Until a connection's HELLO is answered its peer is unknown: a HELLO is a few hundred bytes, so
# a server accepts no bigger frame before it (docs/protocol.md "Limits").
MAX_FRAME_BEFORE_HELLO: Final = 64 * 1024
# a QUERY_MESSAGE reads this many matches at most per broker (skip + max_count): its candidates
# are read whole (docs/semantics.md, "Connections"; `pocketmq message query --max`)
MAX_QUERY_RESULTS: Final = 256
