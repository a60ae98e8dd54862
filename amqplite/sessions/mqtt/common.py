"""Names and constants the MQTT session rules and their shell share."""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import ServerLimits
from amqplite.protocol.mqtt.packets import MQTT_5, Publish, encode_publish
from amqplite.protocol.mqtt.subscriptions import session_queue_name
from amqplite.protocol.mqtt.topics import routing_key_to_topic

#: a session: (vhost, client id), as in RabbitMQ (two vhosts' ``sensor-42`` are two)
Key = tuple[str, str]
#: what this front offers, advertised to MQTT 5 clients in the CONNACK
LIMITS = ServerLimits()
#: channel numbers of a client's broker session
PUBLISH_CH, QOS0_CH, QOS1_CH = 1, 2, 3
#: an MQTT message's AMQP properties (QoS 1/2 persistent, the publish QoS in the
#: header ``x-mqtt-publish-qos``), MQTT 5 properties: protocol/mqtt/mapping.py;
#: binding arguments of a subscription: protocol/mqtt/subscriptions.py


@attrs.frozen
class Login:
    """Who a CONNECT logs in as, or the reason code refusing it."""

    user: str = ""
    vhost: str = ""
    refused: int = 0


class Timers(Protocol):
    """One timer per session key, run by the shell (server/mqtt/timers.py), which
    calls back when it runs out; starting one replaces the key's last."""

    def start(self, key: Key, delay: float) -> None: ...

    def stop(self, key: Key) -> None: ...


def queue_name(client_id: str, qos: int) -> str:
    """RabbitMQ's name for a session's subscription queue (at most 255 bytes: the
    protocol layer refuses longer client ids)."""
    return session_queue_name(client_id, qos)


def refused(exc: AMQPError) -> bool:
    """Was a command refused for want of permission (403)?"""
    return exc.reply_code == 403


#: a larger body is encoded per subscriber: the shared copy would keep it in
#: memory after its deliveries (at most this much, twice, is kept)
SHARED_BODY_MAX = 65_536


class SharedPublish:
    """The topic and QoS 0 PUBLISH of the message being delivered, kept for the
    next subscriber of the same message: a fan-out to 1,000 subscribers maps the
    routing key and encodes the PUBLISH once per protocol generation (3.1/3.1.1,
    5.0), not 1,000 times. Only a packet every subscriber gets the same is shared
    (QoS 0, retain 0, no properties, no topic alias: ``MQTTSession.deliver``
    decides). Holds the last message only, and only a small one."""

    __slots__ = ("message", "topic", "v4", "v5")

    def __init__(self) -> None:
        self.message: Any = None
        self.topic = ""
        self.v4: bytes | None = None
        self.v5: bytes | None = None

    def topic_of(self, message: Any) -> str:
        """The MQTT topic of ``message`` (the last message's, kept)."""
        if message is not self.message:
            self.topic = routing_key_to_topic(message.routing_key)
            self.v4 = self.v5 = None
            body = message.body
            # held by reference, so ``is`` above never meets a reused address
            self.message = message if body is not None and len(body) <= SHARED_BODY_MAX else None
        return self.topic

    def packet(self, message: Any, topic: str, version: int) -> bytes:
        """``message``'s QoS 0 PUBLISH on ``topic`` without properties, after
        ``topic_of(message)``: encoded once per generation while it is the last."""
        v5 = version >= MQTT_5
        if message is not self.message:
            return encode_publish(Publish(topic, bytes(message.body)), version)
        data = self.v5 if v5 else self.v4
        if data is None:
            data = encode_publish(Publish(topic, bytes(message.body)), version)
            if v5:
                self.v5 = data
            else:
                self.v4 = data
        return data
