"""MQTT 5 PUBLISH properties <-> AMQP 0-9-1 basic properties (sans-I/O).

As RabbitMQ 3.13's MQTT plugin converts them for AMQP 0-9-1 (``mc_mqtt``):

=============================  =======================================================
MQTT 5                         AMQP 0-9-1
=============================  =======================================================
QoS 0 / 1, 2                   delivery_mode 1 / 2
Content Type                   content_type (up to 255 bytes; longer is dropped)
Correlation Data               correlation_id when it is UTF-8 without U+0000 and at
                               most 255 bytes, else the header ``x-correlation-id``
Response Topic                 header ``x-reply-to-topic`` (RabbitMQ 3.13) and
                               reply_to (up to 255 bytes), both as an AMQP routing
                               key: an AMQP service answers by publishing to the
                               MQTT exchange with the reply_to it got; back, a
                               reply_to becomes the Response Topic when no
                               ``x-reply-to-topic`` is there
User Property                  headers (string values; the first of a repeated name)
Payload Format Indicator 1     header ``x-mqtt-payload-format-indicator`` (ours:
                               RabbitMQ drops it for 0-9-1; kept so MQTT -> MQTT
                               does not lose it)
Message Expiry Interval (s)    expiration (ms: the queues' TTL drops it) and
                               timestamp; back: what is left of it
the retain flag                header ``x-mqtt-retain`` (for Retain As Published)
the publishing client id       header ``x-mqtt-publisher`` (ours: for No Local)
the publish QoS                header ``x-mqtt-publish-qos`` (RabbitMQ 3.10's)
=============================  =======================================================

Back to MQTT, every other header whose value has a string form becomes a
User Property (numbers and booleans as text; tables, arrays and non-UTF-8
bytes are left out, as RabbitMQ does); ``x-mqtt-*`` headers are ours and not
forwarded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.codec import FieldTable, Timestamp
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.topics import routing_key_to_topic, topic_to_routing_key
from amqplite.protocol.properties import (
    BasicProperties,
    decode_properties,
    delivery_mode_of,
    encode_properties,
    headers_of,
)

PUBLISHER = "x-mqtt-publisher"
#: the QoS an MQTT message was published with (RabbitMQ 3.10's plugin sets it too):
#: a QoS 2 subscription receives QoS 2 only for a message published at QoS 2
PUBLISH_QOS = "x-mqtt-publish-qos"
REPLY_TO_TOPIC = "x-reply-to-topic"
CORRELATION = "x-correlation-id"
PAYLOAD_FORMAT = "x-mqtt-payload-format-indicator"
RETAIN = "x-mqtt-retain"
#: headers that are ours, never forwarded as user properties
_OWN_PREFIX = "x-mqtt-"
_MAX_SHORT = 255
_MAX_STRING = 65_535


def message_qos(props: bytes) -> int:
    """The QoS a message was published with: the header of an MQTT publish, else
    (an AMQP publish) 1 when persistent, 0 when not."""
    headers = headers_of(props)
    qos = headers.get(PUBLISH_QOS) if headers else None
    if isinstance(qos, int) and 0 <= qos <= 2:
        return qos
    return 1 if delivery_mode_of(props) == 2 else 0


def amqp_properties(qos: int, props: Properties, publisher: str, retain: bool = False,
                    now: float = 0.0) -> bytes:
    """The AMQP basic properties of an MQTT PUBLISH (or will) from ``publisher`` at
    ``now`` (wall clock: the message expiry counts from it)."""
    if not props and not retain:
        return _plain(qos, publisher)
    headers = FieldTable()
    for name, value in props.user_properties:
        if name not in headers and len(name.encode()) <= _MAX_SHORT:
            headers.set(name, value, "S")
    content_type = props.content_type
    if content_type is not None and len(content_type.encode()) > _MAX_SHORT:
        content_type = None
    correlation_id = None
    corr = props.correlation_data
    if corr is not None:
        text = _short_text(corr)
        if text is not None:
            correlation_id = text
        else:
            headers.set(CORRELATION, corr, "S")
    reply_to = None
    if props.response_topic is not None:
        reply_key = topic_to_routing_key(props.response_topic)
        headers.set(REPLY_TO_TOPIC, reply_key, "S")
        if len(reply_key.encode()) <= _MAX_SHORT:
            reply_to = reply_key
    if props.payload_format_indicator == 1:
        headers.set(PAYLOAD_FORMAT, 1, "b")
    if retain:
        headers.set(RETAIN, True, "t")
    headers.set(PUBLISH_QOS, qos, "b")  # last: a user property cannot forge them
    headers.set(PUBLISHER, publisher, "S")
    expiry = props.message_expiry_interval
    return encode_properties(BasicProperties(
        content_type=content_type, headers=headers, delivery_mode=2 if qos else 1,
        correlation_id=correlation_id, reply_to=reply_to,
        expiration=str(expiry * 1000) if expiry is not None else None,
        timestamp=int(now) if expiry is not None else None))


#: the properties of publishes without MQTT 5 properties -> their publisher: most
#: deliveries are of these, and a lookup is much cheaper than a decode
_PLAIN: dict[bytes, str] = {}


@functools.lru_cache(maxsize=65_536)
def _plain(qos: int, publisher: str) -> bytes:
    """A publish without MQTT 5 properties: the same bytes for every one of a client's."""
    headers = FieldTable()
    headers.set(PUBLISH_QOS, qos, "b")
    headers.set(PUBLISHER, publisher, "S")
    raw = encode_properties(BasicProperties(headers=headers, delivery_mode=2 if qos else 1))
    if len(_PLAIN) >= 65_536:
        _PLAIN.clear()
    _PLAIN[raw] = publisher
    return raw


def _short_text(data: bytes) -> str | None:
    if len(data) > _MAX_SHORT or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@mypyc_attr(native_class=False)
@attrs.frozen
class Mapped:
    """What a message's AMQP properties say to MQTT 5 (:func:`mqtt_properties`)."""

    properties: Properties = EMPTY
    #: the MQTT client id that published it (None: AMQP, or unknown)
    publisher: str | None = None
    #: published with the retain flag (for Retain As Published)
    retain: bool = False
    #: expiration in ms and the publish timestamp (s), for the expiry left
    expiration: int | None = None
    timestamp: int | None = None

    def expired(self, now: float) -> bool:
        """Has its expiry passed? A retained message keeps its AMQP ``expiration``
        but no queue drops it: it is not sent after that ([MQTT-3.3.2-5])."""
        if self.expiration is None:
            return False
        waited = now - self.timestamp if self.timestamp is not None else 0.0
        return self.expiration / 1000 - max(0.0, waited) <= 0

    def at(self, now: float) -> Properties:
        """The PUBLISH properties at ``now``: the Message Expiry Interval sent is
        what is left of it ([MQTT-3.3.2-6])."""
        if self.expiration is None:
            return self.properties
        total = math.ceil(self.expiration / 1000)
        waited = now - self.timestamp if self.timestamp is not None else 0.0
        left = max(1, math.ceil(total - max(0.0, waited)))
        return attrs.evolve(self.properties, message_expiry_interval=left)


@functools.lru_cache(maxsize=4096)
def mqtt_properties(raw: bytes) -> Mapped:
    """What a message's AMQP properties map to in MQTT 5. Cached: a fan-out delivers
    one ``raw`` to many sessions."""
    publisher = _PLAIN.get(raw)
    if publisher is not None:
        return Mapped(EMPTY, publisher)
    try:
        p = decode_properties(raw)
    except FrameSyntaxError:  # checked at publish; never expected here
        return Mapped()
    headers: Mapping[str, Any] = p.headers or {}
    sender = headers.get(PUBLISHER)
    user: list[tuple[str, str]] = []
    corr: bytes | None = None
    if p.correlation_id is not None:
        corr = p.correlation_id.encode("utf-8", "surrogateescape")
    response_topic = None
    for name, value in headers.items():
        if name == REPLY_TO_TOPIC:
            if isinstance(value, str):
                response_topic = _response_topic(value)
            continue
        if name.startswith(_OWN_PREFIX):
            continue
        if name == CORRELATION and corr is None and isinstance(value, str | bytes):
            corr = value.encode() if isinstance(value, str) else value
            continue
        text = _as_text(value)
        if text is not None and _mqtt_string(name):
            user.append((name, text))
    if response_topic is None and p.reply_to and not p.reply_to.startswith("amq."):
        response_topic = _response_topic(p.reply_to)  # amq.rabbitmq.reply-to: no topic
    content_type = p.content_type
    if content_type is not None and not _mqtt_string(content_type):
        content_type = None
    if corr is not None and len(corr) > _MAX_STRING:
        corr = None
    fmt = headers.get(PAYLOAD_FORMAT)
    expiration = None
    if p.expiration is not None:
        try:
            expiration = max(0, int(p.expiration))
        except ValueError:
            expiration = None
    props = EMPTY
    if user or content_type is not None or corr is not None or response_topic is not None \
            or fmt == 1:
        props = Properties(
            payload_format_indicator=1 if fmt == 1 else None,
            content_type=content_type,
            response_topic=response_topic,
            correlation_data=corr,
            user_properties=tuple(user),
        )
    return Mapped(props, sender if isinstance(sender, str) else None,
                  bool(headers.get(RETAIN)), expiration,
                  p.timestamp if expiration is not None else None)


def publisher_of(raw: bytes) -> str | None:
    """The MQTT client id that published a message (None: AMQP, or unknown)."""
    return mqtt_properties(raw).publisher


def _response_topic(routing_key: str) -> str | None:
    topic = routing_key_to_topic(routing_key)
    if not topic or "+" in topic or "#" in topic or not _mqtt_string(topic):
        return None  # an AMQP wildcard is no topic name
    return topic


def _mqtt_string(text: str) -> bool:
    """Can ``text`` go out as an MQTT UTF-8 string (no U+0000, no surrogates)?"""
    if "\x00" in text:
        return False
    try:
        return len(text.encode("utf-8")) <= _MAX_STRING
    except UnicodeEncodeError:
        return False


def _as_text(value: Any) -> str | None:
    """A header value's string form for a user property, or None (RabbitMQ's rules)."""
    if isinstance(value, str):
        return value if _mqtt_string(value) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Timestamp):
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return text if _mqtt_string(text) else None
    return None  # tables, arrays, decimals, datetimes
