"""The names the HTTP port answers to (docs/security.md, "Dashboard and HTTP API").

A web page can make a victim's browser send requests to a dashboard on loopback through **DNS
rebinding**: the attacker's name first resolves to the attacker's server, which serves the page,
then to 127.0.0.1, so the page's requests reach the broker — as same-origin requests, able to
read the answers and the CSRF cookie. What still names the attacker is the ``Host`` header: the
browser sends the name it resolved. So a request is served only when its ``Host`` is one of the
broker's own names:

- the names configured in ``[server] http_hosts`` (what a reverse proxy or DNS calls it);
- the address the port is bound to, and the advertised host;
- ``localhost`` and the loopback addresses when the port is bound to loopback or to a wildcard
  address (no outside name resolves to ``localhost`` in a browser);
- when bound to a wildcard address (0.0.0.0, ::), any IP address: a browser sends an address as
  ``Host`` only for a URL naming that address, which no rebinding can produce.

A browser's ``Origin`` on a change must name one of these too, with the port the request came
to (another service on the same machine is another origin).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pocketmq.server.auth.network import is_loopback

__all__ = ["LOOPBACK_NAMES", "HostPolicy"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = ("", "0.0.0.0", "::")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# what a Host header may contain: a name, an IPv4 address, or a bracketed IPv6 one, and a port
_HOST_SYNTAX = re.compile(r"[A-Za-z0-9._-]+(:\d{0,5})?|\[[0-9A-Fa-f:.]+\](:\d{0,5})?")


def _normalised(name: str) -> str:
    """A name or address as the policy compares it: lower case, no trailing dot, no brackets,
    an IPv6 address in its compressed form."""
    name = name.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Which ``Host`` headers and ``Origin`` headers are this broker's (module doc)."""

    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def build(
        cls, bind_host: str, configured: Iterable[str] = (), advertised: str | None = None
    ) -> HostPolicy:
        """The policy of a port bound to ``bind_host`` (module doc)."""
        names = {_normalised(name) for name in configured if name.strip()}
        wildcard = bind_host in _WILDCARDS
        if not wildcard:
            names.add(_normalised(bind_host))
        if wildcard or is_loopback(bind_host):
            names |= LOOPBACK_NAMES
        if advertised:
            names.add(_normalised(advertised))
        return cls(frozenset(names), any_address=wildcard)

    def allows(self, host: str) -> bool:
        """Whether a ``Host`` header (a name or an address, with or without a port) is ours."""
        if not _HOST_SYNTAX.fullmatch(host):
            return False
        name = _normalised(urlsplit("//" + host).hostname or "")
        if not name:
            return False
        return name in self.names or (self.any_address and _is_address(name))

    def allows_origin(self, origin: str, host: str) -> bool:
        """Whether a browser's ``Origin`` is this dashboard: one of our names, at the port of
        the request's ``Host`` (``null`` and other schemes never are)."""
        parts = urlsplit(origin)
        default = _DEFAULT_PORTS.get(parts.scheme)
        if default is None or not self.allows(parts.netloc):
            return False
        try:
            origin_port = parts.port or default
            host_port = urlsplit("//" + host).port or default
        except ValueError:
            return False
        return origin_port == host_port
