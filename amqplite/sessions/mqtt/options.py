"""Subscription options kept in the bindings, and what a delivery makes of them.

A subscription is a binding of a session's queue to ``mqtt_exchange``; its
MQTT 5 options (subscription identifier, no-local, retain-as-published) are
the binding's arguments (``protocol.mqtt.subscriptions``), so they are as
durable as the binding and come back with a persistent session. The session
keeps them in memory too (:class:`SubscriptionTable`), which each delivery
consults: the identifiers of the matching subscriptions go with the PUBLISH,
a no-local subscription does not get the session's own publishes, and a
``$`` topic needs a filter without a leading wildcard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from amqplite.broker.exchanges import Binding
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.model import ChannelState
from amqplite.protocol.mqtt.mapping import mqtt_properties
from amqplite.protocol.mqtt.packets import MQTT_5
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.subscriptions import (
    Admission,
    SubOptions,
    binding_args,
    member_of,
    options_of,
)
from amqplite.protocol.mqtt.topics import binding_key_to_filter, filter_to_binding_key
from amqplite.sessions.mqtt.common import QOS0_CH

if TYPE_CHECKING:
    from amqplite.sessions.mqtt.subscriptions import Subscriptions


def bindings_of(subs: Subscriptions, queue: str, member: str | None = None) -> list[Binding]:
    """The subscription bindings of ``queue`` (of one member, for a shared queue)."""
    vh = subs.broker.vhosts.get(subs.session.vhost)
    if vh is None:
        return []
    return [b for b in vh.bindings_to.get(("queue", queue), ())
            if b.source == subs.exchange and member_of(b.args_dict) == member]


def bind(subs: Subscriptions, queue: str, topic_filter: str, opts: SubOptions,
         member: str | None = None) -> None:
    """Subscribe ``topic_filter`` on ``queue`` with ``opts``: the new binding first (a
    refusal leaves the old subscription as it was), then the same filter's bindings
    with other options go. Raises AMQPError as queue.bind does."""
    key = filter_to_binding_key(topic_filter)
    args = binding_args(opts, member)
    frozen = freeze_args(args)
    old = [b for b in bindings_of(subs, queue, member) if b.routing_key == key]
    ch = subs.channels[QOS0_CH]
    if not any(b.arguments == frozen for b in old):
        subs.broker.queue_bind(ch, queue, subs.exchange, key, args)
    for b in old:
        if b.arguments != frozen:
            subs.broker.queue_bind(ch, queue, subs.exchange, key, b.args_dict, unbind=True)
    subs.table.set(queue, topic_filter, opts)


def unbind(subs: Subscriptions, queue: str, topic_filter: str, member: str | None = None) -> bool:
    """Unsubscribe ``topic_filter`` from ``queue``, whatever its options; was it there?"""
    key = filter_to_binding_key(topic_filter)
    found = subs.table.remove(queue, topic_filter) is not None
    for b in bindings_of(subs, queue, member):
        if b.routing_key == key:
            found = True
            subs.broker.queue_bind(subs.channels[QOS0_CH], queue, subs.exchange, key,
                                   b.args_dict, unbind=True)
    return found


def load(subs: Subscriptions, queue: str, qos: int, member: str | None = None) -> None:
    """A resumed session's subscriptions on ``queue``, as its bindings kept them."""
    subs.table.load(queue, [(binding_key_to_filter(b.routing_key), options_of(b.args_dict, qos))
                            for b in bindings_of(subs, queue, member)])


def delivering_queue(subs: Subscriptions, ch: ChannelState, consumer_tag: str) -> str:
    """The queue a delivery came from: a shared one by its consumer, else our own."""
    shared = subs.shared_tags.get(consumer_tag)
    if shared is not None:
        return shared
    return subs.own_queues[0 if ch.number == QOS0_CH else 1]


def admit(subs: Subscriptions, ch: ChannelState, consumer_tag: str, props: bytes,
          topic: str) -> Admission:
    """Does this delivery go to the client, and with which identifiers?"""
    return subs.table.admit_delivery(delivering_queue(subs, ch, consumer_tag), topic, props,
                                     subs.client_id)


def outbound(props: bytes, verdict: Admission, now: float) -> tuple[Properties, bool]:
    """(MQTT 5 PUBLISH properties, retain flag) of a live delivery at ``now``: the
    mapped properties (mapping.py), the identifiers of the subscriptions it is for,
    and the publisher's retain flag when a subscription asked for Retain As
    Published ([MQTT-3.3.1-12]: else a live message has retain 0)."""
    mapped = mqtt_properties(props)
    out = mapped.at(now)
    if verdict.identifiers:
        out = attrs.evolve(out, subscription_identifiers=verdict.identifiers)
    return out, mapped.retain and verdict.retain_as_published


def retained_properties(subs: Subscriptions, props: bytes, identifier: int | None,
                        now: float) -> Properties:
    """A retained message's MQTT 5 properties at ``now``, with the identifier of the
    subscription it is sent for (MQTT-3.3.4-3)."""
    if subs.proto.version < MQTT_5:
        return EMPTY
    verdict = Admission(True, () if identifier is None else (identifier,))
    return outbound(bytes(props), verdict, now)[0]
