"""A session's subscription queues and their bindings to ``mqtt_exchange``:
declare, consume, SUBSCRIBE/UNSUBSCRIBE and the retained messages a new
subscription is owed. A SUBACK means the subscription is stored: the shell
waits for the commit between :meth:`Subscriptions.subscribe` and
:meth:`Subscriptions.acknowledge`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import amqplite.sessions.mqtt.options as options
import amqplite.sessions.mqtt.shared as shared
from amqplite.broker import mqtt_retained
from amqplite.broker.core import Broker
from amqplite.broker.exchanges.base import Binding
from amqplite.broker.model import ChannelState, Session
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import FlowControlError, MQTTConnection
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.events import SubscribeReceived, UnsubscribeReceived
from amqplite.protocol.mqtt.mapping import message_qos, mqtt_properties
from amqplite.protocol.mqtt.subscriptions import Admission, SubOptions, SubscriptionTable
from amqplite.protocol.mqtt.topics import filter_to_binding_key
from amqplite.sessions.mqtt.common import QOS0_CH, QOS1_CH, queue_name, refused
from amqplite.sessions.mqtt.shared import SharedGroups
from amqplite.sessions.mqtt.systree import matching as sys_matching

log = logging.getLogger("amqplite.mqtt")


class Subscriptions:
    """One connected session's queues; built at CONNECT with what it uses.

    A plain class (not attrs): mypyc rejects attrs factory defaults at import."""

    __slots__ = ("broker", "channels", "client_id", "ended", "exchange", "flush", "groups",
                 "name", "own_queues", "persistent", "proto", "session", "shared_tags",
                 "sys_values", "table")

    def __init__(self, broker: Broker, proto: MQTTConnection, session: Session,
                 channels: dict[int, ChannelState], client_id: str, persistent: bool,
                 exchange: str, name: str, flush: Callable[[], None], groups: SharedGroups,
                 sys_values: Callable[[], dict[str, str]] | None = None) -> None:
        self.broker = broker
        self.proto = proto
        self.session = session
        self.channels = channels
        self.client_id = client_id
        #: queues outlive the connection (durable, not exclusive)
        self.persistent = persistent
        self.exchange = exchange
        #: the connection's name, for the log
        self.name = name
        #: wakes the connection's writer
        self.flush = flush
        #: the listener's index of shared subscription members
        self.groups = groups
        #: set when the session ends: what an await left pending is not sent
        self.ended = False
        #: the options of each subscription, by queue and filter (options.py): QoS 2,
        #: retain as published, no local, subscription identifiers
        self.table = SubscriptionTable()
        #: consumer tag -> shared queue this session consumes
        self.shared_tags: dict[str, str] = {}
        #: the names of our own queues by QoS, built once (a delivery names its queue)
        self.own_queues = (queue_name(client_id, 0), queue_name(client_id, 1))
        #: the ``$SYS`` tree's current values (None: ``mqtt_sys_interval`` 0, no tree);
        #: a new ``$SYS`` subscription gets them as retained messages
        self.sys_values = sys_values

    def _bindings(self, key: str) -> list[tuple[int, Binding]]:
        """Our queues' bindings of ``key`` from ``mqtt_exchange``."""
        vh = self.broker.vhosts.get(self.session.vhost)
        if vh is None:
            return []
        return [(qos, b) for qos in (0, 1)
                for b in vh.bindings_to.get(("queue", queue_name(self.client_id, qos)), ())
                if b.source == self.exchange and b.routing_key == key]

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

    def subscribe(self, ev: SubscribeReceived) -> tuple[list[int], list[tuple[str, int]]]:
        """Bind each filter with its options (options.py): to the qos0 queue, or to
        the qos1 queue for QoS 1 and 2 (a QoS 2 one says so in its arguments); its
        binding on the other queue goes. A shared one joins its group's queue.
        Returns the SUBACK's codes and the (filter, QoS) owed retained messages."""
        codes: list[int] = []
        #: (filter, granted QoS) of the retained messages owed after the SUBACK
        owed: list[tuple[str, int]] = []
        for req in ev.requests:
            if req.reason_code or req.parsed is None:
                codes.append(req.reason_code or ReasonCode.TOPIC_FILTER_INVALID)
                continue
            qos = req.qos
            topic_filter = req.parsed.topic_filter
            shared_sub = req.parsed.share_group is not None
            if not shared_sub and (req.retain_handling == 0 or (
                    req.retain_handling == 1
                    and not self.subscribed(filter_to_binding_key(topic_filter)))):
                owed.append((topic_filter, qos))  # never for shared ones (MQTT 5 4.8.2)
            try:
                if shared_sub:
                    codes.append(shared.subscribe(self, req, ev.subscription_identifier))
                    continue
                target = min(qos, 1)
                self.declare(target)
                opts = SubOptions(qos, req.no_local, req.retain_as_published,
                                  ev.subscription_identifier)
                options.bind(self, queue_name(self.client_id, target), topic_filter, opts)
                if self.queue_exists(1 - target):
                    options.unbind(self, queue_name(self.client_id, 1 - target), topic_filter)
            except AMQPError as exc:
                log.info("MQTT %s: subscription to %r refused: %s", self.name,
                         req.topic_filter, exc)
                if owed and owed[-1][0] == topic_filter:  # nothing retained for a refusal
                    owed.pop()
                codes.append(ReasonCode.NOT_AUTHORIZED if refused(exc)
                             else ReasonCode.UNSPECIFIED_ERROR)
                continue
            codes.append(qos)
        return codes, owed

    def acknowledge(self, ev: SubscribeReceived, codes: list[int],
                    owed: list[tuple[str, int]], now: float) -> None:
        """The subscriptions are stored: SUBACK, then the retained messages owed."""
        self.proto.send_suback(ev.packet_id, codes)
        for topic_filter, qos in owed:
            self.send_retained(topic_filter, qos, now, ev.subscription_identifier)

    def subscribed(self, key: str) -> bool:
        """Is ``key`` already bound to one of our queues (retain handling 1)?"""
        return bool(self._bindings(key))

    def send_retained(self, topic_filter: str, qos: int, now: float,
                      identifier: int | None = None) -> None:
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
            raw = bytes(m.properties_raw)
            if mqtt_properties(raw).expired(now):  # [MQTT-3.3.2-5]: not sent after it
                continue
            q = min(qos, message_qos(raw))
            try:  # its PUBACK/PUBREC finds no delivery tag: nothing to ack
                self.proto.send_publish(r.key, bytes(m.body or b""), q, retain=True,
                                        properties=options.retained_properties(
                                            self, m.properties_raw, identifier, now))
            except FlowControlError:
                log.info("MQTT %s: retained %r not sent: receive maximum reached",
                         self.name, r.key)
        if self.sys_values is not None and topic_filter.startswith("$"):
            # $SYS values are the tree's, never the retained store's: nothing stored
            for topic, value in sys_matching(self.sys_values(), (topic_filter,)):
                self.proto.send_publish(topic, value.encode(), 0, retain=True)
        self.flush()

    def unsubscribe(self, ev: UnsubscribeReceived) -> list[int]:
        """Unbind each filter; the UNSUBACK's codes (it goes once they are stored)."""
        codes: list[int] = []
        for parsed in ev.parsed:
            if parsed is None:
                codes.append(ReasonCode.TOPIC_FILTER_INVALID)
                continue
            found = False
            with contextlib.suppress(AMQPError):
                if parsed.share_group is not None:
                    found = shared.unsubscribe(self, parsed.share_group, parsed.topic_filter)
                else:
                    for qos in (0, 1):
                        found |= options.unbind(self, queue_name(self.client_id, qos),
                                                parsed.topic_filter)
            codes.append(0 if found else ReasonCode.NO_SUBSCRIPTION_EXISTED)
        return codes

    def admit(self, ch: ChannelState, consumer_tag: str, props: bytes, topic: str) -> Admission:
        """Does a delivery go to the client, at which QoS, with which identifiers
        (no local, the ``$`` rule; options.py)?"""
        return options.admit(self, ch, consumer_tag, props, topic)
