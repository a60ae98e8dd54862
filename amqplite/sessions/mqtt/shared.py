"""Shared subscriptions (MQTT 5 ``$share/{group}/{filter}``, also from 3.1.1 clients
as Mosquitto accepts them): the members of a group share one queue.

The queue ``mqtt-shared-{group}-{hash of the filter}`` is bound to
``mqtt_exchange`` once per member, each binding naming its member
(``x-mqtt-client-id``) and its options; the topic exchange routes a message
to the queue once however many bindings match, and the queue's consumers
(one per connected member) take turns, AMQP's round-robin. A member's unacked
QoS 1 deliveries go back to the queue, hence to another member, when it
leaves. The queue is durable and never exclusive: a persistent member keeps
its binding across a disconnect and a restart (messages wait in the queue),
a clean member's binding goes at its session's end, and the queue goes with
its last member. After a restart the bindings of members that have no stored
session (clean sessions at the crash) are removed. Retained messages are not
sent on a shared subscription [MQTT 5 4.8.2].
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import amqplite.sessions.mqtt.options as options
from amqplite.broker.core import Broker
from amqplite.protocol.mqtt.events import SubscribeRequest
from amqplite.protocol.mqtt.subscriptions import (
    SubOptions,
    is_shared_queue,
    member_of,
    options_of,
    shared_queue_name,
)
from amqplite.protocol.mqtt.topics import binding_key_to_filter
from amqplite.sessions.mqtt.common import QOS0_CH, QOS1_CH

if TYPE_CHECKING:
    from amqplite.sessions.mqtt.subscriptions import Subscriptions

log = logging.getLogger("amqplite.mqtt")


class SharedGroups:
    """Who is a member of which shared queue, per vhost (the listener's; the member
    bindings are the durable record, this is their index)."""

    def __init__(self, broker: Broker, exchange: str) -> None:
        self.broker = broker
        self.exchange = exchange
        #: (vhost, queue) -> member client ids
        self._members: dict[tuple[str, str], set[str]] = {}
        #: (vhost, client id) -> shared queues it is a member of
        self._queues: dict[tuple[str, str], set[str]] = {}

    def queues_of(self, vhost: str, client_id: str) -> list[str]:
        return sorted(self._queues.get((vhost, client_id), ()))

    def joined(self, vhost: str, queue: str, client_id: str) -> None:
        self._members.setdefault((vhost, queue), set()).add(client_id)
        self._queues.setdefault((vhost, client_id), set()).add(queue)

    def recover(self, persistent: set[tuple[str, str]]) -> None:
        """After a restart: index the member bindings of stored sessions, drop the
        others, and the shared queues left without a member. ``persistent``: the
        stored sessions, (vhost, client id)."""
        b = self.broker
        for vh in list(b.vhosts.values()):
            for name in [n for n in vh.queues if is_shared_queue(n)]:
                for binding in list(vh.bindings_to.get(("queue", name), ())):
                    member = member_of(binding.args_dict)
                    if binding.source != self.exchange or member is None:
                        continue
                    if (vh.name, member) in persistent:
                        self.joined(vh.name, name, member)
                    else:
                        b.drop_binding(vh, binding)
                if (vh.name, name) not in self._members:
                    log.info("MQTT shared queue %r of vhost %r has no member left: deleted",
                             name, vh.name)
                    b.delete_queue(vh, vh.queues[name])

    def leave(self, vhost: str, client_id: str, queue: str | None = None) -> None:
        """``client_id`` leaves ``queue`` (or every shared queue): its bindings go, and
        a queue without members is deleted. The member's consumer must be gone."""
        b = self.broker
        vh = b.vhosts.get(vhost)
        mine = self._queues.get((vhost, client_id), set())
        for name in [queue] if queue is not None else sorted(mine):
            mine.discard(name)
            members = self._members.get((vhost, name), set())
            members.discard(client_id)
            q = None if vh is None else vh.queues.get(name)
            if vh is None or q is None:
                self._members.pop((vhost, name), None)
                continue
            for binding in list(vh.bindings_to.get(("queue", name), ())):
                if binding.source == self.exchange and member_of(binding.args_dict) == client_id:
                    b.drop_binding(vh, binding)
            if not members:
                self._members.pop((vhost, name), None)
                b.delete_queue(vh, q)
        if not mine:
            self._queues.pop((vhost, client_id), None)


def subscribe(subs: Subscriptions, req: SubscribeRequest, identifier: int | None) -> int:
    """Join the group of ``req`` (a ``$share/`` filter); returns the granted QoS.
    Raises AMQPError when the broker refuses (permissions)."""
    assert req.parsed is not None and req.parsed.share_group is not None
    topic_filter = req.parsed.topic_filter
    qos = req.qos
    queue = shared_queue_name(req.parsed.share_group, topic_filter)
    b = subs.broker
    b.queue_declare(subs.channels[QOS0_CH], queue, durable=True, exclusive=False,
                    auto_delete=False)
    opts = SubOptions(qos, False, req.retain_as_published, identifier)
    options.bind(subs, queue, topic_filter, opts, member=subs.client_id)
    subs.groups.joined(subs.session.vhost, queue, subs.client_id)
    consume(subs, queue, qos)
    return qos


def unsubscribe(subs: Subscriptions, group: str, topic_filter: str) -> bool:
    """Leave a group; was the session a member?"""
    queue = shared_queue_name(group, topic_filter)
    vhost = subs.session.vhost
    if queue not in subs.groups.queues_of(vhost, subs.client_id):
        return False
    cancel(subs, queue)
    subs.table.drop_queue(queue)
    subs.groups.leave(vhost, subs.client_id, queue)
    return True


def _tag(queue: str) -> str:
    return f"mqtt-shared:{queue}"


def consume(subs: Subscriptions, queue: str, qos: int) -> None:
    """The member's consumer of ``queue``: acked on the QoS 1 channel for QoS 1 and 2
    (prefetch = the client's Receive Maximum, also channel-wide as several queues
    share it), no-ack on the QoS 0 one. A new QoS moves it."""
    tag = _tag(queue)
    number = QOS1_CH if qos else QOS0_CH
    current = subs.shared_tags.get(tag)
    if current is not None:
        if tag in subs.channels[number].consumers:
            return
        cancel(subs, queue)
    b = subs.broker
    ch = subs.channels[number]
    if qos:
        window = min(subs.proto.client_receive_maximum, 65_535)
        b.basic_qos(ch, 0, window, False)
        b.basic_qos(ch, 0, window, True)
    b.basic_consume(ch, queue, tag, no_ack=not qos)
    subs.shared_tags[tag] = queue
    b.start_consumer(ch, tag)


def cancel(subs: Subscriptions, queue: str) -> None:
    tag = _tag(queue)
    if subs.shared_tags.pop(tag, None) is None:
        return
    for number in (QOS0_CH, QOS1_CH):
        ch = subs.channels.get(number)
        if ch is not None and tag in ch.consumers:
            subs.broker.basic_cancel(ch, tag)


def resume(subs: Subscriptions) -> None:
    """A resumed session: its memberships back in its table, their consumers started
    (after the CONNACK)."""
    cid = subs.client_id
    for queue in subs.groups.queues_of(subs.session.vhost, cid):
        bindings = options.bindings_of(subs, queue, cid)
        if not bindings:
            continue
        qos = 0
        for b in bindings:
            opts = options_of(b.args_dict)
            subs.table.set(queue, binding_key_to_filter(b.routing_key), opts)
            qos = max(qos, opts.qos)
        consume(subs, queue, qos)


def end(subs: Subscriptions) -> None:
    """A clean session ends: it leaves every group."""
    for queue in list(subs.shared_tags.values()):
        cancel(subs, queue)
    subs.groups.leave(subs.session.vhost, subs.client_id)
