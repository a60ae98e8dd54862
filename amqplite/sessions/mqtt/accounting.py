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

import attrs

#: protocol level -> the ``protocol`` label rabbitmq_prometheus (3.13) gives MQTT
PROTOCOL_LABELS = {3: "mqtt310", 4: "mqtt311", 5: "mqtt50"}


def label(version: int) -> str:
    return PROTOCOL_LABELS.get(version, "mqtt311")


def log_protocol(version: int) -> str:
    """The delivery log's ``protocol`` of a session at this MQTT protocol level."""
    return {3: "mqtt-3.1", 5: "mqtt-5.0"}.get(version, "mqtt-3.1.1")


@attrs.define
class MQTTStats:
    """Counters since start; the session registry owns one, its sessions bump it."""

    #: PUBLISH packets routed into the broker (wills included), by protocol label
    received: Counter[str] = attrs.field(factory=Counter)
    #: messages the core delivered to MQTT sessions from their queues, by label
    delivered: Counter[str] = attrs.field(factory=Counter)
    #: CONNECTs accepted, and sessions of those that ended
    opened: int = 0
    closed: int = 0
    #: CONNECTs refused because the node's ``max_connections`` was reached
    refused_at_limit: int = 0
    #: bytes read from and written to MQTT connections that have ended (the live
    #: ones keep their own counts; ``$SYS/broker/bytes/...`` adds the two)
    bytes_received: int = 0
    bytes_sent: int = 0
