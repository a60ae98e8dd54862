"""A session's subscription queues and their bindings to ``mqtt_exchange``:
declare, consume, SUBSCRIBE/UNSUBSCRIBE and the retained messages a new
subscription is owed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import attrs

from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState, Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import FlowControlError, MQTTConnection
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import SubscribeReceived, UnsubscribeReceived
from amqplite.protocol.mqtt.topics import (
    binding_key_to_filter,
    filter_to_binding_key,
    matches,
)
from amqplite.server.mqtt.common import QOS0_CH, QOS1_CH, queue_name, refused

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

    async def subscribe(self, ev: SubscribeReceived) -> None:
        """Bind each filter to the queue of its (granted) QoS, unbind it from the other.
        RabbitMQ grants at most QoS 1; a shared subscription is not offered yet."""
        b = self.broker
        exchange = self.exchange
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
            qos = min(req.qos, 1)
            key = filter_to_binding_key(req.parsed.topic_filter)
            if req.retain_handling == 0 or (req.retain_handling == 1
                                            and not self.subscribed(key)):
                owed.append((req.parsed.topic_filter, qos))
            try:
                self.declare(qos)
                b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, qos),
                             exchange, key)
                if self.queue_exists(1 - qos):
                    b.queue_bind(self.channels[QOS0_CH], queue_name(self.client_id, 1 - qos),
                                 exchange, key, unbind=True)
            except AMQPError as exc:
                log.info("MQTT %s: subscription to %r refused: %s", self.name,
                         req.topic_filter, exc)
                codes.append(ReasonCode.NOT_AUTHORIZED if refused(exc)
                             else ReasonCode.UNSPECIFIED_ERROR)
                continue
            codes.append(qos)
        await self.committed()  # a SUBACK means the subscription is stored
        self.proto.send_suback(ev.packet_id, codes)
        for topic_filter, qos in owed:
            self.send_retained(topic_filter, qos)

    def subscribed(self, key: str) -> bool:
        """Is ``key`` already bound to one of our queues (retain handling 1)?"""
        vh = self.broker.vhosts.get(self.session.vhost)
        if vh is None:
            return False
        exchange = self.exchange
        return any(b.source == exchange and b.routing_key == key
                   for qos in (0, 1)
                   for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ()))

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
        for r in mqtt_retained.matching(store, rs, topic_filter):
            m = r.message
            q = min(qos, 1 if m.persistent else 0)
            try:  # a QoS 1 one's PUBACK finds no delivery tag in _tags: nothing to ack
                self.proto.send_publish(r.key, bytes(m.body or b""), q, retain=True)
            except FlowControlError:
                log.info("MQTT %s: retained %r not sent: receive maximum reached",
                         self.name, r.key)
        self.flush()

    async def unsubscribe(self, ev: UnsubscribeReceived) -> None:
        exchange = self.exchange
        codes: list[int] = []
        for parsed in ev.parsed:
            if parsed is None:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            key = filter_to_binding_key(parsed.topic_filter)
            for qos in (0, 1):
                with contextlib.suppress(AMQPError):
                    self.broker.queue_bind(self.channels[QOS0_CH],
                                           queue_name(self.client_id, qos), exchange, key,
                                           unbind=True)
            codes.append(0)
        await self.committed()
        self.proto.send_unsuback(ev.packet_id, codes)

    def dollar_match(self, ch: ChannelState, topic: str) -> bool:
        """Does a subscription of the delivering queue match a ``$`` topic under MQTT's
        rule? The AMQP topic exchange routed it by ``#``/``*`` alone."""
        vh = self.broker.vhosts.get(self.session.vhost)
        if vh is None:
            return False
        qos = 0 if ch.number == QOS0_CH else 1
        exchange = self.exchange
        for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ()):
            if b.source == exchange and matches(binding_key_to_filter(b.routing_key), topic):
                return True
        return False

