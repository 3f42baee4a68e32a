"""Who signed a remoting request: RocketMQ 4.x's ACL signature checked against the users of
``pocketmq user`` (docs/remoting.md, "Authentication"; docs/security.md, "Who may do what, per
port").

The remoting protocol has no handshake: every request carries ``AccessKey`` and ``Signature``
ext fields (``AclClientRPCHook``; :mod:`pocketmq.protocol.remoting.acl`), and each is checked on
its own, as RocketMQ's ``AuthenticationPipeline`` does before a request reaches its processor.
A refusal is ``NO_PERMISSION`` (16, what that pipeline answers). Only users sign: the cluster's
members and a broker's proxy workers speak the native protocol (their names hold a ``/``, which
no user's can).

Wrong signatures are throttled per source address with the port's
:class:`~pocketmq.server.auth.throttle.FailureThrottle`, the one its native logins use, so
guesses through either protocol count together; an address out of tokens is refused before its
signature is checked. A request without any signature is refused but is no guess: it costs no
token.
"""

from __future__ import annotations

from pocketmq.errors import NoPermissionError
from pocketmq.protocol.auth import new_nonce
from pocketmq.protocol.remoting.acl import ACCESS_KEY, SIGNATURE, verify_signature
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.server.auth.failures import count as count_failure
from pocketmq.server.auth.handshake import Authenticator
from pocketmq.server.auth.throttle import FailureThrottle
from pocketmq.server.auth.users import UserStore

__all__ = ["UNSIGNED_REMARK", "SignatureCheck"]

#: What an unsigned request is told on a port with authentication.
UNSIGNED_REMARK = (
    "this server requires authentication: sign requests with a user's access key and secret "
    "key (the 4.x ACL signature, AclClientRPCHook; docs/security.md)"
)


class SignatureCheck:
    """The users a port accepts signatures of, and the throttle of wrong ones (module doc)."""

    def __init__(self, users: UserStore | None, throttle: FailureThrottle | None = None) -> None:
        self.users = users
        self.throttle = throttle or FailureThrottle()

    @classmethod
    def of(cls, authenticator: Authenticator | None) -> SignatureCheck | None:
        """The check of a port whose native side authenticates with ``authenticator``: the
        same users, the same throttle; None for a port without authentication."""
        if authenticator is None:
            return None
        return cls(authenticator.users, authenticator.throttle)

    def _secret(self, access_key: str) -> str | None:
        if self.users is None or not access_key:
            return None
        self.users.refresh()
        return self.users.secret(access_key)

    def signer(self, command: RemotingCommand, source: str) -> str:
        """The access key of the user who signed ``command`` (sent from ``source``, an IP);
        :class:`NoPermissionError` for an unsigned request, a wrong signature or an unknown
        user, and while ``source`` is throttled."""
        wait = self.throttle.wait(source)
        if wait > 0:
            count_failure("remoting", "throttled")
            raise NoPermissionError(
                f"too many wrong signatures from {source}: try again in {wait:.0f} s"
            )
        fields = command.ext_fields
        access_key = fields.get(ACCESS_KEY, "")
        if not access_key or not fields.get(SIGNATURE):
            count_failure("remoting", "unauthenticated")
            raise NoPermissionError(UNSIGNED_REMARK)
        secret = self._secret(access_key)
        # an unknown key is checked against a throwaway secret: the same work as a known one
        if not verify_signature(fields, command.body, secret or new_nonce()) or secret is None:
            self.throttle.failed(source)
            count_failure("remoting", "unauthenticated")
            raise NoPermissionError(f"access key {access_key!r} and signature do not match a user")
        return access_key

    def may_send_large(self, header: RemotingCommand, source: str) -> bool:
        """Whether a connection that has not sent a correctly signed request yet may send a
        frame larger than the pre-handshake bound: only when its header names a known user and
        carries a signature (checked once the body is in), and its source is not throttled."""
        if self.throttle.wait(source) > 0 or not header.ext_fields.get(SIGNATURE):
            return False
        return self._secret(header.ext_fields.get(ACCESS_KEY, "")) is not None
