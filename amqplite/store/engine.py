"""The store: one writer thread doing group commit over SQLAlchemy Core.

Why group commit: with ``synchronous=FULL`` every commit is an fsync, so the
only way to confirm tens of thousands of persistent messages per second is to
put everything that arrived while the previous commit was in flight into the
next transaction. Callers never wait on the writer; they get a callback from
the writer thread once their ops are durable (or failed).

This module is the thread, the grouping and the retries; turning ops into SQL
is :mod:`amqplite.store.apply`'s, reads are :mod:`amqplite.store.reads`'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.exc import OperationalError

from . import recovery
from . import schema as s
from .apply import Applier, PruneRange, storable_logs, upsert
from .database import make_engine
from .logbatch import create_views
from .ops import (
    AppendStream,
    AppendStreams,
    DeleteStreamSegments,
    EncodedLog,
    LogEvent,
    Op,
    PutStreamSegment,
)
from .reads import StoreReads
from .recovery import Recovered
from .upgrade import (
    delivery_log_to_batches,
    mqtt_tables_by_vhost,
    parameters_defined_by,
    stream_entries_to_chunks,
)

log = logging.getLogger(__name__)

Callback = Callable[[BaseException | None], None]


class StoreClosed(RuntimeError):
    """The store takes no more submissions (it is closing or closed): the one
    refusal that means the broker is stopping. Any other error from ``submit``
    (an op that cannot be encoded) is about that submission alone."""

DURABILITY_SYNCHRONOUS = {"fsync": "FULL", "os": "NORMAL"}

#: A failed commit that may pass is retried after this, doubling up to the max.
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
#: Once close() is called, a store that keeps failing is given up on after this.
GIVE_UP_ON_STOP_S = 10.0
#: A group of delivery-log rows alone waits this long for more work before it
#: commits: nobody waits on those rows, and one commit per 50 ms instead of one
#: per message is what makes a trickle of transient traffic cheap.
LOG_LINGER_S = 0.05


def _may_pass(exc: BaseException) -> bool:
    """Disk full, I/O errors, locks: the database refuses now, not this content."""
    return isinstance(exc, OperationalError | OSError)


#: meta key: "1" after a clean shutdown, "0" while a broker runs (see mark_open)
CLEAN_KEY = "clean_shutdown"


#: ops whose commit need not survive a power loss the moment it is confirmed
_RELAXED = frozenset({tuple, LogEvent, EncodedLog, AppendStream, AppendStreams,
                      PutStreamSegment, DeleteStreamSegments})


def _needs_fsync(group: Sequence[tuple[Sequence[Any], Any]]) -> bool:
    """Does anything in the group need to survive a power loss the moment it commits?

    Delivery-log rows do not: no publisher, consumer or admin waits on them.
    Stream appends do not either, as in RabbitMQ, whose streams confirm an
    entry once it is written to the file, never fsynced ("they rely on the
    operating system"; docs/streams, Data Safety). Either way a process crash
    (kill -9) loses nothing committed: the OS has the pages, and a later
    fsynced commit carries them with it (one WAL, in order). Everything else
    (messages, entries, acks, metadata) is fsynced before anyone hears of it.
    """
    relaxed = _RELAXED
    for ops, _cb in group:
        for op in ops:
            if type(op) not in relaxed:
                return True
    return False


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


class Store(StoreReads):
    """Durable state of the broker in one database, written by one thread.

    Thread model: ``submit`` may be called from any thread; the callbacks run
    on the writer thread (keep them short, e.g. hand off to the event loop).
    Reads (``fetch_bodies``, ``read_delivery_log``) use pooled connections
    of their own and may run concurrently with the writer.
    """

    def __init__(self, url: str, durability: str = "fsync", *, busy_timeout_ms: int = 10_000,
                 log_linger_s: float = LOG_LINGER_S):
        if durability not in DURABILITY_SYNCHRONOUS:
            raise ValueError(f"durability must be 'fsync' or 'os', not {durability!r}")
        self.url = url
        self.durability = durability
        self.engine: Engine = make_engine(url)
        self._is_sqlite = self.engine.dialect.name == "sqlite"
        if self._is_sqlite:
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

            event.listen(self.engine, "connect", _sqlite_pragmas)
            if self.engine.dialect.driver == "pysqlite":
                _register_sqlite3_fast_adapters()
        elif self.engine.dialect.name == "postgresql" and durability == "os":

            def _pg_async_commit(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("SET synchronous_commit TO off")
                cur.close()
                dbapi_conn.commit()

            event.listen(self.engine, "connect", _pg_async_commit)

        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._pending: list[tuple[Sequence[Op], Callback | None]] = []
        self._submitted = 0
        self._completed = 0
        self._idle = False
        self._stopping = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: submissions whose commit failed for good (not retried)
        self._failed = 0
        self._conn: Connection | None = None
        self._failing_since: float | None = None
        #: why writes fail right now (being retried), else None
        self.failing: str | None = None
        #: called on the writer thread with ``failing`` whenever it changes
        self.on_failing: Callable[[str | None], None] | None = None
        #: committed (or failed) groups so far; for metrics and tests
        self.groups = 0
        #: submissions in the most recent group
        self.last_group_size = 0
        self._applier = Applier(self.engine)
        #: SQLite: copies the WAL into the database off the writer's path
        self._checkpointer: Checkpointer | None = None
        #: SQLite with durability "fsync": a group of delivery-log rows alone commits
        #: without an fsync (see ``_needs_fsync``)
        self._relaxable = self._is_sqlite and durability == "fsync"
        #: the writer connection's synchronous setting (None: as connected, FULL)
        self._sync: bool | None = None
        #: called on the writer thread after each group's callbacks (the writer
        #: process sends its acknowledgements in one frame from here)
        self.on_group: Callable[[], None] | None = None
        #: how long a log-only group waits for company (0: commit at once)
        self.log_linger_s = log_linger_s
        self._lingering = False
        self._urgent = False

    # --- set-up ---------------------------------------------------------------

    def create(self) -> None:
        """Create the tables if missing and stamp the schema version (idempotent)."""
        s.metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            rows = dict(conn.execute(select(s.meta.c.key, s.meta.c.value)).all())
            version = rows.get("schema_version")
            parameters_defined_by(conn)  # a column only: no version change
            if version is not None and int(version) in s.UPGRADABLE_VERSIONS:
                # create_all above added the missing tables; version 2's stream rows
                # move into chunks, and older delivery-log rows into batches
                # and the MQTT tables get their (vhost, client id) keys
                # (store/upgrade.py), in this same transaction
                if int(version) == 2:
                    stream_entries_to_chunks(conn)
                delivery_log_to_batches(conn)
                mqtt_tables_by_vhost(conn)
                conn.execute(update(s.meta).where(s.meta.c.key == "schema_version")
                             .values(value=str(s.SCHEMA_VERSION)))
            elif version is not None and int(version) != s.SCHEMA_VERSION:
                raise RuntimeError(
                    f"database schema version {version}, this amqplite needs {s.SCHEMA_VERSION}"
                )
            defaults = {
                "schema_version": str(s.SCHEMA_VERSION),
                "max_message_id": "0",
                "max_queue_id": "0",
            }
            missing = [{"key": k, "value": v} for k, v in defaults.items() if k not in rows]
            if missing:
                conn.execute(insert(s.meta), missing)
            create_views(conn)

    def prepare(self) -> None:
        """Read what the writer needs to know before its first group (the id marks)."""
        with self.engine.connect() as conn:
            self._applier.read_marks(conn)

    def commit_group(self, group: list[tuple[Sequence[Any], Callback | None]],
                     ) -> list[BaseException | None]:
        """Commit one group on the caller's thread (for a writer that is not ours:
        the writer process); the error or None of each submission. Callbacks are
        not called."""
        return self._commit_group(group)

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is not None:
            raise RuntimeError("store already started")
        if self._closed:
            raise StoreClosed("store is closed")
        self.prepare()
        self._thread = threading.Thread(target=self._run, name="amqplite-store-writer", daemon=True)
        self._thread.start()

    @property
    def failed_submissions(self) -> int:
        """Submissions whose commit failed for good (a clean stop needs none)."""
        return self._failed

    # --- writing --------------------------------------------------------------

    def submit(self, ops: Sequence[Op], callback: Callback | None = None, *,
               urgent: bool = False) -> None:
        """Queue ops for the next group; ``callback(None | error)`` runs after its commit.

        ``urgent``: someone waits on this commit (a confirm, a read), so a group
        of log rows must not linger for it. Never blocks on I/O. Do not mutate
        ``ops`` after submitting it.
        """
        with self._lock:
            if self._stopping:
                raise StoreClosed("store is closed")
            self._pending.append((ops, callback))
            self._submitted += 1
            if urgent:
                self._urgent = True
            if self._idle:
                self._idle = False
                self._wake.notify()
            elif self._lingering and (self._urgent or _needs_fsync(((ops, callback),))):
                self._urgent = True  # someone waits on this one: stop lingering
                self._wake.notify()

    def flush(self, timeout: float | None = None) -> None:
        """Block until everything submitted before this call has committed (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._submitted
            if self._completed >= target:
                return
            if self._thread is None:
                raise RuntimeError("store not started: nothing will ever commit")
            while self._completed < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("store flush timed out")
                self._done.wait(remaining)

    def mark_open(self) -> None:
        """Record that a broker runs on this database (call after ``load``).

        Until ``close(clean=True)`` records the opposite, a later ``load``
        sees an unclean shutdown: deliveries may have reached clients whose
        "delivered" marks never committed.
        """
        with self.engine.begin() as conn:
            upsert(conn, s.meta, {"key": CLEAN_KEY}, {"value": "0"})

    def close(self, timeout: float | None = None, *, clean: bool = False) -> None:
        """Flush, stop the writer and dispose the engine (idempotent).

        ``clean``: every submission committed, so the next start may trust the
        stored redelivered flags.
        """
        if self._closed:
            return
        if self._thread is not None:
            with self._lock:
                self._stopping = True
                self._wake.notify()
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("store writer did not stop in time")
        with self._lock:
            self._stopping = True
            if self._pending:
                log.warning("store closed before start: %d submissions dropped", len(self._pending))
                clean = False
            if self._failed:
                clean = False
        self._finish(clean and self._thread is not None)

    def _finish(self, clean: bool) -> None:
        """Record a clean stop if there was one, and let the database go."""
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if clean:
            try:
                with self.engine.begin() as conn:
                    upsert(conn, s.meta, {"key": CLEAN_KEY}, {"value": "1"})
            except Exception:
                log.exception("could not record the clean shutdown")
        self._closed = True
        self.engine.dispose()

    def _run(self) -> None:
        lock, wake, done = self._lock, self._wake, self._done
        while True:
            with lock:
                while not self._pending and not self._stopping:
                    self._idle = True
                    wake.wait()
                self._idle = False
                if not self._pending:
                    break
                group, self._pending = self._pending, []
                if (self.log_linger_s > 0 and not self._stopping and not self._urgent
                        and not _needs_fsync(group)):
                    group += self._linger()
                self._urgent = False
            errors = self._commit_group(group)
            for (_ops, callback), error in zip(group, errors, strict=True):
                if callback is not None:
                    try:
                        callback(error)
                    except Exception:
                        log.exception("store callback raised")
            with lock:
                self._completed += len(group)
                self.groups += 1
                self.last_group_size = len(group)
                done.notify_all()
            if self.on_group is not None:
                try:
                    self.on_group()
                except Exception:
                    log.exception("store group hook raised")
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _linger(self) -> list[tuple[Sequence[Op], Callback | None]]:
        """Called with the lock held, for a group of log rows only: wait up to
        ``log_linger_s`` for more, unless work someone waits on (or close) comes
        first; then take everything that arrived meanwhile."""
        deadline = time.monotonic() + self.log_linger_s
        self._lingering = True
        try:
            while not self._stopping and not self._urgent:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wake.wait(remaining)
        finally:
            self._lingering = self._urgent = False
        more, self._pending = self._pending, []
        return more

    def _commit_group(self, group: list[tuple[Sequence[Any], Callback | None]],
                      ) -> list[BaseException | None]:
        """Commit a group; the error (or None) of each submission in it.

        A failure that may pass (disk full, I/O error, a lock) is retried until
        it does: nothing in the group is confirmed meanwhile, and nothing is
        refused that would have been written a moment later. Any other error
        is the content of some submission: each is then committed on its own,
        so only the culprit fails and other clients' work is untouched.
        """
        try:
            if len(group) == 1:
                return [self._commit_alone(group[0])]
            error = self._commit_retrying(group)
            if error is None:
                return [None] * len(group)
            log.error("store group of %d submissions failed (%r): committing them one by one",
                      len(group), error)
            return [self._commit_alone(sub) for sub in group]
        finally:
            ckpt = self._checkpointer
            if ckpt is None and self._is_sqlite and not self._closed:
                ckpt = self._checkpointer = Checkpointer(self.engine)
            if ckpt is not None:
                ckpt.nudge()

    def _commit_alone(self, sub: tuple[Sequence[Any], Callback | None]) -> BaseException | None:
        """One submission in its own transaction; if it fails, once more with its
        delivery-log rows made bindable: a log row carries client-chosen text and
        must never cost anyone a commit."""
        error = self._commit_retrying([sub])
        if error is not None:
            fixed = storable_logs(sub[0])
            if fixed is not None:
                error = self._commit_retrying([(fixed, sub[1])])
        if error is not None:
            log.error("store submission of %d ops failed: %r", len(sub[0]), error)
            with self._lock:
                self._failed += 1
        return error

    def _commit_retrying(self, group: list[tuple[Sequence[Any], Callback | None]],
                         ) -> BaseException | None:
        delay = RETRY_MIN_S
        while True:
            try:
                if self._conn is None:
                    self._conn = self.engine.connect()
                    self._sync = None
                if self._relaxable:
                    self._set_sync(self._conn, _needs_fsync(group))
                with self._conn.begin():
                    self._applier.apply(self._conn, [ops for ops, _cb in group])
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
                with self._lock:
                    if self._stopping and now - self._failing_since > GIVE_UP_ON_STOP_S:
                        log.error("store still failing at shutdown: giving up on %d submissions",
                                  len(group))
                        self._failed += len(group)
                        return exc
                    self._wake.wait(delay)  # close() wakes it early
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            if self._failing_since is not None:
                log.warning("store writes succeed again after %.1f s",
                            time.monotonic() - self._failing_since)
                self._failing_since = None
                self._set_failing(None)
            return None

    def _set_sync(self, conn: Connection, full: bool) -> None:
        """Switch the writer connection between FULL and NORMAL between transactions.

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
        hook = self.on_failing
        if hook is not None:
            try:
                hook(reason)
            except Exception:
                log.exception("store health hook raised")

    # --- pruning ------------------------------------------------------------------

    def prune_delivery_log(self, max_id: int, older_than_us: int, batch_size: int = 5000) -> int:
        """Delete the log's events with ``id <= max_id`` and ``ts_us < older_than_us``,
        a whole batch at a time (``logbatch``): a batch goes once all its events
        qualify, so a few events past the cutoff may stay until the next prune.
        The number of events deleted.

        Works in id ranges of about ``batch_size`` events, each deleted by the
        writer inside an ordinary group, so publishing never waits behind one
        long delete. Blocks the calling thread (not the writer's) until done.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("prune_delivery_log would deadlock on the writer thread")
        b = s.log_batches
        find = (
            select(b.c.last_id, b.c.count)
            .where(b.c.first_id > bindparam("lo"), b.c.last_id <= max_id,
                   b.c.last_ts_us < older_than_us)
            .order_by(b.c.first_id)
            .limit(max(1, batch_size))
        )
        total, lo = 0, 0
        while True:
            hi, n = None, 0
            with self.engine.connect() as conn:
                for last_id, count in conn.execute(find, {"lo": lo}):
                    hi, n = last_id, n + count
                    if n >= batch_size:
                        break
            if hi is None:
                return total
            op = PruneRange(lo, int(hi), older_than_us)
            self._submit_and_wait([op])
            total += op.deleted
            lo = op.hi

    def _submit_and_wait(self, ops: Sequence[Any], timeout: float | None = None) -> None:
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def callback(error: BaseException | None) -> None:
            outcome.append(error)
            done.set()

        self.submit(ops, callback)
        if not done.wait(timeout):
            raise TimeoutError("store did not commit in time")
        if outcome[0] is not None:
            raise outcome[0]

    # --- recovery -----------------------------------------------------------------

    def load(self, body_window: int = 1000) -> Recovered:
        """Clean up orphans and read everything durable back (call before ``start``)."""
        with self.engine.begin() as conn:
            recovery.clean_up(conn)
            rec = recovery.load(conn, body_window)
            if rec.spilled and rec.meta.get(CLEAN_KEY) != "1":
                recovery.mark_redelivered(conn, list(rec.spilled))
            return rec

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
