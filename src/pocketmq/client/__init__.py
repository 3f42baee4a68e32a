"""The asyncio SDK: producers and consumers over the native protocol."""

from pocketmq.client.message import ConsumeStatus, Message, MessageView, SendResult, SendStatus

__all__ = ["ConsumeStatus", "Message", "MessageView", "SendResult", "SendStatus"]
