"""The one version string of pocketmq: the package metadata (pyproject.toml reads it from here),
the HELLO handshake, the broker's status and the clients all use it."""

__all__ = ["VERSION"]

VERSION = "0.1.0"
