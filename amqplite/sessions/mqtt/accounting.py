"""MQTT's share of the node's figures and limits: connections by protocol version,
PUBLISH packets received and messages delivered (for ``/metrics``), the
node-wide ``max_connections`` that AMQP and MQTT clients share, and the
``protocol`` the delivery log records for an MQTT session.

The broker core counts every publish and delivery whatever the protocol; these
counters say how many of them were MQTT's, so ``/metrics`` can split RabbitMQ's
``protocol`` label (``amqp091`` keeps the rest) without counting anything twice.
"""

from __future__ import annotations

from collections import Counter

#: protocol level -> the ``protocol`` label rabbitmq_prometheus (3.13) gives MQTT
PROTOCOL_LABELS = {3: "mqtt310", 4: "mqtt311", 5: "mqtt50"}


def label(version: int) -> str:
    return PROTOCOL_LABELS.get(version, "mqtt311")


def log_protocol(version: int) -> str:
    """The delivery log's ``protocol`` of a session at this MQTT protocol level."""
    return {3: "mqtt-3.1", 5: "mqtt-5.0"}.get(version, "mqtt-3.1.1")


class MQTTStats:
    """Counters since start; the session registry owns one, its sessions bump it.
    A plain class (not attrs): mypyc rejects attrs factory defaults at import."""

    __slots__ = ("bytes_received", "bytes_sent", "closed", "delivered", "opened", "received",
                 "refused_at_limit")

    def __init__(self) -> None:
        #: PUBLISH packets routed into the broker (wills included), by protocol label
        self.received: Counter[str] = Counter()
        #: messages the core delivered to MQTT sessions from their queues, by label
        self.delivered: Counter[str] = Counter()
        #: CONNECTs accepted, and sessions of those that ended
        self.opened = 0
        self.closed = 0
        #: CONNECTs refused because the node's ``max_connections`` was reached
        self.refused_at_limit = 0
        #: bytes read from and written to MQTT connections that have ended (the live
        #: ones keep their own counts; ``$SYS/broker/bytes/...`` adds the two)
        self.bytes_received = 0
        self.bytes_sent = 0
