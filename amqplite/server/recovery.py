"""Rebuild the broker's state from what the store recovered at start-up."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from amqplite.broker import mqtt_retained
from amqplite.broker.auth import hash_password
from amqplite.broker.core import Broker, VHost
from amqplite.broker.exchanges import EXCHANGE_TYPES, Binding
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.model import Entry, Message, PriorityReadyList
from amqplite.broker.permissions import FULL
from amqplite.broker.queue import Queue
from amqplite.config import Settings
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.mqtt.subscriptions import session_queue_name
from amqplite.protocol.properties import check_properties, priority_of
from amqplite.storeops import SEEDED_KEY, PutMQTTSession

log = logging.getLogger("amqplite.server")


def _malformed(raw: bytes) -> str | None:
    """Why stored properties would not pass publish's check today, or None."""
    try:
        check_properties(raw)
    except FrameSyntaxError as exc:
        return exc.detail
    return None


def restore_security(broker: Broker, rec: Any) -> None:
    """Vhosts, users, permissions and topic permissions as stored (nothing is
    written back).

    Once seeded, the vhosts table is the truth: a deleted ``/`` stays deleted.
    """
    if SEEDED_KEY in rec.meta and not any(v.name == "/" for v in rec.vhosts):
        vh = broker.vhosts.get("/")
        if vh is not None and not vh.queues:
            del broker.vhosts["/"]
    for v in rec.vhosts:
        broker.add_vhost(v.name, v.description, persist=False)
    for u in rec.users:
        broker.put_user(u.name, u.password_hash, u.tags, persist=False)
    for p in rec.permissions:
        try:
            broker.set_permissions(p.user, p.vhost, p.configure, p.write, p.read,
                                   persist=False, stored=True)
        except ValueError:
            log.warning("ignoring stored permission of user '%s' in vhost '%s'", p.user,
                        p.vhost)
    for t in rec.topic_permissions:
        try:
            broker.set_topic_permission(t.user, t.vhost, t.exchange, t.write, t.read,
                                        persist=False, stored=True)
        except ValueError:
            log.warning("ignoring stored topic permission of user '%s' in vhost '%s'",
                        t.user, t.vhost)


def seed_security(broker: Broker, rec: Any, settings: Settings) -> None:
    """First start only: the default vhost, the default user and the users of the
    config file, each with full permissions on ``/`` (RabbitMQ seeds its default
    user the same way). Later starts leave the database alone, so users changed
    or deleted through the API or the CLI stay as they are."""
    if SEEDED_KEY in rec.meta:
        return
    broker.add_vhost("/")
    seeds = {settings.default_user: (settings.default_pass, "administrator")}
    for name, spec in settings.users.items():
        seeds[name] = (str(spec.get("password", "")), str(spec.get("tags", "")))
    for name, (password, tags) in seeds.items():
        if name in broker.users.users:
            continue
        broker.put_user(name, hash_password(password), tags)
        broker.set_permissions(name, "/", *FULL)
    broker.put_meta(SEEDED_KEY, "1")


def restore_retained(broker: Broker, rows: list[Any]) -> dict[int, Message]:
    """Retained publications of durable exchanges and MQTT topics, oldest first, as stored; the
    messages by key, for the queue entries of the same messages to share."""
    kept: dict[int, Message] = {}
    for r in rows:
        vh = broker.vhosts.get(r.vhost)
        if vh is None:
            continue
        if r.kind == mqtt_retained.KIND:  # MQTT's index (its limits set at first use)
            rs = mqtt_retained.index(broker.retained, r.vhost, None)
        else:
            ex = None if r.kind != "exchange" else vh.exchanges.get(r.owner)
            if ex is None or not ex.retains:
                continue
            rs = ex.retained_set(broker.retained, r.vhost)
        m = kept.get(r.message_id)  # kept by two exchanges (exchange bindings)
        if m is None:
            m = Message(r.message_id, r.exchange, r.routing_key, r.properties, r.body,
                        persistent=True)
        broker.retained.restore(rs, r.key, m)
        kept[r.message_id] = m
    return kept


def settled_queues(rec: Any) -> set[int]:
    """Queue ids whose stored redelivered flags hold even after an unclean stop: the
    subscription queues of MQTT sessions that were disconnected at the crash.

    A session's row says "disconnected" only once its end was written, and that
    end requeues its unacked deliveries, flagged, in the same submission; a
    session is delivered to only after its "connected" row committed. So an
    entry of such a queue with no flag was never sent since, and goes out
    without DUP (MQTT 3.1.1 3.3.1.1: DUP 1 is for a possible re-delivery).
    Queues of sessions connected at the crash, shared queues and every other
    queue keep RabbitMQ's rule: all redelivered."""
    gone = {(r.vhost, r.client_id) for r in rec.mqtt_sessions
            if isinstance(r, PutMQTTSession) and r.disconnected_at is not None}
    if not gone:
        return set()
    names = {(vhost, session_queue_name(cid, qos)) for vhost, cid in gone for qos in (0, 1)}
    return {q.queue_id for q in rec.queues if (q.vhost, q.name) in names}


def restore(broker: Broker, rec: Any, *, unclean: bool = False,
            fetch: Callable[[int, int, int, int], list[tuple[Any, ...]]] | None = None) -> None:
    """Durable exchanges, queues and bindings come back, then every stored entry.

    After a clean stop, an entry that was handed to a consumer (or requeued)
    comes back redelivered, one never delivered does not. After an unclean
    stop (``kill -9``, power loss) every entry comes back redelivered, as in
    RabbitMQ: a delivery may have reached a client before its "delivered"
    mark committed; except in :func:`settled_queues`, whose flags hold. TTLs
    start again from the restart (enqueue times are not stored). A message
    whose properties do not decode (stored by a version that did not check
    them at publish) is dropped with an error instead: nothing later may trip
    on it.

    Streams get their segments back (their entries stay in the store).

    Entries after a queue's first window stay in the store as its spilled
    run, unless the queue cannot spill (priorities, length limits, TTLs):
    those are read in full with ``fetch`` (``Store.fetch_entries``).
    """
    restore_security(broker, rec)
    for pol in rec.policies:
        broker.vhosts.setdefault(pol.vhost, VHost(pol.vhost))
        try:
            broker.set_policy(pol.vhost, pol.name, pol.pattern, dict(pol.definition),
                              pol.priority, pol.apply_to, persist=False, stored=True)
        except ValueError as exc:
            log.warning("ignoring stored policy '%s' in vhost '%s': %s", pol.name, pol.vhost, exc)
    for prm in rec.parameters:
        if prm.vhost in broker.vhosts:
            broker.parameters.put(prm.component, prm.vhost, prm.name, prm.value,
                                  persist=False, defined_by=prm.defined_by)
    for ex in rec.exchanges:
        vh = broker.vhosts.setdefault(ex.vhost, VHost(ex.vhost))
        if ex.name in vh.exchanges:
            continue
        cls = EXCHANGE_TYPES.get(ex.type)
        if cls is None:
            continue
        broker.add_exchange(
            vh,
            cls(ex.name, durable=True, auto_delete=ex.auto_delete, internal=ex.internal,
                arguments=ex.arguments),
            persist=False,
        )
    for q in rec.queues:
        vh = broker.vhosts.setdefault(q.vhost, VHost(q.vhost))
        queue = Queue(q.queue_id, q.vhost, q.name, durable=True, auto_delete=q.auto_delete,
                      arguments=q.arguments)
        broker.add_queue(vh, queue, persist=False)
    for b in rec.bindings:
        bvh = broker.vhosts.get(b.vhost)
        if bvh is None:
            continue
        src = bvh.exchanges.get(b.source)
        if src is None:
            continue
        binding = Binding(b.source, (b.destination_kind, b.destination), b.routing_key,
                          freeze_args(b.arguments))
        broker.restore_binding(bvh, src, binding)
    # a message both retained and queued comes back as one object (one body)
    messages = restore_retained(broker, rec.retained)
    bad: dict[int, str | None] = {}
    by_id = {q.id: q for vh in broker.vhosts.values() for q in vh.queues.values()}
    for qid, segments in rec.streams.items():
        stream = by_id.get(qid)
        if stream is not None:
            broker.restore_stream(stream, segments)
    settled = settled_queues(rec) if unclean else set()
    for qid, entries in rec.entries.items():
        target = by_id.get(qid)
        if target is None:
            continue
        maybe_sent = unclean and qid not in settled
        for re in entries:
            m = messages.get(re.message_id)
            if m is None:
                m = Message(re.message_id, re.exchange, re.routing_key, re.properties, re.body,
                            body_size=re.body_size, persistent=True)
                messages[re.message_id] = m
            elif m.body is None and re.body is not None:
                m.body = re.body
            m.stored = True  # a retained one too: its messages row exists
            e = Entry(re.position, m, stored=True)
            target.next_position = max(target.next_position, re.position + 1)
            if re.message_id not in bad:
                bad[re.message_id] = _malformed(re.properties)
            detail = bad[re.message_id]
            if detail is not None:
                broker.drop_malformed(target, e, detail)
                continue
            e.delivery_count = re.delivery_count
            e.redelivered = maybe_sent or bool(re.redelivered or re.delivery_count)
            if type(target.ready) is PriorityReadyList:
                e.priority = priority_of(re.properties) or 0
            broker.arm_ttl(target, e)
            target.ready.append(e)
    for qid, (count, size, lo, hi) in rec.spilled.items():
        target = by_id.get(qid)
        if target is None:
            continue
        target.next_position = max(target.next_position, hi + 1)
        if broker.spills(target) and target.ttl is None:
            target.ready.restore_disk(count, size, lo, hi)
            target.spilled = True
        elif fetch is not None:
            broker.restore_entries(target, fetch(qid, lo, hi, count))
    broker.seed_ids(rec.max_queue_id, rec.max_message_id)
