"""The store: one writer thread doing group commit over SQLAlchemy Core.

Why group commit: with ``synchronous=FULL`` every commit is an fsync, so the
only way to confirm tens of thousands of persistent messages per second is to
put everything that arrived while the previous commit was in flight into the
next transaction. Callers never wait on the writer; they get a callback from
the writer thread once their ops are durable (or failed).

Why the hot path skips Core constructs at run time: the writer shares the GIL
with the broker's event loop, so per-op Python work must be tiny. The five hot
statements are compiled once from Core constructs for the engine's dialect
and run as DBAPI executemany batches of plain tuples; metadata ops (rare) use
ordinary Core statements.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from itertools import chain as _chain
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    LargeBinary,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import OperationalError
from sqlalchemy.sql.expression import ClauseElement

from . import cbor, recovery
from . import schema as s
from .ops import (
    CopyMessage,
    DeleteBinding,
    DeleteEntry,
    DeleteExchange,
    DeletePermission,
    DeletePolicy,
    DeleteQueue,
    DeleteUser,
    DeleteVhost,
    LogEvent,
    Op,
    PutBinding,
    PutEntry,
    PutExchange,
    PutMessage,
    PutMeta,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutUser,
    PutVhost,
    UpdateEntry,
)
from .recovery import Recovered

log = logging.getLogger(__name__)

Callback = Callable[[BaseException | None], None]

DURABILITY_SYNCHRONOUS = {"fsync": "FULL", "os": "NORMAL"}

#: A failed commit that may pass is retried after this, doubling up to the max.
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
#: Once close() is called, a store that keeps failing is given up on after this.
GIVE_UP_ON_STOP_S = 10.0


def _may_pass(exc: BaseException) -> bool:
    """Disk full, I/O errors, locks: the database refuses now, not this content."""
    return isinstance(exc, OperationalError | OSError)


#: meta key: "1" after a clean shutdown, "0" while a broker runs (see mark_open)
CLEAN_KEY = "clean_shutdown"

# Ids per statement for IN (...) lists; well under SQLite's and PostgreSQL's limits.
_IN_CHUNK = 900
# Rows per multi-row INSERT (x 12 columns stays far below bound-parameter limits).
ROWS_PER_INSERT = 32


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


class _Stmt:
    """A Core statement compiled once; executed as a raw DBAPI executemany.

    Rows are tuples in ``names`` order. Positional paramstyles (SQLite's
    qmark) take them as they are; named ones (psycopg) get dicts.
    """

    __slots__ = ("names", "positional", "sql")

    def __init__(self, stmt: ClauseElement, engine: Engine, names: tuple[str, ...]) -> None:
        compiled: Any = stmt.compile(dialect=engine.dialect)
        self.sql = str(compiled)
        self.names = names
        self.positional = bool(compiled.positional)
        if self.positional and tuple(compiled.positiontup or ()) != names:
            raise RuntimeError(f"unexpected parameter order {compiled.positiontup} != {names}")

    def run(self, conn: Connection, rows: list[Any]) -> None:
        if self.positional:
            conn.exec_driver_sql(self.sql, rows)
        else:
            names = self.names
            conn.exec_driver_sql(self.sql, [dict(zip(names, r, strict=True)) for r in rows])


class _InsertStmt(_Stmt):
    """An INSERT that sends big batches as multi-row VALUES (``rows_per_stmt`` rows each).

    Fewer statement executions means less per-row driver overhead (about a
    quarter of the cost of a narrow row with Python's sqlite3); the remainder
    of a batch goes through the single-row statement.
    """

    __slots__ = ("multi_sql", "rows_per_stmt")

    def __init__(self, table: Any, engine: Engine, names: tuple[str, ...], rows_per_stmt: int):
        super().__init__(insert(table).values(_bound(names)), engine, names)
        self.rows_per_stmt = rows_per_stmt
        self.multi_sql = ""
        if self.positional and rows_per_stmt > 1:
            rows = [_bound(names, f"_{j}") for j in range(rows_per_stmt)]
            compiled: Any = insert(table).values(rows).compile(dialect=engine.dialect)
            want = tuple(f"{n}_{j}" for j in range(rows_per_stmt) for n in names)
            if tuple(compiled.positiontup or ()) == want:
                self.multi_sql = str(compiled)

    def run(self, conn: Connection, rows: list[Any]) -> None:
        k = self.rows_per_stmt
        if not self.multi_sql or len(rows) < k:
            super().run(conn, rows)
            return
        full = len(rows) - len(rows) % k
        flat = _chain.from_iterable
        conn.exec_driver_sql(
            self.multi_sql, [tuple(flat(rows[i : i + k])) for i in range(0, full, k)]
        )
        if full < len(rows):
            conn.exec_driver_sql(self.sql, rows[full:])


def _bound(names: Sequence[str], suffix: str = "") -> dict[str, Any]:
    return {n: bindparam(n + suffix) for n in names}


class _PruneRange:
    """Internal op: delete delivery_log rows with ``lo < id <= hi`` older than a time."""

    __slots__ = ("deleted", "hi", "lo", "older_than_us")

    def __init__(self, lo: int, hi: int, older_than_us: int) -> None:
        self.lo, self.hi, self.older_than_us = lo, hi, older_than_us
        self.deleted = 0


_INT64 = 1 << 63


def _storable_value(v: Any) -> Any:
    """A log-row value the driver can bind: text encodable as UTF-8, ints in 64 bits."""
    if v is None or type(v) is bool:
        return v
    if isinstance(v, int):
        return v if -_INT64 <= v < _INT64 else None
    text = v if isinstance(v, str) else str(v)
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()


def _storable_logs(ops: Sequence[Any]) -> list[Any] | None:
    """``ops`` with every delivery-log row made bindable, or None if no row changed."""
    out: list[Any] = []
    changed = False
    for op in ops:
        t = type(op)
        if t is LogEvent:
            op = (op.ts_us, op.event, op.vhost, op.exchange, op.routing_key, op.queue,
                  op.message_id, op.message_key, op.consumer_tag, op.attempt, op.size, op.reason)
            t = tuple
            changed = True
        if t is tuple:
            fixed = tuple(_storable_value(v) for v in op)
            changed = changed or fixed != op
            op = fixed
        out.append(op)
    return out if changed else None


class _Segment:
    """Hot ops of one group gathered per table, between two metadata ops."""

    __slots__ = ("cancelled", "dels", "entries", "logs", "msgs", "upds")

    def __init__(self) -> None:
        self.msgs: dict[int, tuple[Any, ...]] = {}
        self.entries: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.upds: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.dels: dict[tuple[int, int], int] = {}  # key -> message_id
        self.cancelled: list[int] = []  # message ids of cancelled PutEntry
        self.logs: list[tuple[Any, ...]] = []

    def __bool__(self) -> bool:
        return bool(self.msgs or self.entries or self.upds or self.dels or self.logs)


class Store:
    """Durable state of the broker in one database, written by one thread.

    Thread model: ``submit`` may be called from any thread; the callbacks run
    on the writer thread (keep them short, e.g. hand off to the event loop).
    Reads (``fetch_bodies``, ``read_delivery_log``) use pooled connections
    of their own and may run concurrently with the writer.
    """

    def __init__(self, url: str, durability: str = "fsync", *, busy_timeout_ms: int = 10_000):
        if durability not in DURABILITY_SYNCHRONOUS:
            raise ValueError(f"durability must be 'fsync' or 'os', not {durability!r}")
        self.url = url
        self.durability = durability
        self.engine: Engine = create_engine(url)
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
        self._hw_message = 0
        self._hw_queue = 0
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
        self._compile()

    # --- set-up ---------------------------------------------------------------

    def _compile(self) -> None:
        m, e, dl = s.messages, s.queue_entries, s.delivery_log
        eng = self.engine
        msg_cols = ("id", "exchange", "routing_key", "properties", "body", "body_size")
        self._ins_msg = _InsertStmt(m, eng, msg_cols, ROWS_PER_INSERT)
        entry_cols = ("queue_id", "position", "message_id", "delivery_count", "redelivered")
        self._ins_entry = _InsertStmt(e, eng, entry_cols, ROWS_PER_INSERT)
        self._upd_entry = _Stmt(
            update(e)
            .where(e.c.queue_id == bindparam("k_q"), e.c.position == bindparam("k_p"))
            .values(delivery_count=bindparam("dc"), redelivered=bindparam("red")),
            eng,
            ("dc", "red", "k_q", "k_p"),
        )
        self._del_entry = _Stmt(
            delete(e).where(e.c.queue_id == bindparam("k_q"), e.c.position == bindparam("k_p")),
            eng,
            ("k_q", "k_p"),
        )
        log_cols = tuple(c.name for c in dl.columns if c.name != "id")
        self._ins_log = _InsertStmt(dl, eng, log_cols, ROWS_PER_INSERT)
        # Set-based orphan removal: messages among these ids that no entry references.
        self._del_orphans = delete(m).where(
            m.c.id.in_(bindparam("ids", expanding=True)),
            ~exists().where(e.c.message_id == m.c.id),
        )
        self._set_meta = update(s.meta).where(s.meta.c.key == bindparam("k")).values(
            value=bindparam("v")
        )

    def create(self) -> None:
        """Create the tables if missing and stamp the schema version (idempotent)."""
        s.metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            rows = dict(conn.execute(select(s.meta.c.key, s.meta.c.value)).all())
            version = rows.get("schema_version")
            if version is not None and int(version) != s.SCHEMA_VERSION:
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

    def start(self) -> None:
        """Start the writer thread (once)."""
        if self._thread is not None:
            raise RuntimeError("store already started")
        if self._closed:
            raise RuntimeError("store is closed")
        with self.engine.connect() as conn:
            meta = dict(conn.execute(select(s.meta.c.key, s.meta.c.value)).all())
            self._hw_message = max(
                int(meta.get("max_message_id", 0)),
                int(conn.execute(select(func.max(s.messages.c.id))).scalar() or 0),
            )
            self._hw_queue = max(
                int(meta.get("max_queue_id", 0)),
                int(conn.execute(select(func.max(s.queues.c.id))).scalar() or 0),
            )
        self._thread = threading.Thread(target=self._run, name="amqplite-store-writer", daemon=True)
        self._thread.start()

    # --- writing --------------------------------------------------------------

    def submit(self, ops: Sequence[Op], callback: Callback | None = None) -> None:
        """Queue ops for the next group; ``callback(None | error)`` runs after its commit.

        Never blocks on I/O. Do not mutate ``ops`` after submitting it.
        """
        with self._lock:
            if self._stopping:
                raise RuntimeError("store is closed")
            self._pending.append((ops, callback))
            self._submitted += 1
            if self._idle:
                self._idle = False
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
            self._replace(conn, s.meta, {"key": CLEAN_KEY}, {"value": "0"})

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
        if clean and self._thread is not None:
            try:
                with self.engine.begin() as conn:
                    self._replace(conn, s.meta, {"key": CLEAN_KEY}, {"value": "1"})
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
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _commit_group(self, group: list[tuple[Sequence[Any], Callback | None]],
                      ) -> list[BaseException | None]:
        """Commit a group; the error (or None) of each submission in it.

        A failure that may pass (disk full, I/O error, a lock) is retried until
        it does: nothing in the group is confirmed meanwhile, and nothing is
        refused that would have been written a moment later. Any other error
        is the content of some submission: each is then committed on its own,
        so only the culprit fails and other clients' work is untouched.
        """
        if len(group) == 1:
            return [self._commit_alone(group[0])]
        error = self._commit_retrying(group)
        if error is None:
            return [None] * len(group)
        log.error("store group of %d submissions failed (%r): committing them one by one",
                  len(group), error)
        return [self._commit_alone(sub) for sub in group]

    def _commit_alone(self, sub: tuple[Sequence[Any], Callback | None]) -> BaseException | None:
        """One submission in its own transaction; if it fails, once more with its
        delivery-log rows made bindable: a log row carries client-chosen text and
        must never cost anyone a commit."""
        error = self._commit_retrying([sub])
        if error is not None:
            fixed = _storable_logs(sub[0])
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
                with self._conn.begin():
                    self._apply(self._conn, group)
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

    def _apply(self, conn: Connection, group: list[tuple[Sequence[Any], Callback | None]]) -> None:
        """Apply one group in order: hot ops batched per table, metadata ops in between."""
        seg = _Segment()
        msgs, entries, upds, dels, cancelled, logs = (
            seg.msgs, seg.entries, seg.upds, seg.dels, seg.cancelled, seg.logs,
        )
        hw_message = hw_start = self._hw_message
        hw_queue = self._hw_queue
        for ops, _cb in group:
            for op in ops:
                t = type(op)
                if t is tuple:  # a delivery_log row in column order (the broker's fast path)
                    logs.append(op)
                    mk = op[7]
                    if mk is not None and mk > hw_message:
                        hw_message = mk
                elif t is LogEvent:
                    mk = op.message_key
                    logs.append((
                        op.ts_us, op.event, op.vhost, op.exchange, op.routing_key, op.queue,
                        op.message_id, mk, op.consumer_tag, op.attempt, op.size, op.reason,
                    ))
                    if mk is not None and mk > hw_message:
                        hw_message = mk
                elif t is PutEntry:
                    key = (op.queue_id, op.position)
                    if key in dels:  # position reused after a delete: keep the order
                        self._flush_segment(conn, seg)
                        seg = _Segment()
                        msgs, entries, upds, dels, cancelled, logs = (
                            seg.msgs, seg.entries, seg.upds, seg.dels, seg.cancelled, seg.logs,
                        )
                    entries[key] = (
                        op.queue_id, op.position, op.message_id, op.delivery_count,
                        op.redelivered,
                    )
                elif t is DeleteEntry:
                    key = (op.queue_id, op.position)
                    if entries.pop(key, None) is not None:
                        cancelled.append(op.message_id)
                    else:
                        dels[key] = op.message_id
                        upds.pop(key, None)
                elif t is PutMessage:
                    mid = op.message_id
                    body = op.body
                    msgs[mid] = (mid, op.exchange, op.routing_key, op.properties, body, len(body))
                    if mid > hw_message:
                        hw_message = mid
                elif t is UpdateEntry:
                    key = (op.queue_id, op.position)
                    row = entries.get(key)
                    if row is not None:
                        entries[key] = (row[0], row[1], row[2], op.delivery_count, op.redelivered)
                    elif key not in dels:
                        upds[key] = (op.delivery_count, op.redelivered, op.queue_id, op.position)
                else:
                    if seg:
                        self._flush_segment(conn, seg)
                        seg = _Segment()
                        msgs, entries, upds, dels, cancelled, logs = (
                            seg.msgs, seg.entries, seg.upds, seg.dels, seg.cancelled, seg.logs,
                        )
                    if t is PutQueue and op.queue_id > hw_queue:
                        hw_queue = op.queue_id
                    elif t is CopyMessage and op.message_id > hw_message:
                        hw_message = op.message_id
                    self._apply_meta(conn, op)
        if seg:
            self._flush_segment(conn, seg)
        if hw_message > hw_start:
            conn.execute(self._set_meta, {"k": "max_message_id", "v": str(hw_message)})
        if hw_queue > self._hw_queue:
            conn.execute(self._set_meta, {"k": "max_queue_id", "v": str(hw_queue)})
        # If the commit fails after this, the marks are merely higher than needed.
        self._hw_message, self._hw_queue = hw_message, hw_queue

    def _flush_segment(self, conn: Connection, seg: _Segment) -> None:
        msgs = seg.msgs
        if seg.cancelled and msgs:
            # A message none of whose entries survived this segment is never written.
            live = {row[2] for row in seg.entries.values()}
            for mid in seg.cancelled:
                if mid not in live:
                    msgs.pop(mid, None)
        # Inserts first, then updates, then deletes: a delete of a key inserted
        # in the same segment was already cancelled above, and a message shared
        # with a fresh entry must survive the orphan check.
        if msgs:
            self._ins_msg.run(conn, list(msgs.values()))
        if seg.entries:
            self._ins_entry.run(conn, list(seg.entries.values()))
        if seg.upds:
            self._upd_entry.run(conn, list(seg.upds.values()))
        if seg.dels:
            self._del_entry.run(conn, list(seg.dels))
            self._delete_orphans(conn, list(set(seg.dels.values())))
        if seg.logs:
            self._ins_log.run(conn, seg.logs)

    def _delete_orphans(self, conn: Connection, message_ids: list[int]) -> None:
        stmt = self._del_orphans
        for i in range(0, len(message_ids), _IN_CHUNK):
            conn.execute(stmt, {"ids": message_ids[i : i + _IN_CHUNK]})

    # --- metadata ops (rare; plain Core) ----------------------------------------

    @staticmethod
    def _replace(conn: Connection, table: Any, key: dict[str, Any], values: dict[str, Any]) -> None:
        """Portable upsert: delete by key, insert (metadata ops are rare)."""
        conn.execute(delete(table).where(*(table.c[k] == v for k, v in key.items())))
        conn.execute(insert(table).values(**key, **values))

    def _apply_meta(self, conn: Connection, op: Any) -> None:
        t = type(op)
        if t is CopyMessage:
            m = s.messages
            conn.execute(insert(m).from_select(
                [m.c.id, m.c.exchange, m.c.routing_key, m.c.properties, m.c.body, m.c.body_size],
                select(
                    literal(op.message_id, BigInteger), literal(op.exchange),
                    literal(op.routing_key), literal(op.properties, LargeBinary),
                    m.c.body, m.c.body_size,
                ).where(m.c.id == op.source_id),
            ))
        elif t is PutExchange:
            self._replace(
                conn, s.exchanges, {"vhost": op.vhost, "name": op.name},
                {"type": op.type, "durable": op.durable, "auto_delete": op.auto_delete,
                 "internal": op.internal, "arguments": cbor.encode(op.arguments)},
            )
        elif t is DeleteExchange:
            x, b = s.exchanges, s.bindings
            conn.execute(delete(x).where(x.c.vhost == op.vhost, x.c.name == op.name))
            conn.execute(delete(b).where(
                b.c.vhost == op.vhost,
                or_(b.c.source == op.name,
                    and_(b.c.destination == op.name, b.c.destination_kind == "exchange")),
            ))
        elif t is PutQueue:
            q = s.queues
            conn.execute(delete(q).where(q.c.id == op.queue_id))
            conn.execute(insert(q).values(
                id=op.queue_id, vhost=op.vhost, name=op.name, durable=op.durable,
                exclusive=op.exclusive, auto_delete=op.auto_delete,
                arguments=cbor.encode(op.arguments),
            ))
        elif t is DeleteQueue:
            self._delete_queue(conn, op.queue_id)
        elif t is PutBinding or t is DeleteBinding:
            b = s.bindings
            digest = cbor.digest(op.arguments)
            conn.execute(delete(b).where(
                b.c.vhost == op.vhost, b.c.source == op.source,
                b.c.destination == op.destination, b.c.destination_kind == op.destination_kind,
                b.c.routing_key == op.routing_key, b.c.arguments_digest == digest,
            ))
            if t is PutBinding:
                conn.execute(insert(b).values(
                    vhost=op.vhost, source=op.source, destination=op.destination,
                    destination_kind=op.destination_kind, routing_key=op.routing_key,
                    arguments=cbor.encode(op.arguments), arguments_digest=digest,
                ))
        elif t is PutPolicy:
            self._replace(
                conn, s.policies, {"vhost": op.vhost, "name": op.name},
                {"pattern": op.pattern, "apply_to": op.apply_to, "priority": op.priority,
                 "definition": cbor.encode(op.definition)},
            )
        elif t is DeletePolicy:
            p = s.policies
            conn.execute(delete(p).where(p.c.vhost == op.vhost, p.c.name == op.name))
        elif t is PutUser:
            self._replace(
                conn, s.users, {"name": op.name},
                {"password_hash": op.password_hash, "tags": op.tags},
            )
        elif t is DeleteUser:
            conn.execute(delete(s.users).where(s.users.c.name == op.name))
            conn.execute(delete(s.permissions).where(s.permissions.c.user == op.name))
        elif t is PutPermission:
            self._replace(
                conn, s.permissions, {"user": op.user, "vhost": op.vhost},
                {"configure": op.configure, "write": op.write, "read": op.read},
            )
        elif t is DeletePermission:
            pm = s.permissions
            conn.execute(delete(pm).where(pm.c.user == op.user, pm.c.vhost == op.vhost))
        elif t is PutVhost:
            self._replace(conn, s.vhosts, {"name": op.name}, {"description": op.description})
        elif t is DeleteVhost:
            conn.execute(delete(s.vhosts).where(s.vhosts.c.name == op.name))
        elif t is PutMeta:
            self._replace(conn, s.meta, {"key": op.key}, {"value": op.value})
        elif t is _PruneRange:
            dl = s.delivery_log
            result = conn.execute(delete(dl).where(
                dl.c.id > op.lo, dl.c.id <= op.hi, dl.c.ts_us < op.older_than_us,
            ))
            op.deleted = result.rowcount
        else:
            raise TypeError(f"not a store op: {op!r}")

    @staticmethod
    def _delete_queue(conn: Connection, queue_id: int) -> None:
        q, b, e, m = s.queues, s.bindings, s.queue_entries, s.messages
        row = conn.execute(select(q.c.vhost, q.c.name).where(q.c.id == queue_id)).first()
        if row is not None:
            conn.execute(delete(b).where(
                b.c.vhost == row.vhost, b.c.destination == row.name,
                b.c.destination_kind == "queue",
            ))
        # Messages of this queue that no other queue holds go with it.
        e2 = e.alias("other")
        conn.execute(delete(m).where(
            m.c.id.in_(select(e.c.message_id).where(e.c.queue_id == queue_id)),
            ~exists().where(e2.c.message_id == m.c.id, e2.c.queue_id != queue_id),
        ))
        conn.execute(delete(e).where(e.c.queue_id == queue_id))
        conn.execute(delete(q).where(q.c.id == queue_id))

    # --- pruning ------------------------------------------------------------------

    def prune_delivery_log(self, max_id: int, older_than_us: int, batch_size: int = 5000) -> int:
        """Delete log rows with ``id <= max_id`` and ``ts_us < older_than_us``.

        Works in id ranges of at most ``batch_size`` rows, each deleted by the
        writer inside an ordinary group, so publishing never waits behind one
        long delete. Blocks the calling thread (not the writer's) until done.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("prune_delivery_log would deadlock on the writer thread")
        dl = s.delivery_log
        ids = (
            select(dl.c.id)
            .where(dl.c.id > bindparam("lo"), dl.c.id <= max_id, dl.c.ts_us < older_than_us)
            .order_by(dl.c.id)
            .limit(batch_size)
            .subquery()
        )
        find_hi = select(func.max(ids.c.id))
        total, lo = 0, 0
        while True:
            with self.engine.connect() as conn:
                hi = conn.execute(find_hi, {"lo": lo}).scalar()
            if hi is None:
                return total
            op = _PruneRange(lo, int(hi), older_than_us)
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

    # --- reading ------------------------------------------------------------------

    def load(self, body_window: int = 1000) -> Recovered:
        """Clean up orphans and read everything durable back (call before ``start``)."""
        with self.engine.begin() as conn:
            recovery.clean_up(conn)
            return recovery.load(conn, body_window)

    def fetch_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        """Bodies of these messages (missing ids are absent); safe from any thread."""
        m = s.messages
        stmt = select(m.c.id, m.c.body).where(m.c.id.in_(bindparam("ids", expanding=True)))
        ids = list(message_ids)
        found: dict[int, bytes] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), _IN_CHUNK):
                for mid, body in conn.execute(stmt, {"ids": ids[i : i + _IN_CHUNK]}):
                    found[mid] = body
        return found

    def read_delivery_log(
        self,
        message_id: str | None = None,
        after_id: int = 0,
        limit: int = 1000,
        *,
        message_key: int | None = None,
        queue: str | None = None,
    ) -> list[dict[str, Any]]:
        """Log rows with ``id > after_id`` in id order, optionally for one message/queue."""
        dl = s.delivery_log
        stmt = select(dl).where(dl.c.id > after_id)
        if message_id is not None:
            stmt = stmt.where(dl.c.message_id == message_id)
        if message_key is not None:
            stmt = stmt.where(dl.c.message_key == message_key)
        if queue is not None:
            stmt = stmt.where(dl.c.queue == queue)
        stmt = stmt.order_by(dl.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(stmt)]

    def get_meta(self, key: str) -> str | None:
        """A value from the ``meta`` table (e.g. the audit watermark mirror)."""
        with self.engine.connect() as conn:
            return conn.execute(select(s.meta.c.value).where(s.meta.c.key == key)).scalar()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
