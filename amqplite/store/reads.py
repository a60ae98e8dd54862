"""Reads of the store outside the writer: paging bodies, the delivery log, meta.

Each read takes a pooled connection of its own, so it may run on any thread
while the writer commits; WAL mode keeps readers and the writer apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, select
from sqlalchemy.sql import ClauseElement

from amqplite.storeops import LOG_FIELDS

from . import schema as s
from .logsql import iter_log_rows

__all__ = ["LocalReads", "StoreReads"]

# positions in an ``(id, *LOG_FIELDS)`` row
_MID = 1 + LOG_FIELDS.index("message_id")
_MKEY = 1 + LOG_FIELDS.index("message_key")
_QUEUE = 1 + LOG_FIELDS.index("queue")


class _Query:
    """A Core SELECT compiled once for the engine's dialect, run on the raw DBAPI cursor.

    Why: the page-in reads bring back a thousand rows at a time, and SQLAlchemy's
    ``Row`` per fetched row cost more than the read itself (the writer spent a
    sixth of a backlog's drain in ``fetchone``); sqlite3 and psycopg both return
    plain tuples, whose values are already the Python types the callers expect.
    """

    __slots__ = ("defaults", "order", "sql")

    def __init__(self, stmt: ClauseElement, engine: Engine) -> None:
        compiled: Any = stmt.compile(dialect=engine.dialect)
        self.sql = str(compiled)
        #: the parameters' names in the driver's order (None: it takes a dict), and
        #: the values of those the statement fixes itself (SQLite's OFFSET 0)
        self.order: tuple[str, ...] | None = (
            tuple(compiled.positiontup) if compiled.positional else None)
        self.defaults: dict[str, Any] = dict(compiled.params)

    def all(self, conn: Connection, **params: Any) -> list[tuple[Any, ...]]:
        """Every row, as the driver's tuples."""
        values = {**self.defaults, **params}
        args: Any = values if self.order is None else [values[n] for n in self.order]
        cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cur.execute(self.sql, args)
            return cur.fetchall()  # type: ignore[return-value]
        finally:
            cur.close()


class StoreReads:
    """The read half of every store (:class:`~amqplite.store.base.StoreBase`; safe from any thread)."""

    engine: Engine
    _entries_query: _Query | None = None

    def fetch_bodies(self, message_ids: Sequence[int]) -> dict[int, bytes]:
        """Bodies of these messages (missing ids are absent); safe from any thread."""
        m = s.messages
        stmt = select(m.c.id, m.c.body).where(m.c.id.in_(bindparam("ids", expanding=True)))
        ids = list(message_ids)
        found: dict[int, bytes] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(ids), s.IN_CHUNK):
                for mid, body in conn.execute(stmt, {"ids": ids[i : i + s.IN_CHUNK]}):
                    found[mid] = body
        return found

    def fetch_entries(self, queue_id: int, lo: int, hi: int,
                      limit: int) -> list[tuple[Any, ...]]:
        """A queue's entries at positions ``lo..hi``, first ``limit`` in order, with their
        messages: (position, message id, delivery_count, redelivered, exchange,
        routing_key, properties, body, body_size) each. Spilled entries come back so."""
        query = self._entries_query
        if query is None:
            e, m = s.queue_entries, s.messages
            stmt = (
                select(e.c.position, e.c.message_id, e.c.delivery_count, e.c.redelivered,
                       m.c.exchange, m.c.routing_key, m.c.properties, m.c.body, m.c.body_size)
                .join_from(e, m, m.c.id == e.c.message_id)
                .where(e.c.queue_id == bindparam("q"), e.c.position >= bindparam("lo"),
                       e.c.position <= bindparam("hi"))
                .order_by(e.c.position)
                .limit(bindparam("n"))
            )
            query = self._entries_query = _Query(stmt, self.engine)
        with self.engine.connect() as conn:
            return query.all(conn, q=queue_id, lo=lo, hi=hi, n=limit)

    def fetch_stream(self, queue_id: int, lo: int, limit: int) -> list[tuple[int, int, bytes]]:
        """The chunks of a stream holding its first ``limit`` entries at offsets ``>= lo``,
        in order, as (first offset, count, data); the first may start below ``lo`` (the
        caller skips inside it: ``streamrecord.walk``). One range scan of an index from
        the chunk holding ``lo``, so a read costs its batch, not the log; a gap (a
        failed commit's offsets) is skipped as if absent."""
        sc = s.stream_chunks
        stmt = (
            select(sc.c.first_offset, sc.c.count, sc.c.data)
            .where(sc.c.queue_id == queue_id, sc.c.last_offset >= lo)
            .order_by(sc.c.last_offset)
            .limit(max(1, limit))
        )
        out: list[tuple[int, int, bytes]] = []
        n = 0
        with self.engine.connect() as conn:
            for first, count, data in conn.execute(stmt):
                out.append((first, count, data))
                n += first + count - max(first, lo)
                if n >= limit:
                    break
        return out

    def read_delivery_log(
        self,
        message_id: str | None = None,
        after_id: int = 0,
        limit: int = 1000,
        *,
        message_key: int | None = None,
        queue: str | None = None,
    ) -> list[dict[str, Any]]:
        """Log events with ``id > after_id`` in id order, optionally for one message/queue.

        Decoded here from the batches rather than filtered by SQL over the
        ``delivery_log`` view: JSON is parsed faster in Python than json_each
        extracts it, and the batch keyset skips everything up to ``after_id``.
        """
        names = ("id", *LOG_FIELDS)
        out: list[dict[str, Any]] = []
        if limit <= 0:
            return out
        with self.engine.connect() as conn:
            for row in iter_log_rows(conn, after_id):
                if ((message_id is not None and row[_MID] != message_id)
                        or (message_key is not None and row[_MKEY] != message_key)
                        or (queue is not None and row[_QUEUE] != queue)):
                    continue
                out.append(dict(zip(names, row, strict=True)))
                if len(out) >= limit:
                    break
        return out

    def get_meta(self, key: str) -> str | None:
        """A value from the ``meta`` table (e.g. the audit watermark mirror)."""
        with self.engine.connect() as conn:
            return conn.execute(select(s.meta.c.value).where(s.meta.c.key == key)).scalar()


class LocalReads(StoreReads):
    """The reads alone, on an engine of their own (a process store's, in the broker)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
