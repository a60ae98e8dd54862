"""The delivery log's batches in the database: the queries, for the writer and tools.

Why apart from :mod:`.logbatch`: the broker process packs events into batches
(``LogBuffer``) and must not import SQLAlchemy for that (``store.api``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select

from amqplite.storeops import LOG_FIELDS

from . import schema as s
from .logbatch import BATCH_COLS, MAX_LOG_ID_KEY, batch_rows, decode_events, with_message_ids

__all__ = ["create_views", "insert_log_rows", "iter_log_rows", "max_log_id"]


def max_log_id(conn: Connection) -> int:
    """The highest log id ever assigned: the newest batch's, or the mark in ``meta``
    if pruning removed that batch."""
    newest = conn.execute(select(func.max(s.log_batches.c.last_id))).scalar() or 0
    mark = conn.execute(select(s.meta.c.value).where(s.meta.c.key == MAX_LOG_ID_KEY)).scalar()
    return max(int(newest), int(mark or 0))


def create_views(conn: Connection) -> None:
    """Create the ``delivery_log`` view if it is missing or older than this release's
    (SQLite, PostgreSQL): one that does not write out ``amq-KEY`` ids, or lacks a
    column (``protocol``), is replaced."""
    dialect = conn.dialect.name
    if dialect == "sqlite":
        old = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = 'delivery_log'"
        ).scalar()
        if old is not None and ("'amq-'" not in old or f" AS {LOG_FIELDS[-1]}" not in old):
            conn.exec_driver_sql("DROP VIEW delivery_log")
    if dialect in ("sqlite", "postgresql"):
        conn.exec_driver_sql(s.delivery_log_view_sql(dialect))


def insert_log_rows(conn: Connection, rows: Sequence[Sequence[Any] | dict[str, Any]],
                    first_id: int | None = None) -> int:
    """Append events (tuples in LOG_FIELDS order or dicts by column name) as batches,
    ids from ``first_id`` (default: after the highest so far); the last id used.
    For tools and tests that build a log; the broker's writer batches its own."""
    if not rows:
        return first_id - 1 if first_id is not None else max_log_id(conn)
    start = max_log_id(conn) + 1 if first_id is None else first_id
    tuples = [tuple(r.get(f) for f in LOG_FIELDS) if isinstance(r, dict) else tuple(r)
              for r in rows]
    conn.execute(insert(s.log_batches),
                 [dict(zip(BATCH_COLS, b, strict=True)) for b in batch_rows(start, tuples)])
    return start + len(tuples) - 1


def iter_log_rows(conn: Connection, after_id: int = 0, upto: int | None = None,
                  batches_per_read: int = 100) -> Iterator[tuple[Any, ...]]:
    """Events with ``after_id < id <= upto`` in id order, as ``(id, *LOG_FIELDS)`` tuples.

    Reads ``batches_per_read`` batches at a time (keyset on ``first_id``), so a
    long log is never in memory at once and a range reads only its batches.
    """
    b = s.log_batches
    last = after_id
    while True:
        stmt = (select(b.c.first_id, b.c.last_id, b.c.events).where(b.c.last_id > last)
                .order_by(b.c.first_id).limit(batches_per_read))
        if upto is not None:
            stmt = stmt.where(b.c.first_id <= upto)
        batches = conn.execute(stmt).all()
        for first, _last, text in batches:
            for i, event in enumerate(with_message_ids(decode_events(text))):
                eid = first + i
                if eid <= after_id:
                    continue
                if upto is not None and eid > upto:
                    return
                yield (eid, *event)
        if len(batches) < batches_per_read:
            return
        last = batches[-1][1]
