"""What an MQTTConnection hands the shell: plain records, one per client action."""

from __future__ import annotations

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.packets import Auth, Connect, Publish
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from amqplite.protocol.mqtt.topics import SubscriptionFilter


@mypyc_attr(native_class=False)
@attrs.frozen
class ConnectReceived:
    """A valid CONNECT. The shell authenticates, then calls ``accept`` or ``reject``;
    no further event is produced until it does. ``client_id`` is the one the
    server assigned when the client sent an empty one (``assigned``)."""

    connect: Connect
    client_id: str
    assigned: bool


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: not frozen (packets.py)
class PublishReceived:
    """An application message. ``publish.topic`` is resolved (topic alias applied);
    QoS 1/2 wait for ``ack_publish(packet_id)`` (PUBACK/PUBREC) from the shell."""

    publish: Publish


@mypyc_attr(native_class=False)
@attrs.frozen
class SubscribeRequest:
    """One filter of a SUBSCRIBE: ``reason_code`` is 0 when it is acceptable, else
    the SUBACK code it must get (0x8F invalid filter, 0x9E/0xA2 unsupported; 3.1.1
    clients see 0x80). ``parsed`` splits off a ``$share/{group}/`` prefix."""

    topic_filter: str  # as sent, ``$share/...`` included
    parsed: SubscriptionFilter | None
    qos: int
    no_local: bool
    retain_as_published: bool
    retain_handling: int
    reason_code: int = 0


@mypyc_attr(native_class=False)
@attrs.frozen
class SubscribeReceived:
    """SUBSCRIBE: answer with ``send_suback(packet_id, codes)`` in the same order."""

    packet_id: int
    requests: tuple[SubscribeRequest, ...]
    subscription_identifier: int | None = None
    properties: Properties = EMPTY


@mypyc_attr(native_class=False)
@attrs.frozen
class UnsubscribeReceived:
    """UNSUBSCRIBE: answer with ``send_unsuback(packet_id, codes)``. ``parsed`` has one
    entry per filter, None where the filter is invalid (answer 0x8F)."""

    packet_id: int
    topic_filters: tuple[str, ...]
    parsed: tuple[SubscriptionFilter | None, ...] = ()
    properties: Properties = EMPTY


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: not frozen (packets.py)
class PubAckReceived:
    """The client acknowledged our QoS 1 PUBLISH ``packet_id`` (the id is free again)."""

    packet_id: int
    reason_code: int = 0


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: not frozen (packets.py)
class PubRecReceived:
    """The client received our QoS 2 PUBLISH; PUBREL went out (unless ``reason_code``
    >= 0x80, which ends the flow and frees the id)."""

    packet_id: int
    reason_code: int = 0


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: not frozen (packets.py)
class PubCompReceived:
    """The QoS 2 flow of our PUBLISH ``packet_id`` is complete; the id is free."""

    packet_id: int
    reason_code: int = 0


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: not frozen (packets.py)
class PubRelReceived:
    """The client released inbound QoS 2 ``packet_id``; PUBCOMP went out. The
    session may forget the id (it was delivered once, at PUBLISH time)."""

    packet_id: int
    known: bool = True


@mypyc_attr(native_class=False)
@attrs.frozen
class PingReceived:
    """PINGREQ (PINGRESP already queued)."""


@mypyc_attr(native_class=False)
@attrs.frozen
class AuthReceived:
    """MQTT 5 AUTH during or after an enhanced authentication exchange."""

    auth: Auth


@mypyc_attr(native_class=False)
@attrs.frozen
class DisconnectReceived:
    """The client said goodbye. ``publish_will`` is False for a normal
    disconnect [MQTT-3.14.4-3] and True for reason 0x04 (Disconnect with Will).
    ``session_expiry_interval`` is the value the DISCONNECT changed it to, if any."""

    reason_code: int
    publish_will: bool
    session_expiry_interval: int | None = None
    properties: Properties = EMPTY


@mypyc_attr(native_class=False)
@attrs.frozen
class ProtocolViolation:
    """The client broke a rule: the answer (CONNACK or DISCONNECT with
    ``reason_code`` for MQTT 5, a 3.1.1 CONNACK code where one exists, else
    nothing) is queued; send it, then close the socket. Publish the will."""

    reason_code: int
    message: str


MQTTEvent = (
    ConnectReceived
    | PublishReceived
    | SubscribeReceived
    | UnsubscribeReceived
    | PubAckReceived
    | PubRecReceived
    | PubCompReceived
    | PubRelReceived
    | PingReceived
    | AuthReceived
    | DisconnectReceived
    | ProtocolViolation
)
