"""Group commit: one connection committing groups of submissions, with retries.

Why a class of its own: the broker's writer process (:mod:`.writer_main`) and
the in-process thread store (:mod:`.engine`, tests and tools) commit the same
way, and neither should carry the other's machinery. A ``Committer`` knows no
threads, sockets or callbacks: it is handed a group, commits it, and returns
each submission's error or None. It also owns what only the committing side
needs: the SQLite ``synchronous`` switch, the retry loop and the WAL
checkpointer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import OperationalError

from amqplite.storeops import (
    AppendStream,
    AppendStreams,
    DeleteEntry,
    DeleteStreamSegments,
    EncodedLog,
    LogEvent,
    PutEntry,
    PutMessage,
    PutStreamSegment,
    UpdateEntry,
    settle_batch,
)

from .api import tell_failing
from .apply import Applier, storable_logs
from .database import make_engine

log = logging.getLogger(__name__)

DURABILITY_SYNCHRONOUS = {"fsync": "FULL", "os": "NORMAL"}

#: A failed commit that may pass is retried after this, doubling up to the max.
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
#: Once close() is called, a store that keeps failing is given up on after this.
GIVE_UP_ON_STOP_S = 10.0


def _may_pass(exc: BaseException) -> bool:
    """Disk full, I/O errors, locks: the database refuses now, not this content."""
    return isinstance(exc, OperationalError | OSError)


#: ops whose commit need not survive a power loss the moment it is confirmed
_RELAXED = frozenset({tuple, LogEvent, EncodedLog, AppendStream, AppendStreams,
                      PutStreamSegment, DeleteStreamSegments})
#: the ops a group's own acks can cancel (``settle_batch``)
_CANCELLABLE = frozenset({PutMessage, PutEntry, DeleteEntry, UpdateEntry})


def needs_fsync(group: Sequence[Sequence[Any]]) -> bool:
    """Does anything in the group need to survive a power loss the moment it commits?

    Delivery-log rows do not: no publisher, consumer or admin waits on them.
    Stream appends do not either, as in RabbitMQ, whose streams confirm an
    entry once it is written to the file, never fsynced ("they rely on the
    operating system"; docs/streams, Data Safety). Either way a process crash
    (kill -9) loses nothing committed: the OS has the pages, and a later
    fsynced commit carries them with it (one WAL, in order). Everything else
    (messages, entries, acks, metadata) is fsynced before anyone hears of it,
    except what the group's own ops cancel: a message delivered and acked
    before its insert committed is never written (``Applier``), so a group that
    nets to nothing else (its publisher's confirm, a receipt waits on it) needs
    no fsync, as RabbitMQ's message store confirms a write a remove overtook
    ("ignored") without one. A later fsynced commit carries the group's WAL
    frames (the message id mark) along.
    """
    relaxed, cancellable = _RELAXED, _CANCELLABLE
    ops: list[Any] = []
    acks = False
    for batch in group:
        for op in batch:
            t = type(op)
            if t in relaxed:
                continue
            if t not in cancellable:
                return True  # metadata, stream segments' rows, ...
            acks = acks or t is DeleteEntry
            ops.append(op)
    if ops and not acks:
        return True  # nothing to cancel against (the common publish-only group)
    return bool(settle_batch(ops))


#: a committing connection checkpoints itself only this far behind (pages of
#: 4 KiB): the Checkpointer normally keeps the WAL much shorter
BACKSTOP_CHECKPOINT_PAGES = 32_768
#: a WAL file that grew past this is cut back to it once checkpointed (bytes)
WAL_SIZE_LIMIT = 64 << 20


class Checkpointer:
    """Copies the WAL into the database file on a thread of its own (SQLite).

    Why: SQLite's automatic checkpoint runs in the connection that commits,
    every 1,000 pages: the writer then copied 4 MiB and waited for two
    fsyncs before its next group, every few dozen milliseconds under a
    stream publish, and every publisher waiting on a confirm waited with it.
    Here a passive checkpoint (it never blocks the writer or readers) runs
    after commits, at most every ``busy_interval`` while there is much to
    copy and every ``idle_interval`` while there is little, so a trickle
    of traffic costs about one fsync a second. The sqlite3 module releases
    the GIL while SQLite works, so the copy overlaps the writer's own work.
    """

    def __init__(self, engine: Engine, *, busy_interval: float = 0.05,
                 idle_interval: float = 1.0, busy_pages: int = 1000) -> None:
        self._engine = engine
        self.busy_interval = busy_interval
        self.idle_interval = idle_interval
        self.busy_pages = busy_pages
        self._cond = threading.Condition()
        self._nudged = False
        self._stopping = False
        #: checkpoints run so far (tests, metrics)
        self.runs = 0
        self._thread = threading.Thread(target=self._run, name="amqplite-checkpointer",
                                        daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        """Something was committed: checkpoint when the interval allows."""
        if not self._nudged:
            with self._cond:
                self._nudged = True
                self._cond.notify()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            raw = self._engine.raw_connection()
        except Exception:
            log.exception("checkpointer: no connection; the writer checkpoints itself")
            return
        copied_before = 0
        try:
            while True:
                with self._cond:
                    while not self._nudged and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        return
                    self._nudged = False
                try:
                    cur = raw.cursor()
                    _busy, frames, copied = cur.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    cur.close()
                    self.runs += 1
                except Exception as exc:  # a full disk, an I/O error: the writer sees it too
                    log.debug("checkpoint failed: %s", exc)
                    frames = copied = 0
                # much copied, or much left (readers held it back): come back
                # soon; else rest. A WAL that restarted counts from zero.
                fresh = copied - copied_before if copied >= copied_before else copied
                copied_before = copied
                interval = (self.busy_interval
                            if max(fresh, frames - copied) >= self.busy_pages
                            else self.idle_interval)
                with self._cond:
                    if self._cond.wait_for(lambda: self._stopping, interval):
                        return
        finally:
            raw.close()


def _register_sqlite3_fast_adapters() -> None:
    """Let Python's sqlite3 bind None, bytes and bool without its slow path.

    CPython's sqlite3 binds only exact int/float/str/bytearray directly; any
    other value first goes through adapter look-ups that raise and swallow an
    AttributeError (about 1 us per value). Registering identity-like adapters
    for those three types makes the look-up a dict hit. The values bound are
    unchanged (None -> NULL, bytes -> BLOB, bool -> INTEGER), so this is safe
    process-wide; a type that already has an adapter is left alone.
    """
    import sqlite3

    adapters: tuple[tuple[type, Any], ...] = ((type(None), {}.get), (bytes, bytes), (bool, int))
    for typ, adapter in adapters:
        if (typ, sqlite3.PrepareProtocol) not in sqlite3.adapters:
            sqlite3.register_adapter(typ, adapter)




def open_engine(url: str, durability: str = "fsync", busy_timeout_ms: int = 10_000) -> Engine:
    """An engine for the store: SQLite in WAL mode with the durability's ``synchronous``,
    PostgreSQL with asynchronous commit for durability "os"."""
    if durability not in DURABILITY_SYNCHRONOUS:
        raise ValueError(f"durability must be 'fsync' or 'os', not {durability!r}")
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        sync = DURABILITY_SYNCHRONOUS[durability]

        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            # Debian/Ubuntu build SQLite with SECURE_DELETE on, which zeroes
            # every deleted message body: extra page writes for nothing here.
            cur.execute("PRAGMA secure_delete=OFF")
            # the Checkpointer copies the WAL into the database on a thread
            # of its own; a committing connection does it only far behind
            cur.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_PAGES}")
            cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            cur.close()

        event.listen(engine, "connect", _sqlite_pragmas)
        if engine.dialect.driver == "pysqlite":
            _register_sqlite3_fast_adapters()
    elif engine.dialect.name == "postgresql" and durability == "os":

        def _pg_async_commit(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SET synchronous_commit TO off")
            cur.close()
            dbapi_conn.commit()

        event.listen(engine, "connect", _pg_async_commit)
    return engine


class Committer:
    """Commits groups of submissions on one connection of ``engine``, on the caller's
    thread; one committer per database.

    ``pause(seconds)`` waits between retries of a failing commit (the thread store
    passes one that ``close`` interrupts); ``stopping`` set by the owner makes a
    commit that keeps failing give up after ``GIVE_UP_ON_STOP_S``.
    """

    def __init__(self, engine: Engine, durability: str = "fsync", *,
                 pause: Callable[[float], None] = time.sleep, defer_sync: bool = False) -> None:
        self.engine = engine
        self._is_sqlite = engine.dialect.name == "sqlite"
        self._applier = Applier(engine)
        self._pause = pause
        self._conn: Connection | None = None
        #: SQLite: copies the WAL into the database off the committing path
        self._checkpointer: Checkpointer | None = None
        #: SQLite with durability "fsync": a group of delivery-log rows alone commits
        #: without an fsync (see ``needs_fsync``)
        self._relaxable = self._is_sqlite and durability == "fsync"
        #: the connection's synchronous setting (None: as connected, FULL)
        self._sync: bool | None = None
        #: SQLite with durability "fsync", and the owner syncs the WAL itself
        #: (``defer_sync``): every group commits under NORMAL, and ``owes_sync`` says
        #: that one since the owner last cleared it needs the WAL on disk before
        #: anyone hears of it (see ``WalSync`` in writer_main)
        self.defers_sync = self._relaxable and defer_sync
        self.owes_sync = False
        self._failing_since: float | None = None
        self._closed = False
        #: set by the owner once it stops: a failing commit then gives up in time
        self.stopping = False
        #: submissions whose commit failed for good (not retried)
        self.failed = 0
        #: why writes fail right now (being retried), else None
        self.failing: str | None = None
        #: called on the committing thread with ``failing`` whenever it changes
        self.on_failing: Callable[[str | None], None] | None = None
        #: committed (or failed) groups so far, and the size of the last one
        self.groups = 0
        self.last_group_size = 0
        self._prepared = False

    @property
    def traffic(self) -> tuple[int, int, int]:
        """Entries inserted, entries deleted and stream append ops, by the groups
        committed so far (see ``Applier.inserted``)."""
        a = self._applier
        return a.inserted, a.deleted, a.appended

    def prepare(self) -> None:
        """Read what the writer needs to know before its first group (the id marks).
        The first group does it if nobody did: after the schema exists, whoever
        created it (a store's owner may start it before ``create``)."""
        with self.engine.connect() as conn:
            self._applier.read_marks(conn)
        self._prepared = True

    def commit_group(self, group: Sequence[Sequence[Any]]) -> list[BaseException | None]:
        """Commit a group (the ops of each submission); the error (or None) of each.

        A failure that may pass (disk full, I/O error, a lock) is retried until
        it does: nothing in the group is confirmed meanwhile, and nothing is
        refused that would have been written a moment later. Any other error
        is the content of some submission: each is then committed on its own,
        so only the culprit fails and other clients' work is untouched.
        """
        if not self._prepared:
            self.prepare()
        try:
            if len(group) == 1:
                return [self._commit_alone(group[0])]
            error = self._commit_retrying(group)
            if error is None:
                return [None] * len(group)
            log.error("store group of %d submissions failed (%r): committing them one by one",
                      len(group), error)
            return [self._commit_alone(ops) for ops in group]
        finally:
            self.groups += 1
            self.last_group_size = len(group)
            ckpt = self._checkpointer
            if ckpt is None and self._is_sqlite and not self._closed:
                ckpt = self._checkpointer = Checkpointer(self.engine)
            if ckpt is not None:
                ckpt.nudge()

    def _commit_alone(self, ops: Sequence[Any]) -> BaseException | None:
        """One submission in its own transaction; if it fails, once more with its
        delivery-log rows made bindable: a log row carries client-chosen text and
        must never cost anyone a commit."""
        error = self._commit_retrying([ops])
        if error is not None:
            fixed = storable_logs(ops)
            if fixed is not None:
                error = self._commit_retrying([fixed])
        if error is not None:
            log.error("store submission of %d ops failed: %r", len(ops), error)
            self.failed += 1
        return error

    def _commit_retrying(self, group: Sequence[Sequence[Any]]) -> BaseException | None:
        delay = RETRY_MIN_S
        while True:
            try:
                if self._conn is None:
                    self._conn = self.engine.connect()
                    self._sync = None
                if self.defers_sync:
                    self._set_sync(self._conn, False)
                elif self._relaxable:
                    self._set_sync(self._conn, needs_fsync(group))
                with self._conn.begin():
                    self._applier.apply(self._conn, group)
                    if self.defers_sync and self._applier.durable:
                        # what it wrote, not what the group held (needs_fsync's guess
                        # ahead of the commit); set before the commit: a retry keeps it
                        self.owes_sync = True
            except Exception as exc:
                self._drop_connection()
                if not _may_pass(exc):
                    return exc
                now = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now
                    log.error("store write failed (%s): retrying until it succeeds; "
                              "publishers are blocked meanwhile", exc)
                    self._set_failing(str(exc))
                if self.stopping and now - self._failing_since > GIVE_UP_ON_STOP_S:
                    log.error("store still failing at shutdown: giving up on %d submissions",
                              len(group))
                    self.failed += len(group)
                    return exc
                self._pause(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            if self._failing_since is not None:
                log.warning("store writes succeed again after %.1f s",
                            time.monotonic() - self._failing_since)
                self._failing_since = None
                self._set_failing(None)
            return None

    def _set_sync(self, conn: Connection, full: bool) -> None:
        """Switch the connection between FULL and NORMAL between transactions.

        In WAL mode NORMAL skips the fsync at commit; the next FULL commit
        syncs the WAL up to itself, earlier transactions included, so order
        and every confirmed write stay as durable as before.
        """
        if self._sync is full:
            return
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute("PRAGMA synchronous=FULL" if full else "PRAGMA synchronous=NORMAL")
        self._sync = full

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()  # the next try starts on a fresh connection
            except Exception:
                log.exception("closing the failed writer connection")
            self._conn = None

    def _set_failing(self, reason: str | None) -> None:
        self.failing = reason
        tell_failing(self.on_failing, reason)

    def close(self) -> None:
        """Stop the checkpointer and let the connection go (the engine stays the owner's)."""
        self._closed = True
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
