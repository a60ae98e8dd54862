"""The MQTT listener: a trio shell on the sans-I/O ``MQTTConnection``, mapped onto
the AMQP core as RabbitMQ's MQTT plugin maps it (docs/mqtt.md).

A client is a broker session with three channels: one in confirm mode for its
PUBLISH (QoS 1/2 are acknowledged when the publisher confirm arrives, i.e.
after the store commit), and one consumer channel for each of its queues
``mqtt-subscription-{clientid}qos0`` (no-ack) and ``...qos1`` (acked by PUBACK,
prefetch = the client's Receive Maximum). Subscriptions are bindings of those
queues to ``mqtt_exchange``. Each connection is its own nursery: a reader,
a writer and a keep-alive task; a crash closes that connection only.

Modules: ``listener`` (accepting, login, the client-id registry, session
expiry), ``client`` (one connection: its tasks, CONNECT, PUBLISH, the broker's
deliveries), ``subscriptions`` (a session's queues and bindings), ``common``.
"""

from amqplite.server.mqtt.client import MQTTClient
from amqplite.server.mqtt.common import LIMITS, PUBLISH_CH, QOS0_CH, QOS1_CH, queue_name
from amqplite.server.mqtt.listener import Login, MQTTListener, run_mqtt

__all__ = ["LIMITS", "PUBLISH_CH", "QOS0_CH", "QOS1_CH", "Login", "MQTTClient",
           "MQTTListener", "queue_name", "run_mqtt"]
