"""Which queues keep their stored redelivered flags after an unclean stop: those of
MQTT sessions that were disconnected at the crash (plain values in, ids out)."""

from __future__ import annotations

from amqplite.server.recovery import settled_queues
from amqplite.store import Recovered
from amqplite.storeops import PutMQTTPacketId, PutMQTTSession, PutQueue


def test_only_queues_of_sessions_disconnected_at_the_crash() -> None:
    rec = Recovered()
    rec.queues = [PutQueue(1, "/", "mqtt-subscription-aqos1"),
                  PutQueue(2, "/", "mqtt-subscription-aqos0"),
                  PutQueue(3, "/", "mqtt-subscription-bqos1"),  # b was connected
                  PutQueue(4, "v", "mqtt-subscription-aqos1"),  # a of another vhost
                  PutQueue(5, "/", "mqtt-shared-g-0123456789abcdef"),
                  PutQueue(6, "/", "a")]
    rec.mqtt_sessions = [PutMQTTSession("/", "a", 60, disconnected_at=1000.0),
                         PutMQTTSession("/", "b", 60),
                         PutMQTTPacketId("v", "a", 7, False)]
    assert settled_queues(rec) == {1, 2}
    rec.mqtt_sessions = []
    assert settled_queues(rec) == set()
