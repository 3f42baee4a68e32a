"""How a broker process serves its gRPC port (docs/proxy.md): the RocketMQ 5 adapter in the
process itself, or ``grpc_workers`` proxy processes sharing the port (``server/workers.py``).

Both are built from the ``[server]`` sections (``server/sections.py``): the listening host, the
gRPC section, TLS and authentication; a worker is made as strict as its broker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pocketmq.protocol import structs as w
from pocketmq.server.app_config import AppConfig

if TYPE_CHECKING:
    from pocketmq.broker import Broker
    from pocketmq.server.auth.authorizer import Authorizer
    from pocketmq.server.auth.users import UserStore
    from pocketmq.server.grpc.server import GrpcServer
    from pocketmq.server.workers import ProxyWorkers

__all__ = ["serve_from_workers", "serve_in_process", "worker_http_options"]

# the workers dial the port the broker bound, not its advertised address
_DIAL = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


async def serve_in_process(
    config: AppConfig,
    port: int,
    broker: Broker,
    routes: Callable[[str], Awaitable[w.RouteResponse]],
    address: Callable[[], str],
    *,
    users: UserStore | None,
    authorizer: Authorizer | None,
) -> GrpcServer:
    """The RocketMQ 5 gRPC adapter (apache.rocketmq.v2) for the official clients, listening on
    ``port``; ``address`` is what it tells clients (known once the port is bound)."""
    from pocketmq.server.grpc.port import LocalPort  # heavy: only when enabled
    from pocketmq.server.grpc.server import GrpcServer

    server = GrpcServer(
        LocalPort(broker, routes),
        address,
        auto_renew_invisible=config.grpc.auto_renew_invisible,
        users=users,
        authorizer=authorizer,
    )
    await server.start(
        config.listen.host,
        port,
        config.grpc_tls_pem(),
        permissive=config.grpc_tls_mode() == "permissive",
    )
    return server


async def serve_from_workers(
    config: AppConfig, port: int, native_port: int, advertised_host: str, gateway_secret: str
) -> tuple[ProxyWorkers, str]:
    """``grpc_workers`` proxy processes on ``port``, each forwarding to the broker's native
    port; returns them and the gRPC address clients are told."""
    from pocketmq.server.workers import ProxyWorkers, reserve_port, worker_options

    host = config.listen.host
    options = worker_options(
        data_dir=config.broker.data_dir,
        host=host,
        authentication=config.auth.authentication,
        authorization=config.auth.authorization,
        insecure=config.auth.insecure,
        grpc_tls=config.grpc_tls_mode(),
        tls_cert=config.tls.cert,
        tls_key=config.tls.key,
    )
    holder = reserve_port(host, port)
    try:
        bound = holder.getsockname()[1]
        address = f"{advertised_host}:{bound}"
        workers = ProxyWorkers(
            config.grpc.workers,
            f"{_DIAL.get(host, host)}:{native_port}",  # host:port as native_address writes it
            host,
            bound,
            address,
            options=options,
            gateway_secret=gateway_secret,
            silence=config.grpc.worker_silence,
            http_port=config.http.port,
            http_options=worker_http_options(config),
        )
        await workers.start()
    finally:
        holder.close()
    return workers, address


def worker_http_options(config: AppConfig) -> list[str]:
    """What makes a worker's metrics port answer like the broker's HTTP port: the same extra
    names, HTTPS when the broker's is (docs/operations.md, "Proxies measured")."""
    options = ["--http-hosts", ",".join(config.http.hosts)] if config.http.hosts else []
    if config.tls.cert and config.tls.key:
        options += ["--http-tls", "--tls-cert", config.tls.cert, "--tls-key", config.tls.key]
    return options
