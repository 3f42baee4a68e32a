"""``pocketmq proxy``: a gRPC gateway for the official clients in front of one broker.

It prints a ready line once it serves (``pocketmq proxy ready grpc=H:P broker=NAME@H:P
http=H:P``, ``http=disabled`` without ``--http-port``) and stops gracefully on SIGTERM or SIGINT,
like ``pocketmq serve`` (docs/proxy.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import sys
from typing import TYPE_CHECKING

import click

from pocketmq.cli._app import main
from pocketmq.cli.refusal import refusal
from pocketmq.cli.serve import (
    LOG_LEVELS,
    StartRefused,
    run_until_signalled,
    setup_logging,
    warn_if_key_is_readable,
)
from pocketmq.errors import InvalidArgumentError
from pocketmq.server.auth.network import is_loopback

if TYPE_CHECKING:
    from pocketmq.proxy.gateway import GatewaySecurity, MetricsPort

__all__ = ["proxy"]


@main.command()
@click.option(
    "--broker",
    default="127.0.0.1:10911",
    show_default=True,
    help="The broker's native address (host:port) this proxy forwards to.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--grpc-port", default=8081, show_default=True, type=int, help="gRPC port.")
@click.option(
    "--advertise",
    default="",
    help="The address official clients are told to use.  [default: the one bound]",
)
@click.option(
    "--reuse-port",
    is_flag=True,
    help="Share the port with other proxies of the same broker (the kernel spreads clients).",
)
@click.option(
    "--data-dir",
    help="The broker's data directory, for its users and ACL rules (with --authentication).",
)
@click.option(
    "--authentication",
    is_flag=True,
    help="gRPC requests must be signed by a user of the broker's `pocketmq user` list.",
)
@click.option(
    "--authorization", is_flag=True, help="Normal users may only do what `pocketmq acl` allows."
)
@click.option("--tls-cert", help="PEM certificate chain served on the gRPC port.")
@click.option("--tls-key", help="PEM private key of --tls-cert.")
@click.option(
    "--grpc-tls",
    type=click.Choice(["disabled", "permissive", "enforcing"]),
    help="TLS on the gRPC port; permissive: TLS and plaintext on one port.  "
    "[default: enforcing with --tls-cert, else disabled]",
)
@click.option(
    "--broker-ca",
    help="The broker's native port speaks TLS: trust this CA bundle or certificate for it.",
)
@click.option(
    "--cluster-key",
    type=click.Path(dir_okay=False),
    help="Sign in to the broker as a member of the cluster with this key file "
    '(docs/security.md, "Trust inside the cluster").  [default: POCKETMQ_ACCESS_KEY]',
)
@click.option(
    "--insecure", is_flag=True, help="Listen on a non-loopback --host without --authentication."
)
@click.option(
    "--exit-with-stdin",
    is_flag=True,
    hidden=True,
    help="Stop when standard input closes (a worker of `serve --grpc-workers`).",
)
@click.option(
    "--ping-interval",
    type=float,
    default=0.0,
    hidden=True,
    help="Ask the broker GATEWAY_INFO this often (a worker's sign of life); 0: never.",
)
@click.option(
    "--http-port",
    type=int,
    help="Serve /metrics for Prometheus on this port of --host (0: any free port).  "
    "[default: none]",
)
@click.option(
    "--http-hosts",
    default="",
    help="Names (comma-separated) the metrics port answers to besides its address.",
)
@click.option(
    "--http-tls", is_flag=True, help="Serve /metrics over HTTPS with --tls-cert and --tls-key."
)
@click.option("--worker", default="", hidden=True, help="This worker's number (its metrics say).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(LOG_LEVELS),
    help="How much goes to stderr.",
)
def proxy(
    broker: str,
    host: str,
    grpc_port: int,
    advertise: str,
    reuse_port: bool,
    data_dir: str | None,
    authentication: bool,
    authorization: bool,
    tls_cert: str | None,
    tls_key: str | None,
    grpc_tls: str | None,
    broker_ca: str | None,
    cluster_key: str | None,
    insecure: bool,
    exit_with_stdin: bool,
    ping_interval: float,
    http_port: int | None,
    http_hosts: str,
    http_tls: bool,
    worker: str,
    log_level: str,
) -> None:
    """Serve the official RocketMQ 5 clients' gRPC for BROKER, forwarding over the native
    protocol (docs/proxy.md). To a broker with --authentication it signs in as a member of the
    cluster (--cluster-key), or else as POCKETMQ_ACCESS_KEY / POCKETMQ_SECRET_KEY (a super
    user)."""
    from pocketmq.proxy.gateway import Gateway  # grpc is heavy: only here

    setup_logging(log_level)
    if not exit_with_stdin:  # a broker's own worker: the broker has named its key already
        warn_if_key_is_readable(tls_key)
    _refuse_unsafe_options(host, advertise, data_dir, authentication, authorization, insecure)
    security = _security(
        broker, data_dir, authentication, authorization, tls_cert, tls_key, grpc_tls, broker_ca,
        cluster_key,
    )  # fmt: skip
    gateway = Gateway(
        broker,
        host,
        grpc_port,
        advertise=advertise,
        reuse_port=reuse_port,
        security=security,
        ping_interval=ping_interval,
        metrics=_metrics_port(http_port, http_hosts, http_tls, tls_cert, tls_key, worker),
    )

    async def start() -> None:
        if exit_with_stdin:
            _stop_when_stdin_closes()
        await gateway.start()

    try:
        run_until_signalled(start, gateway.ready_line, gateway.close)
    except StartRefused as refused:
        ports = {"the gRPC port, --grpc-port": grpc_port}
        message = refusal(refused.cause, what="the proxy", ports=ports)
        raise click.ClickException(message) from None


def _refuse_unsafe_options(
    host: str,
    advertise: str,
    data_dir: str | None,
    authentication: bool,
    authorization: bool,
    insecure: bool,
) -> None:
    """Options that would open the proxy to anyone, or give clients an address they cannot
    use, are usage errors (docs/security.md, docs/proxy.md)."""
    if not (authentication or insecure or is_loopback(host)):
        raise click.UsageError(
            f"--host {host} lets other machines connect, and without --authentication anyone "
            "there may read and write every topic: add --authentication or --insecure"
        )
    if host in ("0.0.0.0", "::", "") and not advertise:
        raise click.UsageError(
            f"--host {host or repr('')} listens on every address: say with --advertise which "
            "one clients should use (routes name it)"
        )
    if (authentication or authorization) and not data_dir:
        raise click.UsageError("--authentication needs --data-dir (the broker's users)")
    if authorization and not authentication:
        raise click.UsageError("--authorization needs --authentication")


def _security(
    broker: str,
    data_dir: str | None,
    authentication: bool,
    authorization: bool,
    tls_cert: str | None,
    tls_key: str | None,
    grpc_tls: str | None,
    broker_ca: str | None,
    cluster_key: str | None,
) -> GatewaySecurity:
    """Who the proxy's clients are, how it speaks TLS on both sides, and how it signs in to
    the broker; a file that cannot be loaded is a usage error."""
    from pocketmq.proxy.gateway import GatewaySecurity

    try:
        return GatewaySecurity.build(
            data_dir=data_dir,
            authentication=authentication,
            authorization=authorization,
            tls_cert=tls_cert,
            tls_key=tls_key,
            grpc_tls=grpc_tls or ("enforcing" if tls_cert else "disabled"),
            broker_ca=broker_ca,
            broker_host=broker.rpartition(":")[0],
            environment=os.environ,
            cluster_key=cluster_key,
        )
    except (OSError, InvalidArgumentError) as exc:
        raise click.UsageError(str(exc)) from None


def _metrics_port(
    port: int | None,
    hosts: str,
    tls: bool,
    tls_cert: str | None,
    tls_key: str | None,
    worker: str,
) -> MetricsPort | None:
    """Where ``/metrics`` is served, or None without ``--http-port``."""
    from pocketmq.proxy.gateway import MetricsPort

    if port is None:
        return None
    context = None
    if tls:
        if not (tls_cert and tls_key):
            raise click.UsageError("--http-tls needs --tls-cert and --tls-key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise click.UsageError(f"cannot load the TLS certificate or key: {exc}") from None
    names = tuple(name.strip() for name in hosts.split(",") if name.strip())
    return MetricsPort(port, names, context, worker)


def _stop_when_stdin_closes() -> None:
    """SIGTERM ourselves (a graceful stop) once standard input reaches its end: the broker that
    started this worker holds the pipe's other end, and a killed broker closes it."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()

    def readable() -> None:
        if not os.read(fd, 4096):
            loop.remove_reader(fd)
            os.kill(os.getpid(), signal.SIGTERM)

    loop.add_reader(fd, readable)
