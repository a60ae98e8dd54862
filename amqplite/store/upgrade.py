"""In-place upgrades of older databases, run by ``Store.create`` in its transaction.

Version 2 kept one ``stream_entries`` row per stream entry; version 3 keeps
chunk rows (``stream_chunks``, see ``schema.py``). The move keeps every entry
at its offset, in its segment, with its time and message key; the properties
gain ``x-stream-offset`` as new appends store them.

Version 3 kept one ``delivery_log`` row per event; version 4 keeps batches
(``log_batches``, see ``logbatch.py``) and a view of that name. Every event
keeps its id, so the audit job's watermark still points where it did.

Version 4 keyed the MQTT tables (sessions, packet ids, wills) by client id
alone; version 5 by (vhost, client id), so two tenants' ``sensor-42`` are two
sessions. The rows move as they are (client ids were unique across vhosts
then); a packet id takes its session's vhost, and one without a session row
(nothing would read it) is dropped.

The ``retained`` table (retained publications, ``broker/retained.py``) needs
no step here and no version change: ``create_all`` adds it to an older
database at start, and nothing moves into it (an older version ignores it).
Nor does the ``parameters.defined_by`` column (:func:`parameters_defined_by`
adds it, NULL in the rows that were there; an older version ignores it), nor
``messages.persistent`` (:func:`messages_persistent`: the broker hands the store
each message's delivery mode, so recovery drops spilled transient messages without
parsing properties; the rows that were there get theirs parsed here, once).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    delete,
    insert,
    inspect,
    or_,
    select,
    update,
)

from amqplite.protocol import streamrecord
from amqplite.protocol.properties import delivery_mode_of, with_long_header
from amqplite.storeops import LOG_FIELDS, TRANSIENT_KEY, AppendStream

from . import schema as s
from .apply import CHUNK_COLS, stream_chunks
from .logbatch import BATCH_COLS, BATCH_EVENTS, MAX_LOG_ID_KEY, batch_rows

__all__ = ["delivery_log_to_batches", "messages_persistent", "mqtt_tables_by_vhost",
           "parameters_defined_by", "stream_entries_to_chunks"]

log = logging.getLogger(__name__)

#: rows read per step of the move (the whole move is still one transaction)
_PAGE = 5000

_legacy = MetaData()
#: the version-2 table, as it was (only the upgrade reads it)
legacy_stream_entries = Table(
    "stream_entries",
    _legacy,
    Column("queue_id", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("segment", Integer, nullable=False),
    Column("ts_us", BigInteger, nullable=False),
    Column("message_key", BigInteger, nullable=False),
    Column("exchange", String(255), nullable=False),
    Column("routing_key", String(255), nullable=False),
    Column("properties", LargeBinary, nullable=False),
    Column("body", LargeBinary, nullable=False),
    sqlite_with_rowid=False,
)


def stream_entries_to_chunks(conn: Connection) -> int:
    """Move a version-2 database's stream entries into chunk rows and drop the old
    table; the number of entries moved. Runs inside the caller's transaction."""
    if not inspect(conn).has_table("stream_entries"):
        return 0
    se = legacy_stream_entries
    ins = insert(s.stream_chunks)
    moved = 0
    max_key = 0
    last: tuple[int, int] | None = None
    while True:
        stmt = select(se).order_by(se.c.queue_id, se.c.offset).limit(_PAGE)
        if last is not None:
            stmt = stmt.where(or_(se.c.queue_id > last[0],
                                  and_(se.c.queue_id == last[0], se.c.offset > last[1])))
        rows = conn.execute(stmt).all()
        if not rows:
            break
        appends = []
        for r in rows:
            try:
                props = with_long_header(r.properties, streamrecord.OFFSET_HEADER, r.offset)
            except Exception:  # checked at publish; never let one entry stop the start
                log.warning("stream entry %s of queue %s: properties not decodable, moved "
                            "without the offset header", r.offset, r.queue_id)
                props = r.properties
            record = streamrecord.pack(r.ts_us, r.message_key,
                                       streamrecord.route(r.exchange, r.routing_key), props,
                                       r.body)
            appends.append(AppendStream(r.queue_id, r.offset, r.segment, r.ts_us, r.message_key,
                                        len(r.body) + len(r.properties), record))
            max_key = max(max_key, r.message_key)
        chunks: list[dict[str, Any]] = [dict(zip(CHUNK_COLS, row, strict=True))
                                        for row in stream_chunks(appends)]
        conn.execute(ins, chunks)
        moved += len(rows)
        last = (rows[-1].queue_id, rows[-1].offset)
    se.drop(conn)
    meta = s.meta
    current = conn.execute(select(meta.c.value).where(meta.c.key == "max_message_id")).scalar()
    if current is not None and int(current) < max_key:
        conn.execute(update(meta).where(meta.c.key == "max_message_id")
                     .values(value=str(max_key)))
    return moved


def delivery_log_to_batches(conn: Connection) -> int:
    """Move a version-3 database's ``delivery_log`` table into batch rows, drop it
    and remember its highest id ever (AUTOINCREMENT's, which pruning may have
    left above the rows); the number of events moved. In the caller's transaction."""
    if "delivery_log" not in inspect(conn).get_table_names():  # absent, or already the view
        return 0
    dl = Table("delivery_log", MetaData(), autoload_with=conn)
    # a version-3 table predates the newer columns (protocol): readers pad them with None
    cols = [dl.c.id, *(dl.c[name] for name in LOG_FIELDS if name in dl.c)]
    ins = insert(s.log_batches)
    moved, last, high = 0, 0, 0
    while True:
        rows = conn.execute(select(*cols).where(dl.c.id > last).order_by(dl.c.id)
                            .limit(_PAGE)).all()
        if not rows:
            break
        # a batch holds consecutive ids: split where pruning left a gap
        run: list[tuple[Any, ...]] = []
        batches = []
        for r in rows:
            if run and (r[0] != run[-1][0] + 1 or len(run) == BATCH_EVENTS):
                batches += batch_rows(run[0][0], [x[1:] for x in run])
                run = []
            run.append(tuple(r))
        batches += batch_rows(run[0][0], [x[1:] for x in run])
        conn.execute(ins, [dict(zip(BATCH_COLS, b, strict=True)) for b in batches])
        moved += len(rows)
        last = high = rows[-1][0]
    if conn.dialect.name == "sqlite" and conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").scalar():
        seq = conn.exec_driver_sql(
            "SELECT seq FROM sqlite_sequence WHERE name = 'delivery_log'").scalar()
        high = max(high, int(seq or 0))
    dl.drop(conn)
    if high:
        meta = s.meta
        conn.execute(delete(meta).where(meta.c.key == MAX_LOG_ID_KEY))
        conn.execute(insert(meta).values(key=MAX_LOG_ID_KEY, value=str(high)))
    log.info("moved %d delivery-log events into batches", moved)
    return moved


def mqtt_tables_by_vhost(conn: Connection) -> int:
    """Rebuild a version-4 database's MQTT tables keyed by (vhost, client id); the
    number of rows moved. In the caller's transaction; nothing to do when the
    tables already have the new shape (``create_all`` made them)."""
    names = inspect(conn).get_table_names()
    if "mqtt_packet_ids" not in names or "vhost" in {
            c["name"] for c in inspect(conn).get_columns("mqtt_packet_ids")}:
        return 0
    old = MetaData()
    tables = {t.name: Table(t.name, old, autoload_with=conn)
              for t in (s.mqtt_sessions, s.mqtt_packet_ids, s.mqtt_wills) if t.name in names}
    rows = {name: [dict(r._mapping) for r in conn.execute(select(t))]
            for name, t in tables.items()}
    for t in tables.values():
        t.drop(conn)
    for t in (s.mqtt_sessions, s.mqtt_packet_ids, s.mqtt_wills):
        t.create(conn)
    vhost_of = {r["client_id"]: r["vhost"] for r in rows.get("mqtt_sessions", [])}
    ids = [{**r, "vhost": vhost_of[r["client_id"]]} for r in rows.get("mqtt_packet_ids", [])
           if r["client_id"] in vhost_of]
    moved = 0
    for t, batch in ((s.mqtt_sessions, rows.get("mqtt_sessions", [])),
                     (s.mqtt_packet_ids, ids), (s.mqtt_wills, rows.get("mqtt_wills", []))):
        if batch:
            conn.execute(insert(t), batch)
            moved += len(batch)
    if moved:
        log.info("upgrade: %d MQTT session rows keyed by (vhost, client id)", moved)
    return moved


def parameters_defined_by(conn: Connection) -> bool:
    """Add ``parameters.defined_by`` (who defined a parameter: the user its links act
    as) to a database from before it; True when it was added. In the caller's
    transaction; the older rows keep NULL there."""
    if any(c["name"] == "defined_by" for c in inspect(conn).get_columns("parameters")):
        return False
    conn.exec_driver_sql("ALTER TABLE parameters ADD COLUMN defined_by VARCHAR(255)")
    return True


def messages_persistent(conn: Connection) -> bool:
    """Add ``messages.persistent`` to a database from before it; True when it was added.

    In the caller's transaction. Every stored message was persistent unless
    transient ones were spilled (``TRANSIENT_KEY``, which recovery then honours):
    only then are the older rows' properties read, once, to mark those.
    """
    if any(c["name"] == "persistent" for c in inspect(conn).get_columns("messages")):
        return False
    conn.exec_driver_sql("ALTER TABLE messages ADD COLUMN persistent BOOLEAN NOT NULL DEFAULT TRUE")
    meta, m = s.meta, s.messages
    if not conn.execute(select(meta.c.key).where(meta.c.key == TRANSIENT_KEY)).first():
        return True
    transient = [mid for mid, props in conn.execute(select(m.c.id, m.c.properties))
                 if delivery_mode_of(props) != 2]
    for i in range(0, len(transient), s.IN_CHUNK):
        conn.execute(update(m).where(m.c.id.in_(transient[i : i + s.IN_CHUNK]))
                     .values(persistent=False))
    if transient:
        log.info("upgrade: %d spilled transient messages marked", len(transient))
    return True

