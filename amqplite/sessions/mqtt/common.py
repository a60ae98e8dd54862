"""Names and constants the MQTT session rules and their shell share."""

from __future__ import annotations

from typing import Protocol

import attrs

from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import ServerLimits
from amqplite.protocol.mqtt.subscriptions import session_queue_name

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
