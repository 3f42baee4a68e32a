"""A signed-in connection's credential (server/auth/credential.py; docs/security.md, "A deleted
user, or a changed secret, is refused from then on"): valid while the user exists with the
secret it signed in with, checked by one comparison while the users do not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketmq.server.auth.credential import Credential
from pocketmq.server.auth.users import UserStore


@pytest.fixture
def stores(tmp_path: Path) -> tuple[UserStore, UserStore]:
    """The CLI's store (edits) and the broker's (reads them again on refresh)."""
    editor = UserStore(tmp_path)
    editor.create("alice", "a-secret")
    editor.create("bob", "b-secret")
    broker = UserStore(tmp_path)
    broker.load()
    return editor, broker


def _edited(broker: UserStore) -> None:
    broker.refresh(0.0)


def test_other_users_edits_and_a_type_change_keep_it(stores: tuple[UserStore, UserStore]) -> None:
    editor, broker = stores
    credential = Credential(broker, "alice")
    assert credential.holds()
    generation = broker.generation
    editor.create("carol", "c-secret")
    editor.update("alice", user_type="super")
    _edited(broker)
    assert broker.generation != generation  # the one number a connection compares
    assert credential.holds()
    assert credential.seen == broker.generation  # and the next request compares only


@pytest.mark.parametrize("change", ["delete", "rotate", "recreate with the same secret"])
def test_a_deleted_user_or_a_new_secret_ends_it_for_good(
    stores: tuple[UserStore, UserStore], change: str
) -> None:
    editor, broker = stores
    credential = Credential(broker, "alice")
    if change == "delete":
        editor.delete("alice")
    elif change == "rotate":
        editor.update("alice", secret="new-secret")
    else:
        editor.delete("alice")
        editor.create("alice", "a-secret")
    _edited(broker)
    assert not credential.holds()
    assert "deleted or its secret changed" in credential.why()
    editor.create("dave", "d-secret")  # later edits do not bring it back
    _edited(broker)
    assert not credential.holds()
    assert Credential(broker, "bob").holds()


def test_a_user_unknown_when_signing_in_never_holds(tmp_path: Path) -> None:
    store = UserStore(tmp_path)
    store.load()
    assert not Credential(store, "ghost").holds()
