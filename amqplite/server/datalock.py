"""One broker per data directory: an exclusive ``flock`` on ``DATA/amqplite.lock``;
one broker per PostgreSQL database: an advisory lock (:class:`DatabaseLock`).

Two brokers on one SQLite file would interleave recoveries and hand out the
same messages twice. ``flock`` belongs to the open file description, so the
kernel drops it when the process dies in any way (kill -9 included): a stale
lock file never blocks a restart. The owner writes its pid, host and ports
into the file so the refused second broker can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqplite.store.database import masked

if TYPE_CHECKING:  # dblock needs SQLAlchemy, which a broker on SQLite never loads
    from amqplite.store.dblock import LockSession

LOCK_NAME = "amqplite.lock"


class DataDirLocked(Exception):
    """Another live broker holds the data directory; the message names it."""


class DataDirLock:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory).resolve() / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, **info: Any) -> None:
        """Take the lock or raise :class:`DataDirLocked` at once (never waits)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _describe(os.pread(fd, 4096, 0))
            os.close(fd)
            raise DataDirLocked(
                f"data directory {self.path.parent} is in use by another amqplite broker "
                f"({owner}); lock file {self.path}") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.update(**info)

    def update(self, **info: Any) -> None:
        """Rewrite the owner record (ports are known only once the listeners are bound)."""
        if self._fd is None:
            return
        record = {"pid": os.getpid(), "host": socket.gethostname(), **info}
        data = (json.dumps(record) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Unlock and close; the file stays (removing it would race a starting broker)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


def _describe(raw: bytes) -> str:
    try:
        rec = json.loads(raw.decode())
    except ValueError:
        return "owner unknown"
    if not isinstance(rec, dict):
        return "owner unknown"
    return _owner_text(rec)


def _owner_text(rec: dict[str, Any]) -> str:
    """``pid P on host H, AMQP port(s) ..., admin port ...`` from an owner record."""
    parts = [f"pid {rec.get('pid', '?')} on host {rec.get('host', '?')}"]
    if rec.get("ports"):
        parts.append(f"AMQP port(s) {', '.join(str(p) for p in rec['ports'])}")
    if rec.get("admin_port"):
        parts.append(f"admin port {rec['admin_port']}")
    return ", ".join(parts)


class DatabaseLocked(Exception):
    """Another live broker holds the database (PostgreSQL); the message names it."""


class DatabaseLockLost(DatabaseLocked):
    """The running broker's lock session broke and another broker took the lock."""


#: a refused broker tries again for this long: the backend of a broker killed a
#: moment ago may not have noticed yet that its client is gone
DB_LOCK_GRACE_S = 3.0
DB_LOCK_POLL_S = 0.1


class DatabaseLock:
    """One broker per database server's database: :mod:`amqplite.store.dblock`'s
    advisory lock, with the data-dir lock's owner record and messages.

    The owner record travels as the lock session's ``application_name``
    (``amqplite pid=P ports=A,B admin=C host=H``, at most 63 bytes), which
    ``pg_stat_activity`` shows to the refused broker and to operators.
    """

    def __init__(self, url: str, *, grace_s: float = DB_LOCK_GRACE_S) -> None:
        self.url = url
        self.grace_s = grace_s
        self._session: LockSession | None = None
        self._info: dict[str, Any] = {}

    def acquire(self, **info: Any) -> None:
        """Take the lock or raise :class:`DatabaseLocked` after ``grace_s``."""
        from amqplite.store.dblock import LOCK_KEYS, LockSession

        self._info = info
        session = LockSession(self.url, self._record())
        try:
            deadline = time.monotonic() + self.grace_s
            while not session.try_lock():
                if time.monotonic() >= deadline:
                    raise DatabaseLocked(
                        f"database {masked(self.url)} is in use by another amqplite broker "
                        f"({self._holder(session)}); PostgreSQL advisory lock "
                        f"({LOCK_KEYS[0]}, {LOCK_KEYS[1]})")
                time.sleep(DB_LOCK_POLL_S)
        except BaseException:
            session.close()
            raise
        self._session = session

    def update(self, **info: Any) -> None:
        """Publish the ports once the listeners are bound."""
        self._info = info
        if self._session is not None:
            # a dropped lock session: the next check() replaces it, or stops the broker
            # because another took the lock; neither is a failed start
            with contextlib.suppress(Exception):
                self._session.rename(self._record())

    def check(self) -> bool:
        """Is the lock still ours? A broken session (the database restarted, the
        network dropped it) is replaced if the lock is free again; raises
        :class:`DatabaseLockLost` if another broker took it meanwhile. False when
        the database cannot be reached now (try again later)."""
        session = self._session
        if session is None:
            return False
        if session.alive():
            return True
        try:
            if session.try_lock():
                return True
            found = session.holder()
        except Exception:
            session.close()
            return False
        if found is not None and self._is_mine(found[1]):
            # our old session, which the server has not yet seen die: it goes soon
            session.close()
            return False
        owner = self._describe_holder(found)
        session.close()
        raise DatabaseLockLost(f"database {masked(self.url)} was taken over by another "
                             f"amqplite broker ({owner}) while this one lost its connection")

    def release(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            session.close()

    def _record(self) -> str:
        parts = [f"amqplite pid={os.getpid()}"]
        ports = self._info.get("ports")
        if ports:
            parts.append("ports=" + ",".join(str(p) for p in ports))
        if self._info.get("admin_port"):
            parts.append(f"admin={self._info['admin_port']}")
        parts.append(f"host={socket.gethostname()}")
        return " ".join(parts)

    @staticmethod
    def _is_mine(name: str) -> bool:
        """Is this application_name our own record (the host may be cut short)?"""
        rec = _parse_record(name)
        return (rec is not None and rec["pid"] == str(os.getpid()) and rec["host"] != "?"
                and socket.gethostname().startswith(rec["host"]))

    @classmethod
    def _holder(cls, session: LockSession) -> str:
        try:
            found = session.holder()
        except Exception:
            found = None
        return cls._describe_holder(found)

    @staticmethod
    def _describe_holder(found: tuple[int, str, str | None] | None) -> str:
        if found is None:
            return "owner unknown"
        backend, name, client = found
        where = f"PostgreSQL backend pid {backend}" + (f" from {client}" if client else "")
        rec = _parse_record(name)
        return f"{_owner_text(rec)}; {where}" if rec is not None else where


def _parse_record(name: str) -> dict[str, Any] | None:
    """The owner record of :meth:`DatabaseLock._record`, or None for another name."""
    words = name.split()
    if not words or words[0] != "amqplite":
        return None
    fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    rec: dict[str, Any] = {"pid": fields.get("pid", "?"), "host": fields.get("host", "?")}
    if fields.get("ports"):
        rec["ports"] = fields["ports"].split(",")
    if fields.get("admin"):
        rec["admin_port"] = fields["admin"]
    return rec
