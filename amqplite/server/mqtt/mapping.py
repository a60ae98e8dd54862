"""MQTT 5 message properties <-> AMQP properties, both ways (docs/mqtt.md).

A publish without MQTT 5 properties gets one of the precomputed ``PROPS``
(nothing is encoded per message); a delivery of such a message sends none.

| MQTT 5 | AMQP 0-9-1 |
|---|---|
| QoS | delivery mode (2 for QoS 1/2) and header ``x-mqtt-publish-qos`` |
| retain flag | header ``x-mqtt-retain`` (for Retain As Published) |
| Message Expiry Interval (s) | ``expiration`` (ms, the queues' TTL drops it) and ``timestamp`` |
| Content Type | ``content_type`` |
| Response Topic | ``reply_to``, as a routing key (``/`` -> ``.``) |
| Correlation Data | ``correlation_id`` (UTF-8, up to 255 bytes), else header ``x-correlation-data`` |
| Payload Format Indicator | header ``x-mqtt-payload-format-indicator`` |
| User Properties | headers (string values) |
"""

from __future__ import annotations

import math
import time
from typing import Any

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.topics import routing_key_to_topic, topic_to_routing_key
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.server.mqtt.common import PROPS, PUBLISH_QOS

RETAIN = "x-mqtt-retain"
PAYLOAD_FORMAT = "x-mqtt-payload-format-indicator"
CORRELATION = "x-correlation-data"
#: the precomputed properties: a message carrying one of them maps to no MQTT property
PLAIN = frozenset(PROPS.values())


def amqp_properties(qos: int, props: Properties = EMPTY, retain: bool = False) -> bytes:
    """The AMQP properties of an MQTT publish (or will), published now."""
    if not retain and (props is EMPTY or not props):
        return PROPS[qos]
    headers = FieldTable({PUBLISH_QOS: qos})
    if retain:
        headers[RETAIN] = True
    for name, value in props.user_properties:
        headers[name] = value  # a repeated name keeps its last value (a table has one)
    if props.payload_format_indicator is not None:
        headers[PAYLOAD_FORMAT] = props.payload_format_indicator
    correlation_id = None
    data = props.correlation_data
    if data is not None:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = None
        if text is not None and len(data) <= 255:
            correlation_id = text
        else:
            headers[CORRELATION] = bytes(data)
    expiry = props.message_expiry_interval
    return encode_properties(BasicProperties(
        content_type=props.content_type,
        headers=headers,
        delivery_mode=2 if qos else 1,
        correlation_id=correlation_id,
        reply_to=(topic_to_routing_key(props.response_topic)
                  if props.response_topic is not None else None),
        expiration=str(expiry * 1000) if expiry is not None else None,
        timestamp=int(time.time()) if expiry is not None else None,
    ))


def mqtt_properties(raw: bytes, now: float) -> tuple[Properties, bool]:
    """The MQTT 5 properties of a delivery at ``now``, and whether it was published
    retained. The expiry sent is what is left of it ([MQTT-3.3.2-6])."""
    if raw in PLAIN:
        return EMPTY, False
    p = decode_properties(raw)
    headers: dict[str, Any] = p.headers or {}
    user = tuple((k, v) for k, v in headers.items()
                 if isinstance(v, str) and not k.startswith("x-mqtt-"))
    fmt = headers.get(PAYLOAD_FORMAT)
    correlation = headers.get(CORRELATION)
    if p.correlation_id is not None:
        correlation = p.correlation_id.encode()
    elif not isinstance(correlation, bytes | bytearray):
        correlation = None
    left = _left(p, now)
    expiry = None if left is None else max(1, math.ceil(left))
    props = Properties(
        payload_format_indicator=fmt if fmt in (0, 1) else None,
        message_expiry_interval=expiry,
        content_type=p.content_type,
        response_topic=routing_key_to_topic(p.reply_to) if p.reply_to else None,
        correlation_data=bytes(correlation) if correlation is not None else None,
        user_properties=user,
    )
    return props, bool(headers.get(RETAIN))


def _left(p: BasicProperties, now: float) -> float | None:
    """Seconds left of a message's expiry (negative: expired), None: it has none."""
    if p.expiration is None:
        return None
    try:
        total = int(p.expiration) / 1000
    except ValueError:
        return None
    waited = now - p.timestamp if p.timestamp is not None else 0.0
    return total - max(0.0, waited)


def expired(raw: bytes, now: float) -> bool:
    """Has the message's expiry passed (a retained message keeps its AMQP
    ``expiration`` but no queue drops it)?"""
    if raw in PLAIN:
        return False
    left = _left(decode_properties(raw), now)
    return left is not None and left <= 0
