"""RocketMQ 5 wire compatibility: the ``apache.rocketmq.v2.MessagingService`` gRPC adapter.

The official RocketMQ 5 clients (Java, Go, C#, Python, ...) speak gRPC to a proxy; this package
plays that part over the same broker core as the native protocol, so a message sent through one
is consumed through the other. See docs/grpc.md for what is supported and the choices made.

Modules: ``pb`` (the generated protobuf modules), ``status`` (error → v2 code), ``convert``
(messages, endpoints, message types), ``settings`` (Telemetry replies), ``sessions`` (connected
clients), ``service`` (the RPCs), ``server`` (the listener: ``GrpcServer``).
"""

from typing import Final

__all__ = ["AUTO_RENEW_INVISIBLE"]

# Kept here, not in ``server``, so a broker started without gRPC (and every CLI command) does not
# pay for importing grpcio and the protobuf modules (~0.2 s).
AUTO_RENEW_INVISIBLE: Final = 120.0  # seconds a push consumer's message stays invisible
