"""``pocketmq serve`` and ``pocketmq namesrv``: run a broker (or a name server) until SIGTERM.

The ready line is a contract scripts wait for; it is printed once, after every listener is up.
SIGTERM and SIGINT shut down gracefully (flush, persist offsets) and exit 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import stat
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

from pocketmq.broker import BrokerConfig
from pocketmq.cli._app import main
from pocketmq.cli.refusal import REFUSALS, refusal
from pocketmq.compiled import COMPILED
from pocketmq.errors import InvalidArgumentError
from pocketmq.server import AppConfig, BrokerApp, NameServer
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.auth.network import is_loopback
from pocketmq.server.loops import LOOPS, loop_factory
from pocketmq.server.loops import run as run_on_loop
from pocketmq.store import FlushMode, StoreConfig

__all__ = [
    "LOG_LEVELS",
    "StartRefused",
    "build_config",
    "given",
    "run_until_signalled",
    "setup_logging",
    "warn_if_key_is_readable",
]

C = TypeVar("C")
LOG_LEVELS = ["debug", "info", "warning", "error"]


def _apply(target: C, values: dict[str, Any], section: str) -> C:
    """``target`` with the settings of one config-file section, each converted to its field's
    type and checked (an unknown name, a wrong type or an unknown value is an error here, at
    start-up, never a setting that silently means something else)."""
    known = {f.name for f in fields(target)}  # type: ignore[arg-type]
    for key in values:
        if key not in known:
            raise click.UsageError(f"unknown setting [{section}] {key} in the config file")
    merged = {**msgspec.to_builtins(target), **values}
    try:
        return msgspec.convert(merged, type(target))
    except msgspec.ValidationError as exc:
        raise click.UsageError(f"bad setting in [{section}]: {exc}") from None


def given(**options: Any) -> dict[str, Any]:
    """The command-line options that were given (click passes None for the others): each is
    named as its config-file key, so it goes over the file's value."""
    return {key: value for key, value in options.items() if value is not None}


def _read_config_file(config_file: Path | None) -> dict[str, Any]:
    if config_file is None:
        return {}
    try:
        return tomllib.loads(config_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.UsageError(f"cannot read {config_file}: {exc}") from None


def build_config(
    config_file: Path | None,
    *,
    server: Mapping[str, Any] | None = None,
    broker: Mapping[str, Any] | None = None,
    flush: str | None = None,
) -> AppConfig:
    """Defaults, then the config file, then the command line's options (the last word wins):
    ``server`` and ``broker`` are ``[server]`` and ``[broker]`` keys, ``flush`` the store's.

    The file's ``[server]`` table and the options are checked together, once, by the sections'
    own checks (``AppConfig.from_table``, the path Python takes too): a TLS key on the command
    line completes a certificate in the file."""
    raw = _read_config_file(config_file)
    store = _apply(StoreConfig(), raw.pop("store", {}), "store")
    if flush is not None:
        store = replace(store, flush_mode=FlushMode(flush))
    broker_config = _apply(BrokerConfig(), {**raw.pop("broker", {}), **(broker or {})}, "broker")
    table = {**raw.pop("server", {}), **(server or {})}
    if raw:
        raise click.UsageError(f"unknown config sections: {', '.join(sorted(raw))}")
    try:
        config = AppConfig.from_table(table, replace(broker_config, store=store))
        config.replication_server_tls()  # loads the TLS files: a bad one stops the start here
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    store_host = f"{config.listen.host}:{config.listen.port}"
    return replace(
        config, broker=replace(config.broker, store=replace(store, store_host=store_host))
    )


def warn_if_key_is_readable(key_path: str | None) -> None:
    """One WARNING line when the TLS private key can be read by its group or other users: they
    could impersonate the broker or decrypt captured traffic (docs/security.md, "Files")."""
    if not key_path:
        return
    try:
        mode = stat.S_IMODE(os.stat(key_path).st_mode)
    except OSError:
        return  # loading it fails with the reason
    if mode & 0o077:
        logging.getLogger("pocketmq.server").warning(
            "the TLS key %s is readable by %s (mode %o): chmod 600 it", key_path,
            "other users" if mode & 0o007 else "its group", mode,
        )  # fmt: skip


class StartRefused(Exception):
    """``start`` failed: what it raised is the cause, for a one-line message (cli/refusal.py);
    errors after the ready line are not refusals and keep their own form."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _run_until_signalled(start: Any, ready: Any, stop: Any) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await start()
    except REFUSALS as exc:
        raise StartRefused(exc) from exc
    # Everything allocated so far lives as long as the process: keep the cyclic collector from
    # re-scanning it, and let it run less often (fewer pauses on the request path).
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    click.echo(ready())
    sys.stdout.flush()
    await stopping.wait()
    await stop()


def setup_logging(level: str) -> None:
    """Log to stderr at ``level``, the format every long-running command uses."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@click.option("--data-dir", help="Where messages and state live.  [default: ./data]")
@click.option("--host", help="Address to listen on.  [default: 127.0.0.1]")
@click.option(
    "--port", type=int, help="Native protocol port (0 = any free port).  [default: 10911]"
)
@click.option("--grpc-port", type=int, help="gRPC (RocketMQ 5) port.  [default: 8081]")
@click.option("--no-grpc", is_flag=True, help="Do not serve the gRPC (official client) protocol.")
@click.option(
    "--grpc-workers",
    type=click.IntRange(min=0),
    help="Serve gRPC from this many proxy processes sharing the port (docs/proxy.md).  "
    "[default: 0, in the broker process]",
)
@click.option("--http-port", type=int, help="Metrics and health checks (HTTP).  [default: 5557]")
@click.option("--no-http", is_flag=True, help="Do not serve metrics and health checks.")
@click.option("--tls-cert", help="PEM certificate chain: TLS on the native, gRPC and HTTP ports.")
@click.option("--tls-key", help="PEM private key of --tls-cert.")
@click.option(
    "--tls-ca",
    help="CA bundle a slave verifies its master's replication certificate with (and the "
    "broker its --namesrv-tls name server's).",
)
@click.option(
    "--namesrv-tls",
    is_flag=True,
    default=None,
    help="The --namesrv name server speaks TLS (pocketmq namesrv --tls-cert).",
)
@click.option(
    "--grpc-tls",
    type=click.Choice(["disabled", "permissive", "enforcing"]),
    help="TLS on the gRPC port; permissive: TLS and plaintext on the one port. Without "
    "--tls-cert a self-signed certificate is generated.  [default: enforcing with --tls-cert, "
    "else permissive]",
)
@click.option(
    "--authentication",
    is_flag=True,
    default=None,
    help="gRPC requests must be signed by a user of `pocketmq user` (docs/security.md).",
)
@click.option(
    "--insecure",
    is_flag=True,
    default=None,
    help="Listen on a non-loopback --host without --authentication all the same.",
)
@click.option(
    "--authorization",
    is_flag=True,
    default=None,
    help="Normal users may only do what `pocketmq acl` rules allow (needs --authentication).",
)
@click.option(
    "--cluster-key",
    type=click.Path(dir_okay=False),
    help="The cluster's key file: how brokers, name servers and proxies prove they belong "
    "(docs/security.md).  [default with --authentication: DATA/config/cluster.key, created]",
)
@click.option("--namesrv-port", type=int, help="Embedded name server port.  [default: 9876]")
@click.option(
    "--namesrv", help="Use an external name server host:port instead of the embedded one."
)
@click.option(
    "--broker-name",
    help="This broker's group (the brokers of a group replicate).  [default: broker-a]",
)
@click.option("--broker-id", type=int, help="Id in the group: 0 master, >= 1 slaves.  [default: 0]")
@click.option("--role", type=click.Choice(["master", "slave"]), help="[default: from --broker-id]")
@click.option("--master", help="A slave's master, as its replication address host:port.")
@click.option("--ha-port", type=int, help="A master's replication port.  [default: --port + 1]")
@click.option(
    "--controller",
    help="Automatic failover through etcd: etcd://host:port[,host:port...] (docs/replication.md).",
)
@click.option(
    "--flush", type=click.Choice(["sync", "async"]), help="Flush policy.  [default: async]"
)
@click.option(
    "--config", "config_file", type=click.Path(exists=True, path_type=Path), help="TOML file."
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(LOG_LEVELS),
    help="How much goes to stderr.",
)
@click.option(
    "--loop",
    type=click.Choice(list(LOOPS)),
    default="auto",
    show_default=True,
    help="Event loop: auto (uvloop when installed, else asyncio), asyncio or uvloop.",
)
def serve(
    data_dir: str | None,
    host: str | None,
    port: int | None,
    grpc_port: int | None,
    no_grpc: bool,
    grpc_workers: int | None,
    http_port: int | None,
    no_http: bool,
    tls_cert: str | None,
    tls_key: str | None,
    authentication: bool | None,
    authorization: bool | None,
    insecure: bool | None,
    grpc_tls: str | None,
    tls_ca: str | None,
    namesrv_tls: bool | None,
    cluster_key: str | None,
    namesrv_port: int | None,
    namesrv: str | None,
    broker_name: str | None,
    broker_id: int | None,
    role: str | None,
    master: str | None,
    ha_port: int | None,
    controller: str | None,
    flush: str | None,
    config_file: Path | None,
    log_level: str,
    loop: str,
) -> None:
    """Run a broker (with an embedded name server unless --namesrv is given)."""
    setup_logging(log_level)
    server = given(  # the options named as their [server] keys
        host=host, port=port, grpc_port=grpc_port, grpc_workers=grpc_workers,
        http_port=http_port, tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca,
        namesrv_tls=namesrv_tls, grpc_tls=grpc_tls, authentication=authentication,
        authorization=authorization, insecure=insecure, cluster_key=cluster_key,
        namesrv_port=namesrv_port, namesrv=namesrv, master=master, ha_port=ha_port,
        controller=controller,
    )  # fmt: skip
    if namesrv is not None:
        server["namesrv_port"] = None  # an external name server: no embedded one
    if no_grpc:
        server["grpc_port"] = None
    if no_http:
        server["http_port"] = None
    broker = given(data_dir=data_dir, broker_name=broker_name, broker_id=broker_id, role=role)
    if role is None and broker_id is not None and broker_id > 0:
        broker["role"] = "slave"  # RocketMQ's convention: id 0 is the master
    config = build_config(config_file, server=server, broker=broker, flush=flush)
    _refuse_an_open_door(config)
    warn_if_key_is_readable(config.tls.key)
    _run_broker(config, loop, config_file)


def _refuse_an_open_door(config: AppConfig) -> None:
    """A network address without authentication lets anyone there do anything: say so, unless
    ``insecure`` (docs/security.md)."""
    host = config.listen.host
    if not (config.auth.authentication or config.auth.insecure or is_loopback(host)):
        raise click.UsageError(
            f"--host {host} lets other machines connect, and without --authentication "
            "anyone there may read, write and delete every topic: add --authentication "
            "(docs/security.md) or --insecure"
        )


def _run_broker(config: AppConfig, loop: str, config_file: Path | None) -> None:
    """Run the broker on the event loop ``loop`` until a signal; a refused start is one line
    naming the port or file at fault (docs/cli.md, "Errors")."""
    app = BrokerApp(config)
    try:
        used, _ = loop_factory(loop)
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    server_log = logging.getLogger("pocketmq.server")
    server_log.info("event loop: %s", used)
    # which twin of each compiled module runs (docs/design.md, "Compiled hot paths")
    server_log.info("compiled hot paths: %s", ", ".join(COMPILED) or "none (pure Python)")
    try:
        run_on_loop(_run_until_signalled(app.start, app.ready_line, app.close), loop)
    except StartRefused as refused:
        # where in the code: --log-level debug
        server_log.debug("start-up refused", exc_info=refused.cause)
        port = config.listen.port
        message = refusal(
            refused.cause,
            what="the broker",
            data_dir=config.broker.data_dir,
            config_file=str(config_file) if config_file else None,
            ports={
                "the native port, --port": port,
                "the gRPC port, --grpc-port": config.grpc.port,
                "the HTTP port, --http-port": config.http.port,
                "the embedded name server's port, --namesrv-port": config.namesrv.port,
                "the replication port, --ha-port": config.ha.port or port + 1,
            },
        )
        raise click.ClickException(message) from None
    except (OSError, InvalidArgumentError) as exc:  # after the start: while running or stopping
        raise click.ClickException(f"the broker failed: {exc}") from None


@main.command()
@click.option("--host", help="Address to listen on.  [default: 127.0.0.1]")
@click.option("--port", type=int, help="Port to listen on.  [default: 9876]")
@click.option("--tls-cert", help="PEM certificate chain: the name server speaks TLS.")
@click.option("--tls-key", help="PEM private key of --tls-cert.")
@click.option(
    "--authentication",
    is_flag=True,
    default=None,
    help="Every connection must authenticate: brokers with the cluster key, clients as users "
    "(docs/security.md). Needs --cluster-key.",
)
@click.option(
    "--cluster-key",
    type=click.Path(dir_okay=False),
    help="The cluster's key file (`pocketmq cluster key create`): brokers prove it to register.",
)
@click.option(
    "--data-dir",
    help="Where the users clients authenticate as live (config/users.json, as a broker's).  "
    "[default: ./data]",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, path_type=Path),
    help="TOML file: its [server] connection limits, TLS, authentication and cluster_key.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(LOG_LEVELS),
    help="How much goes to stderr.",
)
def namesrv(
    host: str | None,
    port: int | None,
    tls_cert: str | None,
    tls_key: str | None,
    authentication: bool | None,
    cluster_key: str | None,
    data_dir: str | None,
    config_file: Path | None,
    log_level: str,
) -> None:
    """Run a stand-alone name server for a cluster of brokers (over TLS with --tls-cert; brokers
    then need --namesrv-tls, clients their TLS setting; with --authentication only members of
    the cluster register: docs/security.md)."""
    setup_logging(log_level)
    warn_if_key_is_readable(tls_key)
    config = build_config(
        config_file,
        server=given(
            host=host, tls_cert=tls_cert, tls_key=tls_key, authentication=authentication,
            cluster_key=cluster_key,
        ),
        broker=given(data_dir=data_dir),
    )  # fmt: skip
    listen_port = port if port is not None else 9876
    try:
        server = NameServer(
            tls=config.tls.context(),
            limits=config.limits,
            authenticator=_namesrv_authenticator(config),
            max_brokers=config.namesrv.max_brokers,
        )
    except InvalidArgumentError as exc:
        raise click.UsageError(str(exc)) from None

    async def start() -> None:
        await server.start(config.listen.host, listen_port)

    try:
        asyncio.run(
            _run_until_signalled(
                start, lambda: f"pocketmq namesrv ready namesrv={server.address}", server.close
            )
        )
    except StartRefused as refused:
        ports = {"the name server's port, --port": port}
        message = refusal(refused.cause, what="the name server", ports=ports)
        raise click.ClickException(message) from None


def _namesrv_authenticator(config: AppConfig) -> Authenticator | None:
    """A stand-alone name server's identities: the cluster key (required) and the users of
    its data directory (docs/security.md, "Trust inside the cluster")."""
    if not config.auth.authentication:
        return None
    if not config.auth.cluster_key:
        raise InvalidArgumentError(
            "a name server with --authentication needs the cluster's key: --cluster-key FILE "
            "(the file every broker of the cluster has; create one with `pocketmq cluster key "
            "create FILE`)"
        )
    from pocketmq.server.auth.users import UserStore

    users = UserStore(os.path.join(config.broker.data_dir, "config"))
    users.load()
    if not users.users():
        logging.getLogger("pocketmq.namesrv").warning(
            "no users in %s/config/users.json: only members of the cluster can authenticate "
            "here, clients cannot (copy the brokers' users.json and users.key)",
            config.broker.data_dir,
        )
    authenticator = Authenticator(users, config.cluster_key_file(), throttle=config.auth.throttle())
    authenticator.reachable |= config.auth.reachable()
    return authenticator


def run_until_signalled(start: Any, ready: Any, stop: Any) -> None:
    """Run ``start``, print ``ready()``, wait for SIGTERM/SIGINT, run ``stop`` (asyncio loop)."""
    asyncio.run(_run_until_signalled(start, ready, stop))
