"""The layering of DESIGN §1 as a rule: imports flow in one direction only.

Each package lists the pocketmq packages it may import and the standard-library modules it must
not touch (the store has no networking, the protocol does no I/O at all).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pocketmq"

# package -> pocketmq packages it may import (itself and ``errors`` always allowed)
ALLOWED: dict[str, set[str]] = {
    # the values every layer trades (messages, outcomes, groups, clients, transactions): pure,
    # they import nothing of pocketmq but ``errors`` (docs/design.md, "Layers")
    "model": set(),
    "store": set(),
    "protocol": {"model"},  # the native protocol carries the message values as they are
    "broker": {"store", "model"},
    "server": {"broker", "protocol", "model"},
    "client": {"protocol", "model"},
    "reliability": {"client"},  # never the wire protocol: it works through the SDK
    "pipeline": {"client", "reliability"},  # through the SDK and the toolkit only
    # a gRPC gateway: the server's gRPC adapter over the SDK's native connection (docs/proxy.md);
    # never the broker core (nor, through it, the store): the port speaks pocketmq.model
    "proxy": {"server", "client", "protocol", "model"},
    "testing": {"server", "broker", "store", "client", "protocol", "model"},
    "cli": {"*"},
    "bench": {"*"},
}
# top-level modules every layer may use: pure values and functions, no I/O (``batching``: the
# one-request-in-flight merge, asyncio futures only)
SHARED = {
    *("batching", "compiled", "contract", "errors", "ids", "names", "properties", "routing"),
    *("lazy", "settings"),
    "version",
}
NETWORKING = {"socket", "ssl", "selectors", "asyncio", "http", "urllib", "grpc", "socketserver"}
FORBIDDEN_STDLIB: dict[str, set[str]] = {
    "store": NETWORKING,
    "protocol": NETWORKING | {"threading", "os"},
    "broker": NETWORKING - {"asyncio"},
    "model": NETWORKING | {"threading", "os"},
}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _package_of(path: Path) -> str | None:
    rel = path.relative_to(SRC).parts
    if len(rel) == 1:
        return None  # top-level modules: __init__, errors, ...
    return rel[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    pkg_parts = path.relative_to(SRC.parent).with_suffix("").parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[: len(pkg_parts) - node.level])
                if path.name == "__init__.py":
                    base = list(pkg_parts[: len(pkg_parts) - node.level + 1])
                mod = ".".join([*base, node.module] if node.module else base)
                found.append((node.lineno, mod))
            elif node.module == "pocketmq":
                found.extend((node.lineno, f"pocketmq.{alias.name}") for alias in node.names)
            elif node.module:
                found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_layering(path: Path) -> None:
    package = _package_of(path)
    if package is None:
        return
    allowed = ALLOWED.get(package)
    assert allowed is not None, f"package {package!r} has no layering rule in this test"
    forbidden = FORBIDDEN_STDLIB.get(package, set())
    for lineno, module in _imports(path):
        parts = module.split(".")
        if parts[0] == "pocketmq":
            target = parts[1] if len(parts) > 1 else "__init__"
            if target in SHARED or target == package or "*" in allowed:
                continue
            assert target in allowed, (
                f"{path.relative_to(SRC)}:{lineno} imports pocketmq.{target}; "
                f"{package} may import only {sorted(allowed | {'errors'})}"
            )
        else:
            assert parts[0] not in forbidden, (
                f"{path.relative_to(SRC)}:{lineno} imports {module}; {package} must not use "
                f"{sorted(forbidden)}"
            )


# The two wire formats of the protocol layer stay apart: the remoting codec (RocketMQ's wire)
# shares no module with the native one, so either can change alone (docs/remoting.md).
REMOTING = SRC / "protocol" / "remoting"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_the_two_wire_codecs_do_not_import_each_other(path: Path) -> None:
    if _package_of(path) != "protocol":
        return
    remoting = REMOTING in path.parents
    for lineno, module in _imports(path):
        if not module.startswith("pocketmq.protocol"):
            continue
        imports_remoting = module.startswith("pocketmq.protocol.remoting")
        if remoting:
            assert imports_remoting, (
                f"{path.relative_to(SRC)}:{lineno} imports {module}; the remoting codec may"
                " import only itself in pocketmq.protocol"
            )
        else:
            assert not imports_remoting, (
                f"{path.relative_to(SRC)}:{lineno} imports {module}; the native codec must not"
                " depend on the remoting one"
            )


def test_every_package_has_a_rule() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), sorted(packages - set(ALLOWED))


# The two protocol servers stay apart the same way (docs/remoting.md, "Where it listens"): the
# native server (server/native) and the remoting one (server/remoting) never import each other,
# with no exception. What a shared port needs from both — the contract of a connection, what a
# port's connections share, the sniffer that picks one per connection — is in
# server/listening.py, which imports neither; the process composing the servers (server/app.py,
# server/namesrv/server.py) hands a remoting port to the native listener.
SERVERS = {"native": "remoting", "remoting": "native"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_the_two_protocol_servers_do_not_import_each_other(path: Path) -> None:
    parts = path.relative_to(SRC).parts
    if parts[0] != "server":
        return
    own = parts[1] if len(parts) > 2 else None
    for lineno, module in _imports(path):
        target = module.split(".")
        if target[:2] != ["pocketmq", "server"] or len(target) < 3:
            continue
        if own in SERVERS:
            assert target[2] != SERVERS[own], (
                f"{path.relative_to(SRC)}:{lineno} imports {module}; server/{own} must not "
                f"import server/{SERVERS[own]} (they meet in server/listening.py)"
            )
        if path.name == "listening.py" and len(parts) == 2:
            assert target[2] not in SERVERS, (
                f"{path.relative_to(SRC)}:{lineno} imports {module}; server/listening.py "
                "is shared by both protocol servers and imports neither"
            )


# The gRPC adapter speaks to a broker only through its port (server/grpc/port.py), so it runs the
# same over the broker in process and over the proxy's native connection: it never imports the
# native server, whose handlers, conversions and connections are that other adapter's
# (docs/design.md, "Layers").


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_the_grpc_adapter_does_not_import_the_native_server(path: Path) -> None:
    parts = path.relative_to(SRC).parts
    if parts[:2] != ("server", "grpc"):
        return
    for lineno, module in _imports(path):
        assert not module.startswith("pocketmq.server.native"), (
            f"{path.relative_to(SRC)}:{lineno} imports {module}; server/grpc must not import "
            "server/native (the two adapters meet at the broker's port)"
        )
