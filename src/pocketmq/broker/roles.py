"""Which broker may do what: the role rules of docs/replication.md §5-§6 written once.

A master takes every operation. A slave stores only what its master replicates, so it refuses
whatever writes the log or the state a master owns, and the client goes to a master; it serves
pops only while its master is away, acting for it from the master's last pop state. A master
may also refuse writes for a while (starting, fenced, past its controller lease, §6 and §9).

The rules live in :class:`RoleGate`; the decorators :func:`master_only` and
:func:`pops_while_master_away` apply them where an operation is defined (the broker front,
broker/front.py), and the send path asks the same gate (``SendPath._refusal``), so the rule
cannot drift between operations.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from pocketmq.broker.ha.replication import Replication, Role
from pocketmq.broker.pop_state import PopManager
from pocketmq.errors import ServiceUnavailableError

__all__ = ["Guarded", "RoleGate", "master_only", "pops_while_master_away"]

# read once: on Python 3.11 every ``Enum.MEMBER`` read goes through the enum type's
# ``__getattr__`` hook (~900 instructions), and every send asks :meth:`RoleGate.write_refusal`
_SLAVE = Role.SLAVE

log = logging.getLogger("pocketmq.broker")

P = ParamSpec("P")
R = TypeVar("R")


class RoleGate:
    """The role rules of one broker, asked before an operation runs."""

    def __init__(self, name: str, replication: Replication, pop_state: PopManager) -> None:
        self.name = name
        self.replication = replication
        self.pop_state = pop_state

    def write_refusal(self, action: str) -> ServiceUnavailableError | None:
        """Why this broker may not write now, or None: a slave refuses (``action`` tells the
        client where to go instead), and so does a master that is starting or fenced."""
        replication = self.replication
        if replication.role is _SLAVE:
            return ServiceUnavailableError(f"broker {self.name!r} is a slave: {action}")
        refusal = replication.write_refusal()
        if refusal:
            return ServiceUnavailableError(refusal)
        return None

    def admit_write(self, action: str) -> None:
        """Raise :meth:`write_refusal`'s error, if any."""
        refusal = self.write_refusal(action)
        if refusal is not None:
            raise refusal

    def admit_pop(self) -> None:
        """A master pops (unless fenced); a slave only while its master is away: then it acts for
        the master, from the pop state the master last replicated."""
        replication = self.replication
        refusal = replication.write_refusal()
        if refusal:
            raise ServiceUnavailableError(refusal)
        if replication.role is Role.MASTER:
            return
        if replication.master_address:
            raise ServiceUnavailableError(
                f"broker {self.name!r} is a slave and its master is up: pop from the master"
            )
        if not replication.acting:
            self.pop_state.reload()  # the master's last copy
            replication.acting = True
            log.warning("serving pops for the absent master of group %r", self.name)


class Guarded(Protocol):
    """What a guarded operation's owner offers: its broker's role gate."""

    @property
    def roles(self) -> RoleGate:
        """The gate of the broker this object belongs to."""
        ...


S = TypeVar("S", bound=Guarded)


def _guard(
    function: Callable[Concatenate[S, P], R], admit: Callable[[RoleGate], None], rule: str
) -> Callable[Concatenate[S, P], R]:
    """``function`` run only after ``admit`` passed (sync or async alike); ``role_rule`` on the
    result names the rule, for readers and tests."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def guarded_async(owner: S, *args: Any, **kwargs: Any) -> Any:
            admit(owner.roles)
            return await function(owner, *args, **kwargs)

        guarded_async.role_rule = rule  # type: ignore[attr-defined]
        return cast("Callable[Concatenate[S, P], R]", guarded_async)

    @functools.wraps(function)
    def guarded(owner: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        admit(owner.roles)
        return function(owner, *args, **kwargs)

    guarded.role_rule = rule  # type: ignore[attr-defined]
    return guarded


def master_only(
    action: str,
) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Decorate an operation that writes the log or the state a master owns: a slave refuses it
    with ``action`` (e.g. "send back goes to its master"), a fenced master refuses it too."""

    def decorate(function: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        return _guard(function, lambda gate: gate.admit_write(action), "master only")

    return decorate


def pops_while_master_away(
    function: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Decorate a pop operation: a master serves it; a slave only while its master is away."""
    return _guard(function, RoleGate.admit_pop, "pops while the master is away")
