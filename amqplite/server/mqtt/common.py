"""Names and constants the MQTT shell's modules share."""

from __future__ import annotations

from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.connection import ServerLimits
from amqplite.protocol.properties import BasicProperties, encode_properties

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
#: AMQP properties of an MQTT message by its QoS: QoS 1/2 are persistent
PROPS = {0: encode_properties(BasicProperties(delivery_mode=1)),
         1: encode_properties(BasicProperties(delivery_mode=2)),
         2: encode_properties(BasicProperties(delivery_mode=2))}


def queue_name(client_id: str, qos: int) -> str:
    """RabbitMQ's name for a session's subscription queue."""
    return f"mqtt-subscription-{client_id}qos{qos}"


def refused(exc: AMQPError) -> bool:
    """Was a command refused for want of permission (403)?"""
    return exc.reply_code == 403
