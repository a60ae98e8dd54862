"""A session's subscription queues and their bindings to ``mqtt_exchange``:
declare, consume, SUBSCRIBE/UNSUBSCRIBE and the retained messages a new
subscription is owed."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.exchanges.base import Binding
from amqplite.broker.model import ChannelState, Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import FlowControlError, MQTTConnection
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import SubscribeReceived, UnsubscribeReceived
from amqplite.protocol.mqtt.packets import MQTT_5
from amqplite.protocol.mqtt.properties import EMPTY
from amqplite.protocol.mqtt.topics import (
    binding_key_to_filter,
    filter_to_binding_key,
    matches,
)
from amqplite.server.mqtt.common import QOS0_CH, QOS1_CH, QOS_ARG, RAP_ARG, message_qos, queue_name, refused
from amqplite.server.mqtt.mapping import expired, mqtt_properties

log = logging.getLogger("amqplite.mqtt")


@attrs.define(eq=False)
class Subscriptions:
    """One connected session's queues; built at CONNECT with what it uses."""

    broker: Broker
    proto: MQTTConnection
    session: Session
    channels: dict[int, ChannelState]
    client_id: str
    #: queues outlive the connection (durable, not exclusive)
    persistent: bool
    exchange: str
    #: the connection's name, for the log
    name: str
    #: waits for the store: a SUBACK means the subscription is stored
    committed: Callable[[], Awaitable[None]]
    #: wakes the connection's writer
    flush: Callable[[], None]

    #: set when the session ends: what an await left pending is not sent
    ended: bool = False
    #: subscriptions with options a binding key cannot say (QoS 2, retain as
    #: published), read from the bindings' arguments: (queue QoS, filter, QoS, RAP)
    special: list[tuple[int, str, int, bool]] = attrs.field(factory=list)

    def _bindings(self, key: str | None = None) -> list[tuple[int, Binding]]:
        """Our queues' bindings from ``mqtt_exchange`` (of ``key``, or all)."""
        vh = self.broker.vhosts.get(self.session.vhost)
        if vh is None:
            return []
        return [(qos, b) for qos in (0, 1)
                for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ())
                if b.source == self.exchange and (key is None or b.routing_key == key)]

    def load_options(self) -> None:
        """Rebuild :attr:`special` (after CONNECT, SUBSCRIBE, UNSUBSCRIBE)."""
        self.special = []
        for qos, b in self._bindings():
            args = b.args_dict
            if args:
                self.special.append((qos, binding_key_to_filter(b.routing_key),
                                     int(args.get(QOS_ARG, qos)), bool(args.get(RAP_ARG))))

    def options(self, queue_qos: int, topic: str) -> tuple[int, bool]:
        """(QoS, retain as published) of a delivery from the queue of ``queue_qos``:
        the highest QoS among the matching subscriptions, RAP if one has it."""
        qos, rap = queue_qos, False
        for q, f, sub_qos, sub_rap in self.special:
            if q == queue_qos and matches(f, topic):
                qos, rap = max(qos, sub_qos), rap or sub_rap
        return qos, rap

    def queue_exists(self, qos: int) -> bool:
        vh = self.broker.vhosts.get(self.session.vhost)
        return vh is not None and queue_name(self.client_id, qos) in vh.queues

    def delete_queue(self, qos: int) -> None:
        self.broker.queue_delete(self.channels[QOS0_CH], queue_name(self.client_id, qos))

    def declare(self, qos: int) -> None:
        """The session's queue for ``qos`` and its consumer, when not there yet."""
        if self.queue_exists(qos):
            return
        ch = self.channels[QOS0_CH if qos == 0 else QOS1_CH]
        durable = self.persistent
        self.broker.queue_declare(ch, queue_name(self.client_id, qos), durable=durable,
                                  exclusive=not durable, auto_delete=False)
        self.consume(qos)

    def consume(self, qos: int) -> None:
        b = self.broker
        if qos == 0:
            ch = self.channels[QOS0_CH]
            tag = b.basic_consume(ch, queue_name(self.client_id, 0), "mqtt-qos0", no_ack=True)
        else:
            ch = self.channels[QOS1_CH]
            b.basic_qos(ch, 0, min(self.proto.client_receive_maximum, 65_535), False)
            tag = b.basic_consume(ch, queue_name(self.client_id, 1), "mqtt-qos1")
        b.start_consumer(ch, tag)

    def _bind(self, key: str, qos: int, rap: bool) -> None:
        """The filter's one binding: to the qos0 queue, or to the qos1 queue for QoS
        1 and 2 (the delivery's QoS comes from the arguments); any other one of the
        same key (an earlier subscription's) goes."""
        b = self.broker
        args: dict[str, Any] = {}
        if qos == 2:
            args[QOS_ARG] = 2
        if rap:
            args[RAP_ARG] = True
        target = min(qos, 1)
        self.declare(target)
        for q, old in self._bindings(key):
            if q != target or old.args_dict != args:
                b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, q),
                             self.exchange, key, old.args_dict or None, unbind=True)
        b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, target),
                     self.exchange, key, args or None)

    async def subscribe(self, ev: SubscribeReceived) -> None:
        """Bind each filter (:meth:`_bind`). A shared subscription is not offered yet."""
        codes: list[int] = []
        #: (filter, granted QoS) of the retained messages owed after the SUBACK
        owed: list[tuple[str, int]] = []
        for req in ev.requests:
            if req.reason_code or req.parsed is None:
                codes.append(req.reason_code or ReasonCode.TOPIC_FILTER_INVALID)
                continue
            if req.parsed.share_group is not None:
                codes.append(ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
                continue
            qos = req.qos
            key = filter_to_binding_key(req.parsed.topic_filter)
            if req.retain_handling == 0 or (req.retain_handling == 1
                                            and not self.subscribed(key)):
                owed.append((req.parsed.topic_filter, qos))
            try:
                self._bind(key, qos, req.retain_as_published)
            except AMQPError as exc:
                log.info("MQTT %s: subscription to %r refused: %s", self.name,
                         req.topic_filter, exc)
                codes.append(ReasonCode.NOT_AUTHORIZED if refused(exc)
                             else ReasonCode.UNSPECIFIED_ERROR)
                continue
            codes.append(qos)
        self.load_options()
        await self.committed()  # a SUBACK means the subscription is stored
        self.proto.send_suback(ev.packet_id, codes)
        for topic_filter, qos in owed:
            self.send_retained(topic_filter, qos)

    def subscribed(self, key: str) -> bool:
        """Is ``key`` already bound to one of our queues (retain handling 1)?"""
        return bool(self._bindings(key))

    def send_retained(self, topic_filter: str, qos: int) -> None:
        """A new subscription receives the retained messages its filter matches, with
        the retain flag set ([MQTT-3.3.1-6]; also under retain-as-published 0,
        [MQTT-3.3.1-12] is about live forwarding). They go straight to the client,
        as RabbitMQ's plugin sends them, at the lower of the two QoS."""
        if self.ended:
            return
        s = self.session
        store = self.broker.retained
        rs = store.find(mqtt_retained.owner(s.vhost))
        now = time.time()
        for r in mqtt_retained.matching(store, rs, topic_filter):
            m = r.message
            raw = m.properties_raw
            if expired(raw, now):  # [MQTT-3.3.2-5]: not sent after its expiry
                continue
            q = min(qos, message_qos(raw))
            props = mqtt_properties(raw, now)[0] if self.proto.version >= MQTT_5 else EMPTY
            try:  # its PUBACK/PUBREC finds no delivery tag: nothing to ack
                self.proto.send_publish(r.key, bytes(m.body or b""), q, True, props)
            except FlowControlError:
                log.info("MQTT %s: retained %r not sent: receive maximum reached",
                         self.name, r.key)
        self.flush()

    async def unsubscribe(self, ev: UnsubscribeReceived) -> None:
        codes: list[int] = []
        for parsed in ev.parsed:
            if parsed is None:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            key = filter_to_binding_key(parsed.topic_filter)
            for qos, b in self._bindings(key):
                with contextlib.suppress(AMQPError):
                    self.broker.queue_bind(self.channels[QOS0_CH],
                                           queue_name(self.client_id, qos), self.exchange, key,
                                           b.args_dict or None, unbind=True)
            codes.append(0)
        self.load_options()
        await self.committed()
        self.proto.send_unsuback(ev.packet_id, codes)

    def dollar_match(self, ch: ChannelState, topic: str) -> bool:
        """Does a subscription of the delivering queue match a ``$`` topic under MQTT's
        rule? The AMQP topic exchange routed it by ``#``/``*`` alone."""
        qos = 0 if ch.number == QOS0_CH else 1
        return any(q == qos and matches(binding_key_to_filter(b.routing_key), topic)
                   for q, b in self._bindings())

