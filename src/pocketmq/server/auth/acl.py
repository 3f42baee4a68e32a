"""Authorization rules (RocketMQ 5 "ACL 2.0" semantics, docs/security.md "Authorization").

A rule grants (or denies) one user some actions on resources named by a pattern, optionally only
from some source addresses:

- resources ``Topic:NAME``, ``Group:NAME``, ``Cluster:NAME``; ``NAME`` is exact (``orders``),
  a prefix (``orders*``) or everything (``*``);
- actions ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``, ``List``, ``All``;
- decision ``Allow`` or ``Deny``; sources: IP networks (``10.0.0.0/8``, ``::1``), none = anywhere.

The decision for a request: among the user's rules that match it (resource type and name,
action, source), the **most specific** decides — an exact name beats a prefix, a longer prefix a
shorter one, any prefix the wildcard; at equal specificity **Deny wins**; no matching rule denies.
Super users are not checked. The retry and dead-letter topics of a group (``%RETRY%G``,
``%DLQ%G``) are the group's: they are checked as ``Group:G``.

``acl.json`` (beside ``users.json``, mode 0600) holds the rules; ``pocketmq acl`` edits it and a
running broker reads it again within a second.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pocketmq.broker.persist import write_files
from pocketmq.errors import InvalidArgumentError
from pocketmq.names import DLQ_PREFIX, RETRY_PREFIX

__all__ = [
    "CLUSTER",
    "AclStore",
    "Action",
    "Resource",
    "Rule",
    "decide",
    "make_rule",
    "resource_of_topic",
]

_log = logging.getLogger("pocketmq.server.auth")
CLUSTER = "DefaultCluster"  # the name ``Cluster:`` rules match (RocketMQ's default cluster name)


class Action(enum.Enum):
    """What a request does to a resource."""

    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"

    @classmethod
    def parse(cls, text: str) -> Action:
        """``pub``, ``Pub`` or ``PUB``; anything else is a clear error."""
        for action in cls:
            if action.value.lower() == text.strip().lower():
                return action
        raise InvalidArgumentError(
            f"action {text!r} is not one of {', '.join(a.value for a in cls)}"
        )


RESOURCE_TYPES = ("Topic", "Group", "Cluster")


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource pattern: a type and an exact name, a ``prefix*`` or ``*``."""

    kind: str
    pattern: str

    @classmethod
    def parse(cls, text: str) -> Resource:
        """``Topic:orders*`` and the like."""
        kind, sep, pattern = text.partition(":")
        kind = next((k for k in RESOURCE_TYPES if k.lower() == kind.strip().lower()), "")
        pattern = pattern.strip()
        if not sep or not kind or not pattern:
            raise InvalidArgumentError(
                f"resource {text!r} must be Topic:NAME, Group:NAME or Cluster:NAME "
                "(NAME exact, a prefix ending in '*', or '*')"
            )
        if "*" in pattern[:-1]:
            raise InvalidArgumentError(f"resource {text!r}: '*' may only end the name")
        return cls(kind, pattern)

    def __str__(self) -> str:
        return f"{self.kind}:{self.pattern}"

    def matches(self, kind: str, name: str) -> bool:
        """Whether ``kind:name`` falls under this pattern."""
        if kind != self.kind:
            return False
        if self.pattern.endswith("*"):
            return name.startswith(self.pattern[:-1])
        return name == self.pattern

    @property
    def specificity(self) -> tuple[int, int]:
        """Exact (2) over prefix (1) over wildcard (0); longer prefixes over shorter ones."""
        if not self.pattern.endswith("*"):
            return (2, len(self.pattern))
        prefix = len(self.pattern) - 1
        return (1, prefix) if prefix else (0, 0)


@dataclass(frozen=True, slots=True)
class Rule:
    """One user's grant or denial of actions on a resource pattern, from some sources."""

    user: str
    resource: Resource
    actions: frozenset[Action]
    allow: bool = True
    sources: tuple[str, ...] = ()

    def matches(self, kind: str, name: str, action: Action, source: str) -> bool:
        """Whether this rule speaks about the request."""
        if not self.resource.matches(kind, name):
            return False
        if action not in self.actions and Action.ALL not in self.actions:
            return False
        return not self.sources or _from(source, self.sources)

    def to_json(self) -> dict[str, object]:
        """The rule as ``acl.json`` stores it."""
        return {
            "user": self.user,
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": "Allow" if self.allow else "Deny",
            "sources": list(self.sources),
        }

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> Rule:
        """A rule from ``acl.json`` (checked like one typed on the command line)."""
        actions = raw.get("actions", [])
        sources = raw.get("sources", [])
        if not isinstance(actions, list) or not isinstance(sources, list):
            raise InvalidArgumentError("actions and sources must be lists")
        decision = str(raw.get("decision", "Allow")).lower()
        if decision not in ("allow", "deny"):
            raise InvalidArgumentError(f"decision {decision!r} is not Allow or Deny")
        return make_rule(
            str(raw["user"]),
            str(raw["resource"]),
            [str(a) for a in actions],
            allow=decision == "allow",
            sources=[str(s) for s in sources],
        )


def make_rule(
    user: str, resource: str, actions: Iterable[str], *, allow: bool, sources: Iterable[str] = ()
) -> Rule:
    """A checked rule: every name parsed, every source a valid IP network."""
    parsed = frozenset(Action.parse(a) for a in actions)
    if not parsed:
        raise InvalidArgumentError("a rule needs at least one action")
    networks = []
    for source in sources:
        try:
            networks.append(str(ipaddress.ip_network(source.strip(), strict=False)))
        except ValueError:
            raise InvalidArgumentError(
                f"source {source!r} is not an IP address or network"
            ) from None
    if not user:
        raise InvalidArgumentError("a rule needs a user (access key)")
    return Rule(user, Resource.parse(resource), parsed, allow, tuple(networks))


def _from(source: str, networks: tuple[str, ...]) -> bool:
    host = (
        source.rsplit(":", 1)[0].strip("[]") if source.count(":") == 1 or "]" in source else source
    )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # an unknown source matches no source-restricted rule
    return any(address in ipaddress.ip_network(n) for n in networks)


def resource_of_topic(topic: str) -> tuple[str, str]:
    """The resource a topic is checked as: its group's for retry and dead-letter topics."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return ("Group", topic[len(prefix) :])
    return ("Topic", topic)


def decide(
    rules: Iterable[Rule], user: str, kind: str, name: str, action: Action, source: str
) -> tuple[bool, str]:
    """(allowed, why) for one request (module doc: most specific wins, Deny wins ties)."""
    best: tuple[int, int] | None = None
    deciding: list[Rule] = []
    for rule in rules:
        if rule.user != user or not rule.matches(kind, name, action, source):
            continue
        rank = rule.resource.specificity
        if best is None or rank > best:
            best, deciding = rank, [rule]
        elif rank == best:
            deciding.append(rule)
    if not deciding:
        return False, f"no rule allows {user!r} to {action.value} {kind}:{name}"
    denied = [r for r in deciding if not r.allow]
    if denied:
        return (
            False,
            f"{user!r} is denied {action.value} on {kind}:{name} by rule {denied[0].resource}",
        )
    return True, f"allowed by rule {deciding[0].resource}"


class AclStore:
    """``acl.json``: the rules, read again when the file changes (module doc)."""

    def __init__(self, config_dir: str | Path) -> None:
        self._dir = Path(config_dir)
        self._path = self._dir / "acl.json"
        self._rules: list[Rule] = []
        self._mtime = -1.0
        self._checked = 0.0
        self.generation = 0  # bumped on every reload: cached decisions are dropped

    def load(self, *, strict: bool = True) -> None:
        """Read the rules again if the file changed. A damaged file is an
        :class:`InvalidArgumentError` (``pocketmq acl`` about to rewrite it), or with
        ``strict=False`` (a broker) an error log while the rules in force stay."""
        try:
            mtime = self._path.stat().st_mtime
        except FileNotFoundError:
            if self._mtime != -1.0:
                self._rules, self._mtime = [], -1.0
                self.generation += 1
            return
        if mtime == self._mtime:
            return
        try:
            raw = json.loads(self._path.read_text())
            rules = [Rule.from_json(r) for r in raw.get("rules", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problem = f"{self._path} is damaged ({exc}): fix it with `pocketmq acl` or restore it"
            if strict:
                raise InvalidArgumentError(problem) from None
            # a broker keeps the rules in force — none when it is starting, so normal users are
            # refused everything (fail closed, and the broker still starts: storage-format.md
            # §10) — and reads the file again when it next changes
            _log.error(
                "%s; the rules in force stay (%d; with none, normal users are refused everything)",
                problem,
                len(self._rules),
            )
            self._mtime = mtime
            return
        self._rules = rules
        self._mtime = mtime
        self.generation += 1

    def refresh(self, every: float = 1.0) -> None:
        """:meth:`load` at most once per ``every`` seconds."""
        now = time.monotonic()
        if now - self._checked >= every:
            self._checked = now
            self.load(strict=False)

    def rules(self, user: str | None = None) -> list[Rule]:
        """Every rule (of ``user``), as stored."""
        return [r for r in self._rules if user is None or r.user == user]

    def grant(self, rule: Rule) -> None:
        """Add a rule; the same user, resource and decision's actions and sources are merged."""
        self.load()
        for index, existing in enumerate(self._rules):
            same = (existing.user, existing.resource, existing.allow, existing.sources)
            if same == (rule.user, rule.resource, rule.allow, rule.sources):
                self._rules[index] = Rule(
                    rule.user,
                    rule.resource,
                    existing.actions | rule.actions,
                    rule.allow,
                    rule.sources,
                )
                break
        else:
            self._rules.append(rule)
        self._save()

    def revoke(self, user: str, resource: str, actions: Iterable[str] = ()) -> int:
        """Remove ``actions`` (all when none) from the user's rules on ``resource``; returns how
        many rules changed."""
        self.load()
        target = Resource.parse(resource)
        dropped = frozenset(Action.parse(a) for a in actions)
        changed, kept = 0, []
        for rule in self._rules:
            if rule.user != user or rule.resource != target:
                kept.append(rule)
                continue
            changed += 1
            left = rule.actions - dropped if dropped else frozenset()
            if left:
                kept.append(Rule(rule.user, rule.resource, left, rule.allow, rule.sources))
        self._rules = kept
        if changed:
            self._save()
        return changed

    def _save(self) -> None:
        body = json.dumps({"rules": [r.to_json() for r in self._rules]}, indent=2)
        write_files([(str(self._path), body.encode())])  # 0600 in a 0700 directory
        self._mtime = -1.0
        self.load()
