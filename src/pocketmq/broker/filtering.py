"""Subscription filter expressions: ``*`` (everything) or ``TagA || TagB``."""

from __future__ import annotations

from functools import lru_cache

from pocketmq.errors import InvalidArgumentError

__all__ = ["parse_tag_expression"]


@lru_cache(maxsize=1024)
def parse_tag_expression(expression: str) -> frozenset[str] | None:
    """The tags an expression accepts, or None for all."""
    text = expression.strip()
    if text in ("", "*"):
        return None
    tags = frozenset(part.strip() for part in text.split("||"))
    if "" in tags or any(c in tag for tag in tags for c in "()'\"=<>"):
        raise InvalidArgumentError(
            f"filter {expression!r} is not a tag expression ('*' or 'TagA || TagB'); "
            "SQL filters are not supported"
        )
    return tags
