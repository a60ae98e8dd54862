"""Names and constants the MQTT shell's modules share."""

from __future__ import annotations

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import ServerLimits
from amqplite.protocol.properties import (
    BasicProperties,
    delivery_mode_of,
    encode_properties,
    headers_of,
)

RECV_SIZE = 64 * 1024
#: a client's consumers stop receiving while this much is queued unsent to it
WRITE_HIGH_WATER = 4 * 1024 * 1024
#: after the connection ends, how long the writer may take to send what is queued
FINISH_TIMEOUT = 2.0
#: what this shell does not offer yet (issue 23): advertised to MQTT 5 clients
LIMITS = ServerLimits(shared_subscription_available=False,
                      subscription_identifier_available=False)
#: channel numbers of a client's broker session
PUBLISH_CH, QOS0_CH, QOS1_CH = 1, 2, 3
#: the header with an MQTT message's publish QoS (RabbitMQ's plugin sets it too):
#: a QoS 2 subscription receives QoS 2 only for a message published at QoS 2
PUBLISH_QOS = "x-mqtt-publish-qos"
#: binding arguments of a subscription: its QoS when 2 (QoS 1 and 2 share the qos1
#: queue), and MQTT 5 retain as published
QOS_ARG = "x-mqtt-qos"
RAP_ARG = "x-mqtt-retain-as-published"
#: AMQP properties of an MQTT message by its QoS: QoS 1/2 are persistent
PROPS = {qos: encode_properties(BasicProperties(headers=FieldTable({PUBLISH_QOS: qos}),
                                                delivery_mode=2 if qos else 1))
         for qos in (0, 1, 2)}


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
