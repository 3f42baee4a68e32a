"""A whole broker process: the broker core, its native server, optionally an embedded name
server, and the loop that registers the broker with its name server.

``pocketmq serve`` and ``pocketmq.testing`` both run a :class:`BrokerApp`; the gRPC adapter joins
it when its port is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import ssl
from typing import TYPE_CHECKING

from pocketmq.broker import Broker
from pocketmq.broker.ha.replication import Role
from pocketmq.errors import (
    BrokerConnectionError,
    InvalidArgumentError,
    TopicNotFoundError,
)
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.protocol.auth import normalize_address
from pocketmq.server.app_config import AppConfig
from pocketmq.server.auth.cluster import ClusterKeyFile
from pocketmq.server.auth.credential import watch_users
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.grpc_serving import serve_from_workers, serve_in_process
from pocketmq.server.ha.etcd import Etcd
from pocketmq.server.ha.failover import ControllerTimings, Failover
from pocketmq.server.ha.members import GroupMembers
from pocketmq.server.ha.roles import GroupRole
from pocketmq.server.namesrv.link import NameServerLink
from pocketmq.server.namesrv.server import NameServer
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.gateway import gateway_handlers
from pocketmq.server.native.gateway_state import count_relayed
from pocketmq.server.native.handlers import broker_handlers
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.native.overview import overview_handlers
from pocketmq.server.native.permissions import authorized
from pocketmq.server.native.tcp import FrameServer
from pocketmq.server.registration import Registrar
from pocketmq.server.remoting import RemotingPort, SignatureCheck
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.handlers import broker_remoting_handlers, connection_closed
from pocketmq.server.rpcstats import RpcLatency

if TYPE_CHECKING:
    from pocketmq.server.auth.authorizer import Authorizer
    from pocketmq.server.auth.users import UserStore
    from pocketmq.server.grpc.server import GrpcServer
    from pocketmq.server.http.metrics import Connections
    from pocketmq.server.http.server import HttpServer
    from pocketmq.server.workers import ProxyWorkers

__all__ = ["AppConfig", "BrokerApp"]

log = logging.getLogger("pocketmq.server")


class BrokerApp:
    """One broker process (module doc): starts the parts in order, prints nothing itself (the ready
    line is :meth:`ready_line`), and closes them in reverse."""

    def __init__(self, config: AppConfig) -> None:
        self.config = config
        self.broker: Broker | None = None
        self.namesrv: NameServer | None = None
        self._native: FrameServer | None = None
        self.remoting: RemotingPort | None = None  # remoting clients on the native port
        self._grpc: GrpcServer | None = None
        self.grpc_workers: ProxyWorkers | None = None
        # what this broker's proxy workers authenticate with (docs/proxy.md); new at each start
        self._gateway_secret = (
            secrets.token_hex(32) if config.grpc.workers and config.auth.authentication else ""
        )
        self._http: HttpServer | None = None
        self._users: UserStore | None = None  # authentication on (docs/security.md)
        self._cluster_key: ClusterKeyFile | None = None  # this process is a member
        self._authenticator: Authenticator | None = None  # the native port's
        self._authorizer: Authorizer | None = None  # authorization on
        self._users_watch: asyncio.Task[None] | None = None  # users.json read again each second
        self.http_address = ""
        self._link: NameServerLink | None = None
        self._registrar: Registrar | None = None
        self.group: GroupRole | None = None
        self.failover: Failover | None = None
        self.members: GroupMembers | None = None
        self.grpc_address = ""

    @property
    def native_address(self) -> str:
        """The native protocol's address as clients should use it (the advertised host, the real
        port)."""
        assert self._native is not None
        return f"{self._advertised_host()}:{self._native.port}"

    @property
    def namesrv_address(self) -> str:
        """The name server this broker registers with (its embedded one, or the external one), ""
        for none."""
        if self.namesrv is not None:
            return self.namesrv.address
        return self.config.namesrv.address or ""

    def _advertised_host(self) -> str:
        if self.config.listen.advertise_host:
            return self.config.listen.advertise_host
        host = self.config.listen.host
        if host in ("0.0.0.0", "::", ""):
            return socket.gethostbyname(socket.gethostname())
        return host

    async def start(self) -> None:
        """Start the broker core, the embedded name server, the listeners (native, then gRPC) and
        the registration loop; when a part fails to start, those already started are closed
        again."""
        config = self.config
        limits = config.limits
        tls = config.tls.context()
        endpoints = config.controller.endpoints()
        timings = config.controller.timings()
        self.broker = Broker(config.broker)
        self._hold_writes(controlled=bool(endpoints))
        await self.broker.start()
        try:
            namesrv_authenticator = self._security()
            if config.namesrv.address is None and config.namesrv.port is not None:
                self.namesrv = NameServer(  # clients use one TLS setting
                    limits=limits,
                    tls=tls,
                    authenticator=namesrv_authenticator,
                    max_brokers=config.namesrv.max_brokers,
                )
                await self.namesrv.start(config.listen.host, config.namesrv.port)
                if namesrv_authenticator is not None:
                    namesrv_authenticator.reachable.add(self._advertised(self.namesrv.port))
            if config.auth.authorization:
                self._authorizer = self._build_authorizer()
            handlers = broker_handlers(
                self.broker,
                self._route,
                self._list_brokers,
                self._topics_changed,
                self._promote,
                authenticator=self._authenticator,
                authorizer=self._authorizer,
            )
            handlers |= gateway_handlers(
                self.broker, config.grpc.auto_renew_invisible, self._gateway_alive
            )
            handlers |= overview_handlers(self.overview)
            if self._authorizer is not None:
                handlers = authorized(handlers, self._authorizer)
            await self._start_native(handlers, limits, tls)
            if config.grpc.port is not None:
                await self._start_grpc(config.grpc.port)
            if config.http.port is not None:
                await self._start_http(config.http.port, tls)
            await self._start_replication(endpoints, timings)
            await self.broker.serving()
            if self.namesrv_address:
                self._link = NameServerLink(
                    self.namesrv_address,
                    f"broker:{self.broker.name}",
                    tls=self._own_namesrv_tls(tls),
                    cluster_key=self._cluster_key,
                )
                self._registrar = Registrar(
                    self._link,
                    self.broker,
                    address=self._self_address,
                    group=lambda: self.group,
                    interval=config.namesrv.register_interval,
                    renew=timings.renew,
                )
                await self._registrar.register()
                self._registrar.start()
        except BaseException:
            await self.close()
            raise

    async def _start_native(
        self, handlers: HandlerTable, limits: ConnectionLimits, tls: ssl.SSLContext | None
    ) -> None:
        """The client port: pocketmq's native protocol, and RocketMQ's remoting clients told
        apart by their first bytes (docs/remoting.md, "Where it listens"), served by the
        broker's remoting handlers (``server/remoting/handlers.py``)."""
        assert self.broker is not None
        side = BrokerSide(
            self.broker,
            self._store_host,
            authorizer=self._authorizer,
            topics_changed=self._topics_changed,
        )
        self.remoting = RemotingPort(
            broker_remoting_handlers(side),
            signatures=SignatureCheck.of(self._authenticator),
            on_close=lambda conn: connection_closed(side, conn),
        )
        self._native = FrameServer(
            handlers,
            on_close=self._connection_closed,
            limits=limits,
            tls=tls,
            remoting=self.remoting,
        )
        await self._native.start(self.config.listen.host, self.config.listen.port)
        if self._authenticator is not None:
            self._authenticator.reachable.add(self._advertised(self._native.port))

    async def _start_replication(
        self, endpoints: list[tuple[str, int]] | None, timings: ControllerTimings
    ) -> None:
        """The broker's part in its group: its replication port or its link to the master, and
        under a controller the failover and the group's member list in etcd."""
        config = self.config
        assert self.broker is not None
        self.group = GroupRole(
            self.broker,
            tls=(config.replication_server_tls(), config.replication_client_tls()),
            policy=config.replication_policy(self._cluster_key),
            host=config.listen.host,
            ha_port=self._ha_port(),
            ha_port_fixed=config.ha.port is not None,
            master=config.ha.master,
            own_address=lambda: self.native_address,
            advertise=lambda host, port: f"{self._advertised_host()}:{port}",
            on_change=self._register,
        )
        await self.group.start()
        if endpoints:
            self.failover = Failover(
                self.broker,
                self.group,
                Etcd(endpoints),
                own_address=lambda: self.native_address,
                timings=timings,
            )
            self.failover.start()
            # whose acknowledgements count: etcd's member list (docs/replication.md §2)
            self.members = GroupMembers(
                self.broker,
                Etcd(endpoints),
                own_address=lambda: self.native_address,
                timings=timings,
            )
            self.members.start()

    def _hold_writes(self, *, controlled: bool) -> None:
        """Before any port opens (docs/replication.md §6): no write until everything is up (a
        clear "starting" refusal, not the flow control's TOO_MANY_REQUESTS that the stalls of
        starting would cause); under a controller no write and no master role until etcd
        confirms; with an external name server none until it answered (the group may have a
        newer master: this one was failed over while it was down)."""
        broker = self.broker
        assert broker is not None
        broker.ha.replication.starting = f"broker {broker.name!r} is starting: retry in a moment"
        if controlled:
            Failover.hold_writes(broker)
        elif broker.role is Role.MASTER and self.config.namesrv.address:
            broker.ha.replication.fence = (
                f"broker {broker.name!r} is waiting for its name server to confirm it is its "
                "group's master"
            )

    def _security(self) -> Authenticator | None:
        """The cluster key, the users and the native port's authenticator (authentication
        on); returns the embedded name server's authenticator (the same identities, its own
        addresses). docs/security.md, "Trust inside the cluster"."""
        config = self.config
        self._cluster_key = config.cluster_key_file()
        if not config.auth.authentication:
            return None
        from pocketmq.server.auth.users import UserStore

        self._users = UserStore(os.path.join(config.broker.data_dir, "config"))
        self._users.load()
        self._users_watch = asyncio.create_task(watch_users(self._users), name="users-watch")
        throttle, reachable = config.auth.throttle(), config.auth.reachable()
        self._authenticator = Authenticator(
            self._users,
            self._cluster_key,
            gateway_secret=self._gateway_secret,
            throttle=throttle,
        )
        self._authenticator.reachable |= reachable
        namesrv = Authenticator(self._users, self._cluster_key, throttle=throttle)
        namesrv.reachable |= reachable
        return namesrv

    def _store_host(self) -> str:
        """The client port's advertised ``ip:port``: the store host of remoting message ids."""
        assert self._native is not None
        return self._advertised(self._native.port)

    def _advertised(self, port: int) -> str:
        """``ip:port`` of the advertised host (what routes name) for the handshake's check."""
        return normalize_address(self._advertised_host(), port)

    def _build_authorizer(self) -> Authorizer:
        """The ACL's authorizer: its check goes in front of every native handler and into the
        gRPC adapter."""
        from pocketmq.server.auth.acl import AclStore
        from pocketmq.server.auth.authorizer import Authorizer

        if self._users is None:
            raise InvalidArgumentError(
                "authorization needs authentication: start with --authentication too"
            )
        acl = AclStore(os.path.join(self.config.broker.data_dir, "config"))
        acl.load(strict=False)  # a damaged file: no rules, so normal users are refused
        return Authorizer(self._users, acl)

    async def _start_grpc(self, port: int) -> None:
        """The gRPC port, in this process or from proxy workers (server/grpc_serving.py)."""
        assert self.broker is not None and self._native is not None
        config = self.config
        if config.grpc.workers > 0:
            self.grpc_workers, self.grpc_address = await serve_from_workers(
                config, port, self._native.port, self._advertised_host(), self._gateway_secret
            )
            return
        self._grpc = await serve_in_process(
            config,
            port,
            self.broker,
            self._route,
            lambda: self.grpc_address,
            users=self._users,
            authorizer=self._authorizer,
        )
        self.grpc_address = f"{self._advertised_host()}:{self._grpc.port}"

    def _gateway_alive(self, client_id: str) -> None:
        if self.grpc_workers is not None:
            self.grpc_workers.alive(client_id)

    async def _start_http(self, port: int, tls: ssl.SSLContext | None) -> None:
        """Prometheus metrics and health checks, the dashboard and its cluster view
        (docs/operations.md)."""
        assert self.broker is not None
        from pocketmq.server.http.cluster import ClusterView  # heavy: only when enabled
        from pocketmq.server.http.server import HttpServer
        from pocketmq.server.peers import PEER_TIMEOUT, PeerLink

        broker = self.broker
        peer_tls = self.config.replication_client_tls()  # peers are trusted as masters are
        client_id = f"peer:{broker.name}:{broker.config.broker_id}@{os.getpid()}"
        cluster = ClusterView(
            self._cluster_members,
            self.overview,
            lambda: (broker.name, broker.config.broker_id),
            lambda address: PeerLink(
                address, client_id, PEER_TIMEOUT, peer_tls, cluster_key=self._cluster_key
            ),
            namesrv=self.namesrv_address,
        )
        server = HttpServer(
            broker,
            self._connections,
            self._latencies,
            users=self._users,
            authorizer=self._authorizer,
            settings=self.config.http_settings(self._advertised_host()),
            cluster=cluster,
        )
        await server.start(self.config.listen.host, port, tls)
        self._http = server
        self.http_address = f"{self._advertised_host()}:{server.port}"

    def overview(self) -> w.BrokerOverviewResponse:
        """This broker's figures for the cluster view (``BROKER_OVERVIEW``, server/figures.py)."""
        from pocketmq.server.figures import ProcessFigures, broker_overview

        assert self.broker is not None
        sampler = self._http.sampler if self._http is not None else None
        workers = [
            w.WorkerFigures(number, pid, address, running)
            for number, pid, address, running in (
                self.grpc_workers.figures() if self.grpc_workers is not None else []
            )
        ]
        process = ProcessFigures(http_address=self.http_address, workers=workers)
        if sampler is not None:
            latest = sampler.latest
            process = ProcessFigures(
                self.http_address,
                latest.rate_in,
                latest.rate_out,
                latest.cpu_percent,
                sampler.topic_rates,
                workers,
            )
        return broker_overview(self.broker, process)

    async def _cluster_members(self) -> list[w.BrokerAddress]:
        """Every broker the name server lists (BrokerConnectionError when it cannot be reached);
        this broker alone without a name server."""
        if self._link is None:
            return [self._self_address()]
        reply = await self._link.call(RequestCode.LIST_BROKERS, w.Empty(), w.ListBrokersResponse)
        return list(reply.brokers)

    def _connections(self) -> Connections:
        from pocketmq.server.http.metrics import Connections

        producers: dict[tuple[str, str], int] = {}
        consumers: dict[tuple[str, str], int] = {}
        if self._native is not None:
            for connection in self._native.connections:
                relayed = connection.state.get("relayed")
                if relayed is not None:  # a gateway: count its clients, not itself
                    count_relayed(relayed.values(), producers, consumers)
                    continue
                language = connection.state.get("client", ("", ""))[0]
                key = ("native", language)
                if connection.producing or connection.state.get("producer_groups"):
                    producers[key] = producers.get(key, 0) + 1
                if connection.state.get("groups"):
                    consumers[key] = consumers.get(key, 0) + 1
        if self.remoting is not None:  # what each client heartbeated (server/remoting/clients.py)
            for remote in self.remoting.connections:
                key = ("remoting", remote.language.lower())
                if remote.state.get("producer_groups"):
                    producers[key] = producers.get(key, 0) + 1
                if remote.state.get("consumer_groups"):
                    consumers[key] = consumers.get(key, 0) + 1
        if self._grpc is not None:
            grpc_producers, grpc_consumers = self._grpc.service.sessions.kinds()
            producers |= {("grpc", language): n for language, n in grpc_producers.items()}
            consumers |= {("grpc", language): n for language, n in grpc_consumers.items()}
        return Connections(producers=producers, consumers=consumers)

    def _latencies(self) -> list[RpcLatency]:
        """The answer times of the native and gRPC ports, for ``rocketmq_rpc_latency``."""
        found = [self._native.latency] if self._native is not None else []
        return found + ([self._grpc.latency] if self._grpc is not None else [])

    def _own_namesrv_tls(self, tls: ssl.SSLContext | None) -> ssl.SSLContext | None:
        """How the broker reaches its name server: the embedded one speaks TLS when the broker
        does, and is within this process, so its certificate need not be verified; an external
        one (``pocketmq namesrv``) speaks TLS with ``namesrv_tls``, verified against
        ``tls_ca`` (or the system's roots) (docs/security.md)."""
        if self.namesrv is None:
            if not self.config.namesrv.tls:
                return None
            try:
                return ssl.create_default_context(cafile=self.config.tls.ca or None)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidArgumentError(f"cannot load the TLS CA file: {exc}") from None
        if tls is None:
            return None
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def _ha_port(self) -> int:
        if self.config.ha.port is not None:
            return self.config.ha.port
        return self.config.listen.port + 1 if self.config.listen.port else 0

    async def _promote(self, force: bool) -> int:
        if self.failover is not None:  # the controller decides, even for an operator
            return await self.failover.claim(force=force)
        assert self.group is not None
        return await self.group.promote(force=force)

    def ready_line(self) -> str:
        """The line scripts wait for (docs/cli.md, "Running")."""
        grpc = self.grpc_address or "disabled"
        ha = self.group.ha_address if self.group is not None else ""
        role = self.broker.ha.replication.acting_role() if self.broker is not None else "master"
        return (
            f"pocketmq ready native={self.native_address} grpc={grpc} "
            f"namesrv={self.namesrv_address or 'none'} ha={ha or 'none'} role={role} "
            f"http={self.http_address or 'disabled'}"
        )

    # -- routing and registration ---------------------------------------------------------

    async def _register(self) -> None:
        """Register now (the role others see changed: a promotion, a step down)."""
        if self._registrar is not None:
            await self._registrar.register()

    async def _topics_changed(self) -> None:
        if self.group is not None and self.group.server is not None:
            self.group.server.push_metadata()  # slaves have them before the answer goes out
        await self._register()

    def _self_address(self) -> w.BrokerAddress:
        broker = self.broker
        assert broker is not None
        return w.BrokerAddress(
            broker.name,
            self.native_address,
            self.grpc_address,
            broker.config.broker_id,
            broker.ha.replication.acting_role(),
            broker.ha.replica_log.current_epoch(),
            self.group.ha_address if self.group is not None else "",
            self.http_address,
        )

    async def _list_brokers(self) -> w.ListBrokersResponse:
        if self._link is not None:
            try:
                return await self._link.call(
                    RequestCode.LIST_BROKERS, w.Empty(), w.ListBrokersResponse
                )
            except BrokerConnectionError:
                pass  # name server unreachable: this broker is all we know of the cluster
        return w.ListBrokersResponse([self._self_address()])

    def local_route(self, topic: str) -> w.RouteResponse:
        """The route of a topic as this broker alone serves it: the answer when no name server knows
        the topic yet."""
        assert self.broker is not None
        config = self.broker.require_topic(topic)
        return w.RouteResponse(
            topic,
            config.topic_type.value,
            [self._self_address()],
            [w.QueueRoute(self.broker.name, q, config.perm) for q in range(config.queues)],
        )

    async def _route(self, topic: str) -> w.RouteResponse:
        """The topic's route across the cluster (the name server's view, refreshed by a
        registration if this broker's own topics changed), or this broker's alone."""
        if self._link is None:
            return self.local_route(topic)
        try:
            return await self._link.call(
                RequestCode.GET_ROUTE, w.GetRouteRequest(topic), w.RouteResponse
            )
        except BrokerConnectionError:
            return self.local_route(topic)
        except TopicNotFoundError:
            return self.local_route(topic)

    def _connection_closed(self, connection: ServerConnection) -> None:
        if self.broker is not None:
            for client_id in connection.state.get("relayed", {}):  # a gateway's clients
                self.broker.unregister(client_id, None)
                self.broker.unregister_producer(client_id, None, owner=connection)
        if self.broker is not None and connection.client_id and connection.state.get("groups"):
            self.broker.unregister(connection.client_id, sorted(connection.state["groups"]))
        if self.broker is not None and connection.state.get("producer_groups"):
            self.broker.unregister_producer(
                connection.client_id, sorted(connection.state["producer_groups"]), owner=connection
            )

    # -- shutdown -------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop registering, close the listeners, the name-server link and the embedded name
        server, then the broker core, which persists its state last."""
        if self._registrar is not None:
            await self._registrar.close()
        if self._users_watch is not None:
            self._users_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._users_watch
        if self.failover is not None:
            await self.failover.close()
        if self.members is not None:
            await self.members.close()
        if self.group is not None:
            await self.group.close()
        if self.grpc_workers is not None:  # first: their calls in progress need the native port
            await self.grpc_workers.close()
        if self._native is not None:
            await self._native.close()
        if self._grpc is not None:
            await self._grpc.close()
        if self._http is not None:
            await self._http.close()
        if self._link is not None:
            await self._link.close()
        if self.namesrv is not None:
            await self.namesrv.close()
        if self.broker is not None:
            await self.broker.close()
