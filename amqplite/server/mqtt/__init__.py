"""The MQTT front's trio shell: accept (TCP, TLS, WebSocket), read, write, keep-alive
and the session rules' timers; nothing else. Bytes are the sans-I/O
``protocol/mqtt/`` codec's; the rules (sessions, takeover, wills, in-flight
ids, subscriptions, the mapping onto the AMQP core as RabbitMQ's MQTT plugin
maps it, docs/mqtt.md) are plain objects in ``amqplite/sessions/mqtt/``.
Each connection is its own nursery (server/shell.py's ``ConnectionShell``, as
STOMP's): a reader, a writer and a keep-alive task; a crash closes that
connection only.

Modules: ``listener`` (accepting, login, stored sessions read back, timers),
``client`` (one connection: its tasks, driving its ``MQTTSession``),
``transports`` (TLS, WebSocket, certificate login), ``timers``.
"""

from amqplite.server.mqtt.client import MQTTClient
from amqplite.server.mqtt.listener import MQTTListener, run_mqtt
from amqplite.sessions.mqtt.common import LIMITS, PUBLISH_CH, QOS0_CH, QOS1_CH, Login, queue_name

__all__ = ["LIMITS", "PUBLISH_CH", "QOS0_CH", "QOS1_CH", "Login", "MQTTClient",
           "MQTTListener", "queue_name", "run_mqtt"]
