"""The native operations a gRPC gateway needs beyond a native client's (docs/proxy.md).

A ``pocketmq proxy`` process terminates the official clients' gRPC and speaks the native protocol
to its broker; these four requests carry what gRPC offers and the SDK never asked for: cancelling
a delayed message, forwarding a popped message to the DLQ, a group as the broker's gRPC adapter
sees it (created on first use when the broker auto-creates groups), and the limits a gateway must
answer with exactly as the broker would (docs/protocol.md, "Gateways").
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.broker import Broker
from pocketmq.protocol import structs as w
from pocketmq.protocol.codes import RequestCode
from pocketmq.server.native.connection import HandlerTable, ServerConnection
from pocketmq.server.native.convert import group_to_spec

__all__ = ["gateway_handlers"]


def gateway_handlers(
    broker: Broker,
    auto_renew_invisible: float,
    on_info: Callable[[str], None] | None = None,
) -> HandlerTable:
    """``RECALL``, ``FORWARD_TO_DEAD_LETTER``, ``GATEWAY_INFO`` and ``GATEWAY_GROUP`` over
    ``broker``; ``auto_renew_invisible`` is the invisible time the gateway gives push
    consumers, the broker's own gRPC setting, so both answer alike. ``on_info`` hears the client
    id of every ``GATEWAY_INFO``: the broker's own workers ask it periodically, a sign of
    life (server/workers.py)."""

    def recall(conn: ServerConnection, req: w.RecallRequest) -> w.RecallResponse:
        return w.RecallResponse(broker.recall(req.topic, req.recall_handle))

    def forward(conn: ServerConnection, req: w.ForwardToDeadLetterRequest) -> w.Empty:
        broker.forward_to_dead_letter(req.group, req.topic, req.receipt_handle, reason=req.reason)
        return w.Empty()

    def info(conn: ServerConnection, req: w.Empty) -> w.GatewayInfoResponse:
        if on_info is not None:  # a worker's periodic ask doubles as its sign of life
            on_info(conn.client_id)
        config = broker.config
        return w.GatewayInfoResponse(
            broker.name,
            config.store.max_message_size,
            config.store.max_properties_size,
            list(config.delay_levels),
            int(config.max_long_poll * 1000),
            int(auto_renew_invisible * 1000),
        )

    def group(conn: ServerConnection, req: w.NameRequest) -> w.GroupSpec:
        return group_to_spec(broker.require_group(req.name))

    return {
        RequestCode.RECALL: recall,
        RequestCode.FORWARD_TO_DEAD_LETTER: forward,
        RequestCode.GATEWAY_INFO: info,
        RequestCode.GATEWAY_GROUP: group,
    }
