"""What the store hands back at start-up, and the queries that build it.

Metadata comes back as the same op records the broker writes (``PutExchange``,
``PutQueue``, ...), so a record read at start-up can be written back unchanged.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, exists, false, func, select, update

from amqplite.storeops import (
    TRANSIENT_KEY,
    PutBinding,
    PutExchange,
    PutKafkaOffset,
    PutMQTTPacketId,
    PutMQTTSession,
    PutMQTTWill,
    PutParameter,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutRetained,
    PutTopicPermission,
    PutUser,
    PutVHost,
)

from . import cbor
from . import schema as s
from .api import Recovered, RecoveredEntry
from .logsql import max_log_id


def clean_up(conn: Connection) -> None:
    """Drop entries of vanished queues and messages no entry references.

    Orphans appear when a crash lands between groups that the broker thought
    of as one step (e.g. a message whose entries were written in a later group
    that never committed).
    """
    e, m, q, b = s.queue_entries, s.messages, s.queues, s.bindings
    conn.execute(delete(e).where(~exists().where(q.c.id == e.c.queue_id)))
    for t in (s.stream_chunks, s.stream_segments):
        conn.execute(delete(t).where(~exists().where(q.c.id == t.c.queue_id)))
    meta = s.meta
    if conn.execute(select(meta.c.value).where(meta.c.key == TRANSIENT_KEY)).first():
        _drop_transient(conn)
        conn.execute(delete(meta).where(meta.c.key == TRANSIENT_KEY))
    # bindings to a queue that is not stored (older versions wrote those of
    # exclusive queues): restored, they would route into a later namesake
    conn.execute(delete(b).where(
        b.c.destination_kind == "queue",
        ~exists().where(q.c.vhost == b.c.vhost, q.c.name == b.c.destination),
    ))
    conn.execute(delete(m).where(~exists().where(e.c.message_id == m.c.id)))
    # retained messages of exchanges that are gone (deleted by an older version)
    r, x = s.retained, s.exchanges
    conn.execute(delete(r).where(
        r.c.kind == "exchange",
        ~exists().where(x.c.vhost == r.c.vhost, x.c.name == r.c.owner),
    ))


def _drop_transient(conn: Connection) -> None:
    """Entries of messages that are not persistent were written only to spill them
    out of RAM: like every transient message they do not outlive the broker. The
    broker said which are transient (``PutMessage.persistent``); nothing here parses
    their properties."""
    e, m = s.queue_entries, s.messages
    conn.execute(delete(e).where(e.c.message_id.in_(
        select(m.c.id).where(m.c.persistent == false()).scalar_subquery())))


def mark_redelivered(conn: Connection, queue_ids: list[int]) -> None:
    """After an unclean stop every entry may have reached a consumer: spilled ones too."""
    e = s.queue_entries
    for i in range(0, len(queue_ids), s.IN_CHUNK):
        conn.execute(update(e).where(e.c.queue_id.in_(queue_ids[i : i + s.IN_CHUNK]))
                     .values(redelivered=True))


def _int(conn: Connection, stmt: object) -> int:
    value = conn.execute(stmt).scalar()  # type: ignore[call-overload]
    return int(value or 0)


def load(conn: Connection, body_window: int = 1000) -> Recovered:
    """Read everything back: the first ``body_window`` entries per queue with their
    bodies; the rest only counted (``spilled``), read later with ``fetch_entries``."""
    rec = Recovered()
    rec.meta = {k: v for k, v in conn.execute(select(s.meta.c.key, s.meta.c.value))}
    rec.vhosts = [PutVHost(r.name, r.description)
                  for r in conn.execute(select(s.vhosts).order_by(s.vhosts.c.name))]
    rec.users = [PutUser(r.name, r.password_hash, r.tags)
                 for r in conn.execute(select(s.users).order_by(s.users.c.name))]
    p = s.permissions
    rec.permissions = [PutPermission(r.user, r.vhost, r.configure, r.write, r.read)
                       for r in conn.execute(select(p).order_by(p.c.user, p.c.vhost))]
    tpm = s.topic_permissions
    rec.topic_permissions = [
        PutTopicPermission(r.user, r.vhost, r.exchange, r.write, r.read)
        for r in conn.execute(select(tpm).order_by(tpm.c.user, tpm.c.vhost, tpm.c.exchange))]
    rec.policies = [
        PutPolicy(r.vhost, r.name, r.pattern, r.apply_to, r.priority, cbor.decode(r.definition))
        for r in conn.execute(select(s.policies))
    ]
    pm = s.parameters
    rec.parameters = [
        PutParameter(r.component, r.vhost, r.name, cbor.decode(r.value), r.defined_by)
        for r in conn.execute(select(pm).order_by(pm.c.component, pm.c.vhost, pm.c.name))
    ]
    rec.mqtt_sessions = [
        PutMQTTSession(r.vhost, r.client_id, r.expiry, r.disconnected_at,
                       tuple(int(i) for i in r.awaiting_pubrel.split(",") if i), r.user)
        for r in conn.execute(select(s.mqtt_sessions).order_by(s.mqtt_sessions.c.vhost,
                                                               s.mqtt_sessions.c.client_id))
    ]
    mp = s.mqtt_packet_ids
    rec.mqtt_sessions += [
        PutMQTTPacketId(r.vhost, r.client_id, r.packet_id, r.outbound, r.message_key,
                        r.released)
        for r in conn.execute(select(mp).order_by(mp.c.vhost, mp.c.client_id, mp.c.packet_id))
    ]
    rec.mqtt_sessions += [
        PutMQTTWill(r.client_id, r.vhost, r.user, r.topic, r.payload, r.qos, r.retain,
                    r.properties, r.delay, r.due_at)
        for r in conn.execute(select(s.mqtt_wills).order_by(s.mqtt_wills.c.vhost,
                                                            s.mqtt_wills.c.client_id))
    ]
    ko = s.kafka_offsets
    rec.kafka_offsets = [
        PutKafkaOffset(r.vhost, r.group_id, r.topic, r.partition, r.offset, r.metadata,
                       r.committed_at)
        for r in conn.execute(select(ko).order_by(ko.c.vhost, ko.c.group_id, ko.c.topic,
                                                  ko.c.partition))]
    rec.exchanges = [
        PutExchange(
            r.vhost, r.name, r.type, r.durable, r.auto_delete, r.internal,
            cbor.decode(r.arguments),
        )
        for r in conn.execute(select(s.exchanges))
    ]
    rec.queues = [
        PutQueue(
            r.id, r.vhost, r.name, r.durable, r.exclusive, r.auto_delete,
            cbor.decode(r.arguments),
        )
        for r in conn.execute(select(s.queues).order_by(s.queues.c.id))
    ]
    b = s.bindings
    rec.bindings = [
        PutBinding(
            r.vhost, r.source, r.destination, r.destination_kind, r.routing_key,
            cbor.decode(r.arguments),
        )
        for r in conn.execute(select(b).order_by(b.c.id))
    ]

    e, m = s.queue_entries, s.messages
    entry_cols = (
        e.c.position, e.c.message_id, e.c.delivery_count, e.c.redelivered,
        m.c.exchange, m.c.routing_key, m.c.properties,
    )
    for queue in rec.queues:
        qid = queue.queue_id
        base = select(*entry_cols).join_from(e, m, m.c.id == e.c.message_id)
        base = base.where(e.c.queue_id == qid).order_by(e.c.position)
        head = conn.execute(base.add_columns(m.c.body, m.c.body_size).limit(body_window))
        entries = [RecoveredEntry(*row) for row in head]  # type: ignore[call-arg]
        if len(entries) == body_window:
            after = entries[-1].position if entries else -1
            rest = conn.execute(
                select(func.count(), func.sum(m.c.body_size), func.min(e.c.position),
                       func.max(e.c.position))
                .join_from(e, m, m.c.id == e.c.message_id)
                .where(e.c.queue_id == qid, e.c.position > after)
            ).one()
            if rest[0]:
                rec.spilled[qid] = (int(rest[0]), int(rest[1] or 0), int(rest[2]), int(rest[3]))
        if entries:
            rec.entries[qid] = entries

    rt = s.retained
    rec.retained = [PutRetained(r.id, r.vhost, r.kind, r.owner, r.key, r.exchange,
                                r.routing_key, r.properties, r.body)
                    for r in conn.execute(select(rt).order_by(rt.c.id))]
    _load_streams(conn, rec)
    hw = rec.meta
    rec.max_queue_id = max(_int(conn, select(func.max(s.queues.c.id))),
                           int(hw.get("max_queue_id", 0)))
    # stream appends raise meta.max_message_id in their own transaction (their keys
    # live inside chunk blobs)
    rec.max_message_id = max(_int(conn, select(func.max(m.c.id))),
                             _int(conn, select(func.max(rt.c.id))),
                             int(hw.get("max_message_id", 0)))
    rec.max_log_id = max_log_id(conn)
    return rec


def _load_streams(conn: Connection, rec: Recovered) -> None:
    """Each stream's segment rows; only the open segment's chunk rows are read (not
    their data): its row is written only when it opens and when it is sealed."""
    sg, sc = s.stream_segments, s.stream_chunks
    for r in conn.execute(select(sg).order_by(sg.c.queue_id, sg.c.segment)):
        rec.streams.setdefault(r.queue_id, []).append(
            (r.segment, r.first_offset, r.last_offset, r.first_ts_us, r.last_ts_us, r.size))
    for qid, segs in rec.streams.items():
        seg, first, _last, first_ts, _lts, _size = segs[-1]
        n, last, last_ts, size = conn.execute(
            select(func.sum(sc.c.count), func.max(sc.c.last_offset), func.max(sc.c.last_ts_us),
                   func.sum(sc.c.size))
            .where(sc.c.queue_id == qid, sc.c.first_offset >= first)
        ).one()
        if n:
            segs[-1] = (seg, first, int(last), first_ts, int(last_ts), int(size or 0))
