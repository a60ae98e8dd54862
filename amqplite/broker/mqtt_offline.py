"""QoS 0 messages that waited for an offline MQTT session are dropped when it resumes.

An offline persistent session keeps what QoS 1 and 2 subscriptions matched
(its queues are durable, as RabbitMQ's plugin keeps them), but MQTT delivers
a message at min(published QoS, subscription QoS): a QoS 0 delivery is "at
most once", and the issue, like Mosquitto's default (``queue_qos0_messages
false``), asks that QoS 0 to an offline session be dropped. The queues cannot
tell at routing time (a consumer may come back at any moment, and an AMQP
consumer bound to the same exchange must not lose anything), so the session
drops them from its own queues when it resumes, before it consumes. Pure: no
trio, no SQL; the broker's purge bookkeeping (``purge_entries``) writes what the
store must forget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqplite.protocol.mqtt.mapping import message_qos

if TYPE_CHECKING:
    from amqplite.broker.core import Broker
    from amqplite.broker.model import Entry
    from amqplite.broker.queue import Queue

REASON = "mqtt: QoS 0 to an offline session"


def drop_waiting_qos0(broker: Broker, q: Queue, everything: bool) -> int:
    """Drop the ready messages of a resuming session's queue that it would get at
    QoS 0: all of them in its qos0 queue (``everything``), those published at QoS 0
    in its qos1 queue. Messages paged out to the store are left (delivered)."""
    def waiting_at_qos0(e: Entry) -> bool:
        return everything or message_qos(e.message.properties_raw) == 0

    gone = q.ready.remove_where(waiting_at_qos0)
    broker.purge_entries(q, gone, REASON)
    return len(gone)
