"""A new SQLite file opened by several processes at once: the switch to WAL needs the file to
itself, and when several connections try it at the same moment SQLite answers "database is
locked" at once — the busy timeout does not help (a deadlock it refuses to wait on). The
toolkit's connections retry the switch; the Spark resend's parallel tasks hit exactly this."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from pocketmq.reliability.backends.sql.engine import _use_wal


def _race(path: Path, connections: int = 6) -> list[str]:
    """``connections`` threads switch a fresh file to WAL at the same moment; their errors."""
    sqlite3.connect(path).execute("CREATE TABLE t (x INTEGER)").connection.close()
    barrier = threading.Barrier(connections)
    errors: list[str] = []

    def switch() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        cursor = conn.cursor()
        barrier.wait()
        try:
            _use_wal(cursor)
        except sqlite3.OperationalError as exc:
            errors.append(str(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=switch) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_connections_racing_to_switch_a_fresh_file_to_wal_all_succeed(tmp_path: Path) -> None:
    # without the retry about a quarter of these races lose a connection to "database is locked"
    for trial in range(12):
        path = tmp_path / f"fresh-{trial}.db"
        assert _race(path) == []
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
