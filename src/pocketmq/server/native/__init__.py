"""The native protocol's server side: connections, the listener, and the request handlers.

docs/protocol.md is the contract; the limits a connection lives under (handshake and idle
timeouts, frame sizes, the connection cap) are in ``limits``.
"""
