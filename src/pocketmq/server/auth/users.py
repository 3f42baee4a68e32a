"""The broker's users: access keys, their secrets (encrypted at rest), and their type.

Secrets must be readable by the broker — a request's signature is an HMAC keyed with the secret —
so they are encrypted, not hashed: with Fernet (AES-128-CBC + HMAC-SHA256, from the
``cryptography`` package) under a key generated into ``users.key`` beside ``users.json`` in the
data directory's ``config/`` (both mode 0600). A copy of ``users.json`` alone reveals no secret;
the two files together do, so back them up apart. ``pocketmq user ...`` edits the files; a
running broker notices the change within a second.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from pocketmq.broker.persist import write_files
from pocketmq.errors import InvalidArgumentError

__all__ = ["User", "UserStore"]

USER_TYPES = ("super", "normal")

GATEWAY_USER = "gateway/proxy"
"""The identity a broker's own proxy workers authenticate as on its native port, with a secret
the broker makes at each start (docs/proxy.md); no user can have this name (it holds a '/'),
and it may do anything: the workers check each official client's own rights themselves."""


@dataclass(frozen=True, slots=True)
class User:
    """One user as listed (never with the secret)."""

    access_key: str
    user_type: str
    created_at: float


class UserStore:
    """``users.json`` and its key (module doc)."""

    def __init__(self, config_dir: str | Path) -> None:
        self._dir = Path(config_dir)
        self._path = self._dir / "users.json"
        self._key_path = self._dir / "users.key"
        self._users: dict[str, dict[str, object]] = {}
        self._secrets: dict[str, str] = {}
        self._mtime = -1.0
        self._checked = 0.0
        self._fernet: Fernet | None = None
        self.loaded_at = 0.0  # when the users last changed (the ACL's decision cache follows)

    def _cipher(self) -> Fernet:
        if self._fernet is None:
            if not self._key_path.exists():
                write_files([(str(self._key_path), Fernet.generate_key())])  # 0600 from birth
            self._fernet = Fernet(self._key_path.read_bytes().strip())
        return self._fernet

    def load(self) -> None:
        """Read the users again (the file may have been edited by ``pocketmq user``)."""
        try:
            mtime = self._path.stat().st_mtime
        except FileNotFoundError:
            if self._mtime != -1.0:
                self.loaded_at = time.monotonic()
            self._users, self._secrets, self._mtime = {}, {}, -1.0
            return
        if mtime == self._mtime:
            return
        raw = json.loads(self._path.read_text())
        self._users = {u["access_key"]: u for u in raw.get("users", [])}
        self._secrets = {}
        self._mtime = mtime
        self.loaded_at = time.monotonic()

    def refresh(self, every: float = 1.0) -> None:
        """:meth:`load` at most once per ``every`` seconds (the broker calls this per request)."""
        now = time.monotonic()
        if now - self._checked >= every:
            self._checked = now
            self.load()

    def secret(self, access_key: str) -> str | None:
        """The user's secret key, or None for an unknown access key."""
        user = self._users.get(access_key)
        if user is None:
            return None
        cached = self._secrets.get(access_key)
        if cached is None:
            try:
                cached = self._cipher().decrypt(str(user["secret"]).encode()).decode()
            except InvalidToken:
                return None  # a users.key that does not match: nobody authenticates
            self._secrets[access_key] = cached
        return cached

    def user_type(self, access_key: str) -> str:
        """``super``, ``normal``, or "" for an unknown access key."""
        user = self._users.get(access_key)
        return str(user["type"]) if user else ""

    def users(self) -> list[User]:
        """Every user, by access key."""
        return [
            User(str(u["access_key"]), str(u["type"]), float(str(u["created_at"])))
            for _, u in sorted(self._users.items())
        ]

    def _save(self) -> None:
        body = json.dumps({"users": [self._users[k] for k in sorted(self._users)]}, indent=2)
        write_files([(str(self._path), body.encode())])  # 0600 in a 0700 directory
        self._mtime = -1.0
        self.load()

    def create(self, access_key: str, secret: str | None = None, user_type: str = "normal") -> str:
        """Add a user; returns its secret (generated when not given). An existing access key is
        an error: use :meth:`update`."""
        self.load()
        _check(access_key, user_type)
        if access_key in self._users:
            raise InvalidArgumentError(f"user {access_key!r} exists; use `pocketmq user update`")
        secret = secret or secrets.token_urlsafe(24)
        token = self._cipher().encrypt(secret.encode()).decode()
        self._users[access_key] = {
            "access_key": access_key,
            "secret": token,
            "type": user_type,
            "created_at": time.time(),
        }
        self._save()
        return secret

    def update(
        self, access_key: str, *, secret: str | None = None, user_type: str | None = None
    ) -> None:
        """Change a user's secret and/or type."""
        self.load()
        user = self._users.get(access_key)
        if user is None:
            raise InvalidArgumentError(f"no user {access_key!r}")
        if user_type is not None:
            _check(access_key, user_type)
            user["type"] = user_type
        if secret is not None:
            user["secret"] = self._cipher().encrypt(secret.encode()).decode()
        self._save()

    def delete(self, access_key: str) -> bool:
        """Remove a user; False when there was none."""
        self.load()
        if self._users.pop(access_key, None) is None:
            return False
        self._save()
        return True


def _check(access_key: str, user_type: str) -> None:
    if not access_key or any(c.isspace() or c in ",=/" for c in access_key):
        raise InvalidArgumentError(
            f"access key {access_key!r} must be non-empty, without spaces, ',', '=' or '/'"
        )
    if user_type not in USER_TYPES:
        raise InvalidArgumentError(f"user type must be one of {', '.join(USER_TYPES)}")
