"""One broker per PostgreSQL database: a session advisory lock on a connection of its own.

Why a session lock on a dedicated connection: PostgreSQL releases it when the
session ends, and the session ends when the broker process does, kill -9
included (the kernel closes the socket, the backend sees end-of-file). It
lives in the broker process, not the writer: the writer is a child that may
die and be restarted while the broker serves, and the lock must not change
hands meanwhile. The holder's ``application_name`` carries its pid, host and
ports, so a refused broker can say who holds the database.
"""

from __future__ import annotations

import contextlib

from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

from .database import make_engine

#: the advisory lock's two int4 keys: "amqp" and "lite" in ASCII
LOCK_KEYS = (0x616D7170, 0x6C697465)
#: PostgreSQL truncates application_name to this many bytes
APP_NAME_MAX = 63
#: libpq options of the lock's connection: give up connecting after 10 s, and find
#: a dead peer within about 25 s (ignored on a unix socket)
CONNECT_ARGS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                "keepalives_interval": 5, "keepalives_count": 3}

_TRY = text("SELECT pg_try_advisory_lock(:k1, :k2)")
_HOLDER = text(
    "SELECT a.pid, a.application_name, host(a.client_addr) FROM pg_locks l "
    "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :k1 AND l.objid = :k2 "
    "AND l.objsubid = 2 AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())")
_SET_NAME = text("SELECT set_config('application_name', :name, false)")


class LockSession:
    """A connection that tries for, then holds, the broker's advisory lock."""

    def __init__(self, url: str, application_name: str) -> None:
        # no pool: closing the connection must end the session (and free the lock);
        # TCP keepalives notice a vanished network in seconds, not the kernel's hours
        self._engine = make_engine(url, poolclass=NullPool, connect_args=CONNECT_ARGS)
        self._conn: Connection | None = None
        self._name = application_name[:APP_NAME_MAX]

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(_SET_NAME, {"name": self._name})
            self._conn = conn
        return self._conn

    def try_lock(self) -> bool:
        """Take the lock if free (never waits); True when this session holds it."""
        k1, k2 = LOCK_KEYS
        return bool(self._connection().execute(_TRY, {"k1": k1, "k2": k2}).scalar())

    def holder(self) -> tuple[int, str, str | None] | None:
        """The holding backend's pid, application_name and client address, if visible."""
        k1, k2 = LOCK_KEYS
        row = self._connection().execute(_HOLDER, {"k1": k1, "k2": k2}).first()
        if row is None:
            return None
        return int(row[0]), row[1] or "", row[2]

    def rename(self, application_name: str) -> None:
        """Publish a new owner record (the ports, once the listeners are bound)."""
        self._name = application_name[:APP_NAME_MAX]
        if self._conn is not None:
            self._conn.execute(_SET_NAME, {"name": self._name})

    def alive(self) -> bool:
        """Does the session (and so the lock) still exist? False once the connection broke."""
        if self._conn is None:
            return False
        try:
            self._conn.execute(text("SELECT 1"))
        except Exception:
            self.close()
            return False
        return True

    def close(self) -> None:
        """End the session: PostgreSQL frees the lock with it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            # a broken connection: the session is gone anyway
            with contextlib.suppress(Exception):
                conn.close()
        self._engine.dispose()
