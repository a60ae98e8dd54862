"""Names and constants the MQTT shell's modules share."""

from __future__ import annotations

import attrs

from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import ServerLimits
from amqplite.protocol.mqtt.mapping import PUBLISH_QOS
from amqplite.protocol.properties import delivery_mode_of, headers_of

RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0
#: what this shell offers, advertised to MQTT 5 clients in the CONNACK
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


def queue_name(client_id: str, qos: int) -> str:
    """RabbitMQ's name for a session's subscription queue."""
    return f"mqtt-subscription-{client_id}qos{qos}"


def refused(exc: AMQPError) -> bool:
    """Was a command refused for want of permission (403)?"""
    return exc.reply_code == 403


def message_qos(props: bytes) -> int:
    """The QoS a message was published with: the header of an MQTT publish, else
    (an AMQP publish) 1 when persistent, 0 when not."""
    headers = headers_of(props)
    qos = headers.get(PUBLISH_QOS) if headers else None
    if isinstance(qos, int) and 0 <= qos <= 2:
        return qos
    return 1 if delivery_mode_of(props) == 2 else 0
