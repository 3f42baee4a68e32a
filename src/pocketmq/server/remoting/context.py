"""What the broker's remoting handlers share: the broker, the ACL and the address that names
the broker in message ids (docs/remoting.md, "How the handlers plug in").

Each family of handlers (producer side, consumer side, admin) is built from one
:class:`BrokerSide` by ``server/remoting/handlers.py``; the process composing the servers
(``server/app.py``) makes it once the broker is open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pocketmq.protocol.remoting.stored import pack_address

if TYPE_CHECKING:
    from pocketmq.broker import Broker
    from pocketmq.server.auth.authorizer import Authorizer

__all__ = ["BrokerSide"]


@dataclass
class BrokerSide:
    """The broker a remoting port serves. ``advertised`` gives the broker's ``ip:port`` as
    routes name it: the store host of every ``offsetMsgId`` (docs/remoting.md, "Message ids");
    ``authorizer`` is the ACL (authentication and authorization on) or None;
    ``topics_changed`` registers the broker's topics with its name server now (a heartbeat
    created a group's retry topic: ``clients.py``)."""

    broker: Broker
    advertised: Callable[[], str]
    authorizer: Authorizer | None = None
    topics_changed: Callable[[], Awaitable[None]] | None = None
    _store_host: str = field(default="", init=False)

    def store_host(self, fallback: str = "127.0.0.1:0") -> str:
        """The advertised address when it is an IP address (a message id holds one); otherwise
        ``fallback`` (the address the client connected to)."""
        if not self._store_host:
            try:
                address = self.advertised()
            except (AssertionError, OSError):  # the port is not open yet
                return fallback
            if pack_address(address)[1] == 0:  # a host name: no address to put in an id
                return fallback
            self._store_host = address
        return self._store_host
