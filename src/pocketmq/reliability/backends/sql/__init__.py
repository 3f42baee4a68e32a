"""The SQL backend: SQLite (embedded default), PostgreSQL and MariaDB/MySQL via SQLAlchemy 2.

Why SQLAlchemy's asyncio layer (and not the sync engine in ``asyncio.to_thread``): the business
handler runs *inside* the toolkit's transaction and writes its own rows there, so it needs a
database handle it can await. With the sync engine every handler statement would need its own
thread hop or the handler would block the event loop. The async layer gives the handler an
``AsyncConnection`` (and an ``AsyncSession`` for ORM users) on the very transaction that claims the
log row, with native async drivers where they exist:

=============  ===========================================  ================================
database       URL you may write                            driver used
=============  ===========================================  ================================
SQLite         ``sqlite:///./data/reliability.db``           aiosqlite (sqlite3 in a thread)
PostgreSQL     ``postgresql+psycopg://user@host:5432/db``    psycopg 3, native async
MariaDB/MySQL  ``mysql+pymysql://root@host:3306/db``         asyncmy (a Cython MySQL protocol)
=============  ===========================================  ================================

:func:`~pocketmq.reliability.database_url.async_url` rewrites the familiar sync URLs to their
async drivers, so the same URL works for the CLI, the Spark pipeline and here.

The package, one concept a module: :mod:`.engine` (engines and the three connection policies),
:mod:`.transaction` (the transaction shared with the application), :mod:`.stub_statements` (the
stub's life in SQL), :mod:`.receipts` (the message log) and :mod:`.backend` (the front that runs
them).
"""

from pocketmq.reliability.backends.sql.backend import SqlBackend
from pocketmq.reliability.backends.sql.engine import DEFAULT_URL
from pocketmq.reliability.backends.sql.transaction import SqlTransaction

__all__ = ["DEFAULT_URL", "SqlBackend", "SqlTransaction"]
