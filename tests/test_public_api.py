"""The curated public surface: ``__all__`` is exactly what we export, and all of it resolves.

Changing the public API is a deliberate act: update the expected set here in the same commit.
"""

from __future__ import annotations

import importlib
import types

import pytest

import pocketmq

EXPECTED_TOP_LEVEL = {
    "BrokerConnectionError",
    "BrokerError",
    "ClientError",
    "ClosedError",
    "ConsumeStatus",
    "GroupNotFoundError",
    "InvalidArgumentError",
    "InvalidReceiptHandleError",
    "Message",
    "MessageIllegalError",
    "MessageTooLargeError",
    "MessageView",
    "PocketMQError",
    "RequestTimeoutError",
    "SendOutcomeUnknownError",
    "SendResult",
    "SendStatus",
    "TooManyRequestsError",
    "TopicNotFoundError",
    "__version__",
}

PUBLIC_PACKAGES = [
    "pocketmq",
    "pocketmq.errors",
    "pocketmq.client",
    "pocketmq.reliability",
    "pocketmq.pipeline",
]


def test_top_level_all_is_the_curated_set() -> None:
    assert set(pocketmq.__all__) == EXPECTED_TOP_LEVEL


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_all_names_resolve_and_nothing_public_leaks(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "duplicate names in __all__"
    for item in exported:
        assert hasattr(module, item), f"{name}.__all__ names missing {item}"
    leaked = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and not isinstance(value, types.ModuleType)
        and attr not in exported
        and getattr(value, "__module__", name).startswith("pocketmq")
    }
    assert not leaked, f"{name} exposes names not in __all__: {sorted(leaked)}"
