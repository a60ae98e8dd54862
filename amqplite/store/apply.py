"""Applying store ops to SQL: the writer's inside, one transaction at a time.

Why the hot path skips Core constructs at run time: per-op Python work is
the writer's whole cost per message, so it must be tiny. The five hot
statements are compiled once from Core constructs for the engine's dialect
and run as DBAPI executemany batches of plain tuples; metadata ops (rare) use
ordinary Core statements. No threads and no transactions here: the caller
(:class:`~amqplite.store.committer.Committer`) owns both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain as _chain
from operator import attrgetter, itemgetter
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Engine,
    LargeBinary,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.sql.expression import ClauseElement

from amqplite.protocol.streamrecord import BATCH, HEAD, pack_spliced
from amqplite.storeops import (
    LOG_FIELDS,
    AppendStream,
    AppendStreams,
    ClearRetained,
    CopyMessage,
    DeleteBinding,
    DeleteEntries,
    DeleteEntry,
    DeleteExchange,
    DeleteKafkaOffsets,
    DeleteMQTTPacketId,
    DeleteMQTTSession,
    DeleteMQTTWill,
    DeleteParameter,
    DeletePermission,
    DeletePolicy,
    DeleteQueue,
    DeleteRetained,
    DeleteStreamSegments,
    DeleteTopicPermission,
    DeleteUser,
    DeleteVHost,
    EncodedLog,
    LogEvent,
    PutBinding,
    PutEntry,
    PutExchange,
    PutKafkaOffset,
    PutMessage,
    PutMeta,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
    PutParameter,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutRetained,
    PutStreamSegment,
    PutTopicPermission,
    PutUser,
    PutVHost,
    UpdateEntry,
)

from . import cbor
from . import schema as s
from .api import PruneRange
from .logbatch import BATCH_COLS, MAX_LOG_ID_KEY, batch_rows, storable_value
from .logsql import max_log_id

__all__ = ["ROWS_PER_INSERT", "Applier", "PruneRange", "storable_logs", "stream_chunks", "upsert"]

# Rows per multi-row INSERT (x 12 columns stays far below bound-parameter limits).
ROWS_PER_INSERT = 32

#: A LogEvent as the row tuple the broker's fast path builds (LOG_FIELDS order).
_log_row = attrgetter(*LOG_FIELDS)
#: Where message_key sits in such a row (it raises the message id high-water mark).
_MESSAGE_KEY_INDEX = LOG_FIELDS.index("message_key")


#: a stored Kafka batch's route length in its record head, as bytes
_BATCH_MARK = BATCH.to_bytes(2, "big")
#: stream_chunks columns, in the order chunk rows are built
CHUNK_COLS = ("queue_id", "first_offset", "last_offset", "segment", "first_ts_us",
              "last_ts_us", "count", "size", "data")



def record_bytes(op: AppendStream) -> bytes:
    """The stored record of an append, joined from its pieces if it came in pieces."""
    return entry_record(op.offset, op.ts_us, op.message_key, op.record)


def entry_record(offset: int, ts_us: int, message_key: int,
                 record: bytes | tuple[bytes, bytes, bytes, bytes]) -> bytes:
    """``record_bytes`` from an entry's fields."""
    if type(record) is tuple:
        route, before, after, body = record
        return pack_spliced(ts_us, message_key, route, before, offset, after, body)
    return record  # type: ignore[return-value]


def _entries(appends: Iterable[AppendStream | AppendStreams],
             ) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """(queue_id, AppendStream's fields after queue_id) of every append, in order."""
    for op in appends:
        if type(op) is AppendStreams:
            qid = op.queue_id
            for e in op.entries:
                yield qid, e
        else:
            yield op.queue_id, op[1:]


def stream_chunks(appends: Iterable[AppendStream | AppendStreams], max_bytes: int = s.CHUNK_BYTES,
                  max_entries: int = s.CHUNK_ENTRIES) -> list[tuple[Any, ...]]:
    """Chunk rows (CHUNK_COLS order) of appends in commit order: consecutive offsets
    of one stream in one segment share a chunk, up to ``max_bytes`` of records or
    ``max_entries`` offsets; appends of other streams in between do not break it. A
    stored Kafka batch (``streamrecord.BATCH``) is one record spanning its records'
    offsets.

    One row of ~1 MiB instead of a thousand narrow ones is most of what makes an
    append cheap for the writer, and a read is then a few blobs, not 1000 rows.
    """
    rows: list[tuple[Any, ...]] = []
    # queue_id -> [first, last, segment, first_ts, last_ts, records, bytes, size, offsets]
    open_: dict[int, list[Any]] = {}
    for qid, (offset, segment, ts_us, key, size, rec) in _entries(appends):
        if type(rec) is tuple:  # pieces from the broker (see AppendStream)
            rec = entry_record(offset, ts_us, key, rec)
            span = 1
        elif rec[16:18] == _BATCH_MARK:  # the head's route length (streamrecord.HEAD)
            span = _span(rec)
        else:
            span = 1
        c = open_.get(qid)
        if c is not None and (offset != c[1] + 1 or segment != c[2]
                              or c[6] + len(rec) > max_bytes or c[8] >= max_entries):
            rows.append(_chunk_row(qid, c))
            c = None
        if c is None:
            open_[qid] = [offset, offset + span - 1, segment, ts_us, ts_us, [rec], len(rec),
                          size, span]
            continue
        c[1] = offset + span - 1
        c[4] = ts_us
        c[5].append(rec)
        c[6] += len(rec)
        c[7] += size
        c[8] += span
    rows.extend(_chunk_row(qid, c) for qid, c in open_.items())
    return rows


def _span(record: bytes) -> int:
    return int(HEAD.unpack_from(record, 0)[3])


def _chunk_row(queue_id: int, c: list[Any]) -> tuple[Any, ...]:
    first, last, segment, first_ts, last_ts, records, _n, size, count = c
    return (queue_id, first, last, segment, first_ts, last_ts, count, size,
            b"".join(records))


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


def storable_logs(ops: Sequence[Any]) -> list[Any] | None:
    """``ops`` with every delivery-log row made bindable, or None if no row changed."""
    out: list[Any] = []
    changed = False
    for op in ops:
        t = type(op)
        if t is LogEvent:
            op = _log_row(op)
            t = tuple
            changed = True
        if t is tuple:
            fixed = tuple(storable_value(v) for v in op)
            changed = changed or fixed != op
            op = fixed
        out.append(op)
    return out if changed else None


#: an AppendStreams entry's message key
_entry_key = itemgetter(3)
#: message keys at or above this are not storable (SQLite integers are 64-bit)
_KEY_LIMIT = 1 << 63


class _Segment:
    """Hot ops of one group gathered per table, between two metadata ops."""

    __slots__ = ("cancelled", "dels", "encoded", "entries", "logs", "msgs", "streams", "upds")

    def __init__(self) -> None:
        self.msgs: dict[int, tuple[Any, ...]] = {}
        self.entries: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.upds: dict[tuple[int, int], tuple[Any, ...]] = {}
        self.dels: dict[tuple[int, int], int] = {}  # key -> message_id
        self.cancelled: list[int] = []  # message ids of cancelled PutEntry
        self.logs: list[tuple[Any, ...]] = []
        self.encoded: list[EncodedLog] = []  # batches encoded by the process store
        self.streams: list[AppendStream | AppendStreams] = []  # stream appends, in order

    def __bool__(self) -> bool:
        return bool(self.msgs or self.entries or self.upds or self.dels or self.logs
                    or self.encoded or self.streams)


def upsert(conn: Connection, table: Any, key: dict[str, Any], values: dict[str, Any]) -> None:
    """Portable upsert: delete by key, insert (metadata ops are rare)."""
    conn.execute(delete(table).where(*(table.c[k] == v for k, v in key.items())))
    conn.execute(insert(table).values(**key, **values))


class Applier:
    """Applies groups of ops on the writer's connection, hot ops batched per table.

    Keeps the high-water marks of message and queue ids, so ``meta`` remembers
    ids that were used even after their rows are gone.
    """

    def __init__(self, engine: Engine) -> None:
        self.hw_message = 0
        self.hw_queue = 0
        #: entries inserted and deleted (acks, drops) so far, those cancelled in
        #: their own group too, and stream append ops: the writer paces commits by them
        self.inserted = 0
        self.deleted = 0
        self.appended = 0
        #: the last ``apply`` wrote something that must survive a power loss before
        #: anyone hears of it: a message, entry, ack or metadata row; not log rows,
        #: stream appends or their segment rows (see ``committer.needs_fsync``), nor
        #: inserts that the group's own acks cancelled
        self.durable = False
        m, e = s.messages, s.queue_entries
        eng = engine  # statements are compiled for this engine's dialect
        msg_cols = ("id", "exchange", "routing_key", "properties", "body", "body_size",
                    "persistent")
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
        self._ins_batch = _Stmt(insert(s.log_batches).values(_bound(BATCH_COLS)), eng, BATCH_COLS)
        #: the highest delivery-log id assigned (ids are the writer's, see logbatch.py)
        self.hw_log = 0
        self._ins_chunk = _Stmt(insert(s.stream_chunks).values(_bound(CHUNK_COLS)), eng,
                                CHUNK_COLS)
        # Orphan removal: each of these messages goes if no entry references it. One
        # prepared statement run per id (executemany): an IN list was compiled anew
        # for every chunk, and that Python cost was a sixth of a backlog's drain.
        self._del_orphan = _Stmt(
            delete(m).where(m.c.id == bindparam("mid"),
                            ~exists().where(e.c.message_id == bindparam("ref"))),
            eng,
            ("mid", "ref"),
        )
        self._set_meta = update(s.meta).where(s.meta.c.key == bindparam("k")).values(
            value=bindparam("v")
        )

    def read_marks(self, conn: Connection) -> None:
        """Seed the high-water marks from the database (before the first group)."""
        meta = dict(conn.execute(select(s.meta.c.key, s.meta.c.value)).all())
        self.hw_message = max(
            int(meta.get("max_message_id", 0)),
            int(conn.execute(select(func.max(s.messages.c.id))).scalar() or 0),
        )
        self.hw_queue = max(
            int(meta.get("max_queue_id", 0)),
            int(conn.execute(select(func.max(s.queues.c.id))).scalar() or 0),
        )
        self.hw_log = max_log_id(conn)

    def apply(self, conn: Connection, group: Iterable[Sequence[Any]]) -> None:
        """Apply one group's op lists in order: hot ops batched per table, metadata
        ops in between. The caller commits (or rolls back) the transaction."""
        self.durable = False
        seg = _Segment()
        msgs, entries, upds, dels, cancelled, logs = (
            seg.msgs, seg.entries, seg.upds, seg.dels, seg.cancelled, seg.logs,
        )
        hw_message = hw_start = self.hw_message
        hw_queue = self.hw_queue
        log_row, mk_index = _log_row, _MESSAGE_KEY_INDEX
        for ops in group:
            for op in ops:
                t = type(op)
                if t is tuple:  # a delivery_log row in column order (the broker's fast path)
                    logs.append(op)
                    mk = op[mk_index]
                    # a key that is not storable (not a 64-bit int) must not raise the mark
                    if type(mk) is int and hw_message < mk < _KEY_LIMIT:
                        hw_message = mk
                elif t is EncodedLog:
                    seg.encoded.append(op)
                    if op.max_message_key > hw_message:
                        hw_message = op.max_message_key
                elif t is LogEvent:
                    mk = op.message_key
                    logs.append(log_row(op))
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
                    msgs[mid] = (mid, op.exchange, op.routing_key, op.properties, body, len(body),
                                 op.persistent)
                    if mid > hw_message:
                        hw_message = mid
                elif t is AppendStreams:
                    seg.streams.append(op)
                    mk = max(map(_entry_key, op.entries))
                    if mk > hw_message:
                        hw_message = mk
                elif t is AppendStream:
                    seg.streams.append(op)
                    if op.message_key > hw_message:
                        hw_message = op.message_key
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
                    elif (t is CopyMessage or t is PutRetained) and op.message_id > hw_message:
                        hw_message = op.message_id
                    if t is not PutStreamSegment and t is not DeleteStreamSegments:
                        self.durable = True
                    self._apply_meta(conn, op)
        if seg:
            self._flush_segment(conn, seg)
        if hw_message > hw_start:
            conn.execute(self._set_meta, {"k": "max_message_id", "v": str(hw_message)})
        if hw_queue > self.hw_queue:
            conn.execute(self._set_meta, {"k": "max_queue_id", "v": str(hw_queue)})
        # If the commit fails after this, the marks are merely higher than needed.
        self.hw_message, self.hw_queue = hw_message, hw_queue

    def _flush_segment(self, conn: Connection, seg: _Segment) -> None:
        self.inserted += len(seg.entries) + len(seg.cancelled)
        self.deleted += len(seg.dels) + len(seg.cancelled)
        msgs = seg.msgs
        if seg.cancelled and msgs:
            # A message none of whose entries survived this segment is never written.
            live = {row[2] for row in seg.entries.values()}
            for mid in seg.cancelled:
                if mid not in live:
                    msgs.pop(mid, None)
        if msgs or seg.entries or seg.upds or seg.dels:
            self.durable = True
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
        if seg.logs or seg.encoded:
            # one batch row per (at most BATCH_EVENTS) events; ids continue the
            # last batch's. A group that fails leaves a gap, never a reuse.
            batches = []
            if seg.logs:
                batches = batch_rows(self.hw_log + 1, seg.logs)
                self.hw_log += len(seg.logs)
            for enc in seg.encoded:
                first = self.hw_log + 1
                self.hw_log += enc.n_events
                batches.append((first, self.hw_log, enc.first_ts_us, enc.last_ts_us, enc.n_events,
                                enc.events))
            self._ins_batch.run(conn, batches)
        if seg.streams:
            self.appended += len(seg.streams)
            self._ins_chunk.run(conn, stream_chunks(seg.streams))

    def _delete_orphans(self, conn: Connection, message_ids: list[int]) -> None:
        self._del_orphan.run(conn, [(mid, mid) for mid in message_ids])

    # --- metadata ops (rare; plain Core) ----------------------------------------

    def _apply_meta(self, conn: Connection, op: Any) -> None:
        t = type(op)
        if t is CopyMessage:
            m = s.messages
            conn.execute(insert(m).from_select(
                [m.c.id, m.c.exchange, m.c.routing_key, m.c.properties, m.c.body, m.c.body_size,
                 m.c.persistent],
                select(
                    literal(op.message_id, BigInteger), literal(op.exchange),
                    literal(op.routing_key), literal(op.properties, LargeBinary),
                    m.c.body, m.c.body_size, literal(op.persistent, Boolean),
                ).where(m.c.id == op.source_id),
            ))
        elif t is PutExchange:
            upsert(
                conn, s.exchanges, {"vhost": op.vhost, "name": op.name},
                {"type": op.type, "durable": op.durable, "auto_delete": op.auto_delete,
                 "internal": op.internal, "arguments": cbor.encode(op.arguments)},
            )
        elif t is DeleteExchange:
            x, b = s.exchanges, s.bindings
            conn.execute(delete(x).where(x.c.vhost == op.vhost, x.c.name == op.name))
            self._clear_retained(conn, op.vhost, "exchange", op.name)
            conn.execute(delete(b).where(
                b.c.vhost == op.vhost,
                or_(b.c.source == op.name,
                    and_(b.c.destination == op.name, b.c.destination_kind == "exchange")),
            ))
        elif t is PutRetained:
            upsert(conn, s.retained, {"vhost": op.vhost, "kind": op.kind, "owner": op.owner,
                                      "id": op.message_id},
                   {"key": op.key, "exchange": op.exchange, "routing_key": op.routing_key,
                    "properties": op.properties, "body": op.body})
        elif t is DeleteRetained:
            r = s.retained
            conn.execute(delete(r).where(r.c.vhost == op.vhost, r.c.kind == op.kind,
                                         r.c.owner == op.owner, r.c.id == op.message_id))
        elif t is ClearRetained:
            self._clear_retained(conn, op.vhost, op.kind, op.owner)
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
        elif t is DeleteEntries:
            e, m = s.queue_entries, s.messages
            in_range = and_(e.c.queue_id == op.queue_id, e.c.position.between(op.lo, op.hi))
            e2 = e.alias("other")
            conn.execute(delete(m).where(
                m.c.id.in_(select(e.c.message_id).where(in_range)),
                ~exists().where(e2.c.message_id == m.c.id,
                                or_(e2.c.queue_id != op.queue_id,
                                    ~e2.c.position.between(op.lo, op.hi))),
            ))
            conn.execute(delete(e).where(in_range))
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
            upsert(
                conn, s.policies, {"vhost": op.vhost, "name": op.name},
                {"pattern": op.pattern, "apply_to": op.apply_to, "priority": op.priority,
                 "definition": cbor.encode(op.definition)},
            )
        elif t is DeletePolicy:
            p = s.policies
            conn.execute(delete(p).where(p.c.vhost == op.vhost, p.c.name == op.name))
        elif t is PutParameter:
            upsert(conn, s.parameters,
                   {"component": op.component, "vhost": op.vhost, "name": op.name},
                   {"value": cbor.encode(op.value), "defined_by": op.defined_by})
        elif t is DeleteParameter:
            p = s.parameters
            conn.execute(delete(p).where(p.c.component == op.component,
                                         p.c.vhost == op.vhost, p.c.name == op.name))
        elif t is PutMQTTSession:
            upsert(conn, s.mqtt_sessions, {"vhost": op.vhost, "client_id": op.client_id},
                   {"expiry": op.expiry,
                    "disconnected_at": op.disconnected_at,
                    "awaiting_pubrel": ",".join(map(str, op.awaiting_pubrel)),
                    "user": op.user})
        elif t is DeleteMQTTSession:
            ms, mp = s.mqtt_sessions, s.mqtt_packet_ids
            conn.execute(delete(ms).where(ms.c.vhost == op.vhost,
                                          ms.c.client_id == op.client_id))
            conn.execute(delete(mp).where(mp.c.vhost == op.vhost,
                                          mp.c.client_id == op.client_id))
        elif t is PutMQTTPacketId:
            upsert(conn, s.mqtt_packet_ids, {"vhost": op.vhost, "client_id": op.client_id,
                                             "outbound": op.outbound,
                                             "packet_id": op.packet_id},
                   {"message_key": op.message_key, "released": op.released})
        elif t is DeleteMQTTPacketId:
            mp = s.mqtt_packet_ids
            conn.execute(delete(mp).where(mp.c.vhost == op.vhost,
                                          mp.c.client_id == op.client_id,
                                          mp.c.outbound == op.outbound,
                                          mp.c.packet_id == op.packet_id))
        elif t is PutMQTTWill:
            upsert(conn, s.mqtt_wills, {"vhost": op.vhost, "client_id": op.client_id},
                   {"user": op.user, "topic": op.topic,
                    "payload": op.payload, "qos": op.qos, "retain": op.retain,
                    "properties": op.properties, "delay": op.delay, "due_at": op.due_at})
        elif t is DeleteMQTTWill:
            mw = s.mqtt_wills
            conn.execute(delete(mw).where(mw.c.vhost == op.vhost,
                                          mw.c.client_id == op.client_id))
        elif t is PutKafkaOffset:
            upsert(conn, s.kafka_offsets, {"vhost": op.vhost, "group_id": op.group_id,
                                           "topic": op.topic, "partition": op.partition},
                   {"offset": op.offset, "metadata": op.metadata,
                    "committed_at": op.committed_at})
        elif t is DeleteKafkaOffsets:
            ko = s.kafka_offsets
            of = [ko.c.vhost == op.vhost]
            if op.group_id is not None:
                of.append(ko.c.group_id == op.group_id)
            if op.topic is not None:
                of.append(ko.c.topic == op.topic)
            conn.execute(delete(ko).where(and_(*of)))
        elif t is PutMeta:
            upsert(conn, s.meta, {"key": op.key}, {"value": op.value})
        elif t is PutVHost:
            upsert(conn, s.vhosts, {"name": op.name}, {"description": op.description})
        elif t is DeleteVHost:
            self._delete_vhost(conn, op.name, op.keep_queues)
        elif t is PutUser:
            upsert(conn, s.users, {"name": op.name},
                   {"password_hash": op.password_hash, "tags": op.tags})
        elif t is DeleteUser:
            conn.execute(delete(s.permissions).where(s.permissions.c.user == op.name))
            tpm = s.topic_permissions
            conn.execute(delete(tpm).where(tpm.c.user == op.name))
            conn.execute(delete(s.users).where(s.users.c.name == op.name))
        elif t is PutPermission:
            upsert(conn, s.permissions, {"user": op.user, "vhost": op.vhost},
                   {"configure": op.configure, "write": op.write, "read": op.read})
        elif t is DeletePermission:
            p = s.permissions
            conn.execute(delete(p).where(p.c.user == op.user, p.c.vhost == op.vhost))
        elif t is PutTopicPermission:
            upsert(conn, s.topic_permissions,
                   {"user": op.user, "vhost": op.vhost, "exchange": op.exchange},
                   {"write": op.write, "read": op.read})
        elif t is DeleteTopicPermission:
            tpm = s.topic_permissions
            of_user = and_(tpm.c.user == op.user, tpm.c.vhost == op.vhost)
            conn.execute(delete(tpm).where(of_user if op.exchange is None else
                                           and_(of_user, tpm.c.exchange == op.exchange)))
        elif t is PutStreamSegment:
            upsert(conn, s.stream_segments, {"queue_id": op.queue_id, "segment": op.segment},
                   {"first_offset": op.first_offset, "last_offset": op.last_offset,
                    "first_ts_us": op.first_ts_us, "last_ts_us": op.last_ts_us,
                    "size": op.size})
        elif t is DeleteStreamSegments:
            sc, sg = s.stream_chunks, s.stream_segments
            conn.execute(delete(sc).where(sc.c.queue_id == op.queue_id,
                                          sc.c.last_offset < op.first_offset))
            conn.execute(delete(sg).where(sg.c.queue_id == op.queue_id,
                                          sg.c.segment < op.segment))
        elif t is PruneRange:
            b = s.log_batches
            which = and_(b.c.first_id > op.lo, b.c.last_id <= op.hi,
                         b.c.last_ts_us < op.older_than_us)
            op.deleted = int(conn.execute(select(func.sum(b.c.count)).where(which)).scalar() or 0)
            conn.execute(delete(b).where(which))
            # the newest batch may go: remember its ids so they are never reused
            upsert(conn, s.meta, {"key": MAX_LOG_ID_KEY}, {"value": str(self.hw_log)})
        else:
            raise TypeError(f"not a store op: {op!r}")

    @staticmethod
    def _clear_retained(conn: Connection, vhost: str, kind: str, owner: str) -> None:
        r = s.retained
        conn.execute(delete(r).where(r.c.vhost == vhost, r.c.kind == kind, r.c.owner == owner))

    @classmethod
    def _delete_vhost(cls, conn: Connection, name: str, keep: Sequence[int] = ()) -> None:
        """Everything in the vhost goes (but the queues in ``keep``): its queues with
        their entries first."""
        q = s.queues
        for (qid,) in conn.execute(select(q.c.id).where(q.c.vhost == name)).all():
            if qid not in keep:
                cls._delete_queue(conn, qid)
        for table in (s.bindings, s.exchanges, s.policies, s.parameters, s.permissions,
                      s.retained, s.mqtt_wills, s.mqtt_sessions, s.mqtt_packet_ids,
                      s.topic_permissions, s.kafka_offsets):
            conn.execute(delete(table).where(table.c.vhost == name))
        conn.execute(delete(s.vhosts).where(s.vhosts.c.name == name))

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
        for t in (s.stream_chunks, s.stream_segments):
            conn.execute(delete(t).where(t.c.queue_id == queue_id))
        conn.execute(delete(q).where(q.c.id == queue_id))

