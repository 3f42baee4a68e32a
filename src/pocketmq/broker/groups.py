"""The broker's consumer groups, persisted in ``config/groups.json``.

What a group is — its consumption mode, retry policy and start position — is a value of
:mod:`pocketmq.model.groups`, which every protocol adapter hands over; this module keeps them.
"""

from __future__ import annotations

import os

from pocketmq.broker.persist import save_json
from pocketmq.broker.statefile import StateFile
from pocketmq.errors import GroupNotFoundError, InvalidArgumentError
from pocketmq.model.groups import GroupConfig
from pocketmq.names import validate_group_name

__all__ = ["GroupManager"]


class GroupManager:
    """The broker's consumer groups, loaded leniently from ``groups.json`` (a bad entry is skipped,
    not fatal) and saved on every change."""

    def __init__(self, config_dir: str) -> None:
        self._path = os.path.join(config_dir, "groups.json")
        self._groups: dict[str, GroupConfig] = {}
        state = StateFile(
            self._path,
            list,
            "its consumer groups must be created again (`pocketmq group create`); their "
            "committed offsets are kept",
        )
        for number, raw in enumerate(state.items()):
            group = state.decode(raw, GroupConfig, f"group #{number}", _problem)
            if group is not None and group.name in self._groups:
                state.skip(f"group #{number}", f"a second entry for {group.name!r}", raw)
            elif group is not None:
                self._groups[group.name] = group
        state.finish()

    def reload(self) -> None:
        """Read groups.json again (a slave, after its master's metadata arrived)."""
        self._groups = GroupManager(os.path.dirname(self._path))._groups

    def get(self, name: str) -> GroupConfig | None:
        """The group named ``name``, or None."""
        return self._groups.get(name)

    def require(self, name: str) -> GroupConfig:
        """The group named ``name``; an unknown group is an error that says how to create it."""
        group = self._groups.get(name)
        if group is None:
            raise GroupNotFoundError(
                f"consumer group {name!r} does not exist; create it with "
                f"`pocketmq group create {name}`"
            )
        return group

    def all(self) -> list[GroupConfig]:
        """Every group, sorted by name (listings)."""
        return sorted(self._groups.values(), key=lambda g: g.name)

    def create(self, group: GroupConfig) -> GroupConfig:
        """Create or update a group after checking its name and retry policy, so a group that could
        never be served is refused now rather than at its first retry."""
        validate_group_name(group.name)
        problem = _problem(group)
        if problem is not None:
            raise InvalidArgumentError(problem)
        if self._groups.get(group.name) != group:
            self._groups[group.name] = group
            self._save()
        return group

    def delete(self, name: str) -> bool:
        """Forget a group; False when there was none."""
        if self._groups.pop(name, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        save_json(self._path, self.all())


def _problem(group: GroupConfig) -> str | None:
    """What makes ``group`` unacceptable (on creation and in groups.json), or None."""
    try:
        validate_group_name(group.name)
    except InvalidArgumentError as exc:
        return str(exc)
    if group.retry.max_retries < 0 and group.retry.max_retries != -1:
        return "max retries must be >= 0 (or -1 for 'never skip')"
    if any(d < 0 for d in group.retry.delays):
        return "retry delays must not be negative"
    return None
