"""RocketMQ's remoting protocol served on pocketmq's ports (docs/remoting.md): the connection,
the port that makes connections for a listener, the signature check and what a handler answers.

It does not import the native server (``server/native``), nor does that import it
(tests/test_layering.py): both meet in ``server/listening.py``, and the process composing the
servers hands a :class:`RemotingPort` to the native listener.
"""

from pocketmq.server.remoting.connection import (
    RemotingConnection,
    RemotingHandler,
    RemotingHandlerTable,
)
from pocketmq.server.remoting.outcomes import Reply, response_code
from pocketmq.server.remoting.port import RemotingPort
from pocketmq.server.remoting.signatures import SignatureCheck

__all__ = [
    "RemotingConnection",
    "RemotingHandler",
    "RemotingHandlerTable",
    "RemotingPort",
    "Reply",
    "SignatureCheck",
    "response_code",
]
