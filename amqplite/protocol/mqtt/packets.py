"""The fifteen MQTT control packets as frozen attrs records, and their codec.

``encode(packet, version)`` gives the exact bytes for protocol level 3
(MQTT 3.1), 4 (3.1.1) or 5; levels 3 and 4 have no properties and no reason
codes, so those fields are ignored there (the same record can be sent to any
client). ``decode_body`` is the inverse for one packet whose fixed header has
been read; :class:`amqplite.protocol.mqtt.decoder.Decoder` frames the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.datatypes import (
    encode_bin,
    encode_str,
    encode_varint,
    pack_u16,
    read_bin,
    read_str,
    read_u8,
    read_u16,
    unpack_u16,
)
from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode, malformed, protocol_error
from amqplite.protocol.mqtt.properties import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    EMPTY,
    PINGREQ,
    PINGRESP,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    WILL,
    Properties,
    decode_properties,
    encode_properties,
)
from amqplite.protocol.mqtt.topics import validate_topic_name

__all__ = [
    "AUTH", "CONNACK", "CONNECT", "DISCONNECT", "PINGREQ", "PINGRESP", "PUBACK", "PUBCOMP",
    "PUBLISH", "PUBREC", "PUBREL", "SUBACK", "SUBSCRIBE", "UNSUBACK", "UNSUBSCRIBE",
    "Auth", "ConnAck", "Connect", "Disconnect", "Packet", "PingReq", "PingResp", "PubAck",
    "PubComp", "PubRec", "PubRel", "Publish", "SubAck", "Subscribe", "Subscription",
    "UnsubAck", "Unsubscribe", "Will", "decode_body", "encode",
]  # fmt: skip

MQTT_31, MQTT_311, MQTT_5 = 3, 4, 5
VERSIONS = (MQTT_31, MQTT_311, MQTT_5)
PROTOCOL_NAMES = {MQTT_31: "MQIsdp", MQTT_311: "MQTT", MQTT_5: "MQTT"}

# The packet classes are Python classes (native_class=False) in the compiled build,
# built by attrs; the codec functions compile. A compiled class body lists every
# class attribute in ``__annotations__``, where attrs would take ``TYPE`` for a
# field: ``packet_type`` sets it after attrs has built the class.
# The classes of every message (Publish and its acknowledgements) are not frozen:
# a frozen class's __init__ sets each field through object.__setattr__ (4x the
# time); they are hashable by value as the frozen ones, and never changed.
_P = TypeVar("_P", bound="_Packet")


@mypyc_attr(native_class=False)
class _Packet:
    __slots__ = ()
    #: the fixed header's packet type
    TYPE: ClassVar[int] = 0


def packet_type(ptype: int) -> Callable[[type[_P]], type[_P]]:
    """Class decorator: the packet class's ``TYPE``."""

    def mark(cls: type[_P]) -> type[_P]:
        cls.TYPE = ptype
        return cls

    return mark


@mypyc_attr(native_class=False)
@attrs.frozen
class Will:
    """The will message of a CONNECT (MQTT 5 will properties included)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY


@packet_type(CONNECT)
@mypyc_attr(native_class=False)
@attrs.frozen
class Connect(_Packet):
    client_id: str
    protocol_level: int = MQTT_311
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY


@packet_type(CONNACK)
@mypyc_attr(native_class=False)
@attrs.frozen
class ConnAck(_Packet):
    session_present: bool = False
    reason_code: int = 0  # a 3.1.1 return code (0-5) when encoded for levels 3/4
    properties: Properties = EMPTY


@packet_type(PUBLISH)
@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class Publish(_Packet):
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = EMPTY


@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class _PublishAck(_Packet):
    """PUBACK, PUBREC, PUBREL and PUBCOMP share one layout; the class is the type."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY


@packet_type(PUBACK)
@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class PubAck(_PublishAck):
    pass


@packet_type(PUBREC)
@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class PubRec(_PublishAck):
    pass


@packet_type(PUBREL)
@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class PubRel(_PublishAck):
    pass


@packet_type(PUBCOMP)
@mypyc_attr(native_class=False)
@attrs.define(unsafe_hash=True)  # per message: see above
class PubComp(_PublishAck):
    pass


@mypyc_attr(native_class=False)
@attrs.frozen
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (only ``qos`` before MQTT 5)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@packet_type(SUBSCRIBE)
@mypyc_attr(native_class=False)
@attrs.frozen
class Subscribe(_Packet):
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = EMPTY


@packet_type(SUBACK)
@mypyc_attr(native_class=False)
@attrs.frozen
class SubAck(_Packet):
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = EMPTY


@packet_type(UNSUBSCRIBE)
@mypyc_attr(native_class=False)
@attrs.frozen
class Unsubscribe(_Packet):
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = EMPTY


@packet_type(UNSUBACK)
@mypyc_attr(native_class=False)
@attrs.frozen
class UnsubAck(_Packet):
    packet_id: int
    reason_codes: tuple[int, ...] = ()  # MQTT 5 only
    properties: Properties = EMPTY


@packet_type(PINGREQ)
@mypyc_attr(native_class=False)
@attrs.frozen
class PingReq(_Packet):
    pass


@packet_type(PINGRESP)
@mypyc_attr(native_class=False)
@attrs.frozen
class PingResp(_Packet):
    pass


@packet_type(DISCONNECT)
@mypyc_attr(native_class=False)
@attrs.frozen
class Disconnect(_Packet):
    reason_code: int = 0
    properties: Properties = EMPTY


@packet_type(AUTH)
@mypyc_attr(native_class=False)
@attrs.frozen
class Auth(_Packet):
    """MQTT 5 only (enhanced authentication)."""

    reason_code: int = 0
    properties: Properties = EMPTY


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)
_Ack = PubAck | PubRec | PubRel | PubComp
_ACK_CLASSES: dict[int, type[_Ack]] = {PUBACK: PubAck, PUBREC: PubRec, PUBREL: PubRel, PUBCOMP: PubComp}

# The reason codes each MQTT 5 packet may carry (section 3.x.2.1); others are a protocol error.
_RC_PUB = frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99})
VALID_REASON_CODES: dict[int, frozenset[int]] = {
    CONNACK: frozenset(
        {0x00, *range(0x80, 0x8B), 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}
    ),
    PUBACK: _RC_PUB,
    PUBREC: _RC_PUB,
    PUBREL: frozenset({0x00, 0x92}),
    PUBCOMP: frozenset({0x00, 0x92}),
    SUBACK: frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    UNSUBACK: frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    DISCONNECT: frozenset(
        {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, *range(0x93, 0xA3)}
    ),
    AUTH: frozenset({0x00, 0x18, 0x19}),
}
SUBACK_311 = frozenset({0x00, 0x01, 0x02, 0x80})


# ---------------------------------------------------------------- encoding


def _frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + encode_varint(len(body)) + body


def _ack_tail(reason_code: int, props: Properties, version: int) -> bytes:
    """Reason code and properties of acks, DISCONNECT and AUTH, shortest form (3.4.2.1)."""
    if version < MQTT_5 or (reason_code == 0 and not props):
        return b""
    if not props:
        return bytes((reason_code,))
    return bytes((reason_code,)) + encode_properties(props)


def encode_publish(p: Publish, version: int) -> bytes:
    """PUBLISH, the hot path: one join, no intermediate frames."""
    first = 0x30 | (p.qos << 1) | (0x08 if p.dup else 0) | (0x01 if p.retain else 0)
    topic = p.topic.encode("utf-8")
    parts = [pack_u16(len(topic)), topic]
    if p.qos:
        if p.packet_id is None:
            raise ValueError("QoS 1/2 PUBLISH needs a packet id")
        parts.append(pack_u16(p.packet_id))
    if version >= MQTT_5:
        parts.append(encode_properties(p.properties))
    parts.append(p.payload)
    body = b"".join(parts)
    return bytes((first,)) + encode_varint(len(body)) + body


def encode(packet: Packet, version: int = MQTT_311) -> bytes:
    """The bytes of ``packet`` for protocol level ``version`` (3, 4 or 5)."""
    v5 = version >= MQTT_5
    if isinstance(packet, Publish):
        return encode_publish(packet, version)
    if isinstance(packet, _PublishAck):
        first = (packet.TYPE << 4) | (0x02 if packet.TYPE == PUBREL else 0)
        return _frame(
            first, pack_u16(packet.packet_id) + _ack_tail(packet.reason_code, packet.properties, version)
        )
    if isinstance(packet, Connect):
        return _frame(0x10, _connect_body(packet))
    if isinstance(packet, ConnAck):
        flags = 1 if packet.session_present and version > MQTT_31 else 0
        body = bytes((flags, packet.reason_code))
        return _frame(0x20, body + encode_properties(packet.properties) if v5 else body)
    if isinstance(packet, Subscribe):
        parts = [pack_u16(packet.packet_id)]
        if v5:
            parts.append(encode_properties(packet.properties))
        for sub in packet.subscriptions:
            options = sub.qos
            if v5:
                options |= (
                    (0x04 if sub.no_local else 0)
                    | (0x08 if sub.retain_as_published else 0)
                    | (sub.retain_handling << 4)
                )
            parts += [encode_str(sub.topic_filter), bytes((options,))]
        return _frame(0x82, b"".join(parts))
    if isinstance(packet, SubAck):
        props = encode_properties(packet.properties) if v5 else b""
        return _frame(0x90, pack_u16(packet.packet_id) + props + bytes(packet.reason_codes))
    if isinstance(packet, Unsubscribe):
        parts = [pack_u16(packet.packet_id)]
        if v5:
            parts.append(encode_properties(packet.properties))
        parts += [encode_str(f) for f in packet.topic_filters]
        return _frame(0xA2, b"".join(parts))
    if isinstance(packet, UnsubAck):
        if not v5:
            return _frame(0xB0, pack_u16(packet.packet_id))
        body = pack_u16(packet.packet_id) + encode_properties(packet.properties) + bytes(packet.reason_codes)
        return _frame(0xB0, body)
    if isinstance(packet, PingReq):
        return b"\xc0\x00"
    if isinstance(packet, PingResp):
        return b"\xd0\x00"
    if isinstance(packet, Disconnect):
        return _frame(0xE0, _ack_tail(packet.reason_code, packet.properties, version))
    if isinstance(packet, Auth):
        if not v5:
            raise ValueError("AUTH exists only in MQTT 5")
        return _frame(0xF0, _ack_tail(packet.reason_code, packet.properties, version))
    raise TypeError(f"not an MQTT packet: {packet!r}")


def _connect_body(c: Connect) -> bytes:
    version = c.protocol_level
    v5 = version >= MQTT_5
    flags = 0x02 if c.clean_start else 0
    will = c.will
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if c.password is not None:
        flags |= 0x40
    if c.username is not None:
        flags |= 0x80
    parts = [encode_str(PROTOCOL_NAMES.get(version, "MQTT")), bytes((version, flags)), pack_u16(c.keep_alive)]
    if v5:
        parts.append(encode_properties(c.properties))
    parts.append(encode_str(c.client_id))
    if will is not None:
        if v5:
            parts.append(encode_properties(will.properties))
        parts += [encode_str(will.topic), encode_bin(will.payload)]
    if c.username is not None:
        parts.append(encode_str(c.username))
    if c.password is not None:
        parts.append(encode_bin(c.password))
    return b"".join(parts)


# ---------------------------------------------------------------- decoding

def _packet_id(buf: memoryview, pos: int, end: int, packet_type: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise malformed("truncated packet identifier", packet_type)
    pid = unpack_u16(buf, pos)[0]
    if pid == 0:
        # [MQTT-2.2.1-3] (3.1.1: [MQTT-2.3.1-1]) packet identifiers are non-zero
        raise protocol_error("packet identifier 0", packet_type)
    return pid, pos + 2


def decode_publish(flags: int, buf: memoryview, pos: int, end: int, version: int) -> Publish:
    """PUBLISH body (the hot path: slices, no per-byte loop)."""
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise malformed("PUBLISH with QoS 3", PUBLISH)  # [MQTT-3.3.1-4]
    dup = bool(flags & 0x08)
    if dup and not qos:
        raise malformed("DUP set on a QoS 0 PUBLISH", PUBLISH)  # [MQTT-3.3.1-2]
    if pos + 2 > end:
        raise malformed("truncated topic", PUBLISH)
    tlen = unpack_u16(buf, pos)[0]
    pos += 2
    if pos + tlen > end:
        raise malformed("topic length runs past the end of the packet", PUBLISH)
    try:
        topic = str(buf[pos : pos + tlen], "utf-8")
    except UnicodeDecodeError:
        raise malformed("topic is not well-formed UTF-8", PUBLISH) from None
    pos += tlen
    if "\x00" in topic:
        raise malformed("topic contains U+0000", PUBLISH)  # [MQTT-1.5.4-2]
    validate_topic_name(topic, PUBLISH, allow_empty=version >= MQTT_5)
    packet_id = None
    if qos:
        packet_id, pos = _packet_id(buf, pos, end, PUBLISH)
    props = EMPTY
    if version >= MQTT_5:
        if pos < end and buf[pos] == 0:
            pos += 1
        else:
            props, pos = decode_properties(buf, pos, end, PUBLISH)
    return Publish(topic, bytes(buf[pos:end]), qos, bool(flags & 0x01), dup, packet_id, props)


def _check_rc(packet_type: int, code: int, version: int) -> int:
    if version >= MQTT_5 and code not in VALID_REASON_CODES[packet_type]:
        raise protocol_error(f"reason code 0x{code:02x} not valid here", packet_type)
    return code


def _decode_ack(ptype: int, buf: memoryview, pos: int, end: int, version: int) -> _Ack:
    pid, pos = _packet_id(buf, pos, end, ptype)
    rc = 0
    props = EMPTY
    if version < MQTT_5:
        if pos != end:
            raise malformed("acknowledgement longer than 2 bytes", ptype)
    elif pos < end:
        rc = _check_rc(ptype, buf[pos], version)
        pos += 1
        if pos < end:
            props, pos = decode_properties(buf, pos, end, ptype)
    _end(pos, end, ptype)
    return _ACK_CLASSES[ptype](pid, rc, props)


def _end(pos: int, end: int, ptype: int) -> None:
    if pos != end:
        raise malformed("bytes left over at the end of the packet", ptype)


def decode_connect_header(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Protocol name and level: returns (level, offset); 0x84 for anything unknown
    ([MQTT-3.1.2-1], [MQTT-3.1.2-2])."""
    name, pos = read_str(buf, pos, end)
    level, pos = read_u8(buf, pos, end)
    if level not in VERSIONS or PROTOCOL_NAMES[level] != name:
        raise MQTTError(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, f"unsupported protocol {name!r} level {level}", CONNECT
        )
    return level, pos


def _decode_connect(buf: memoryview, pos: int, end: int) -> Connect:
    version, pos = decode_connect_header(buf, pos, end)
    v5 = version >= MQTT_5
    flags, pos = read_u8(buf, pos, end)
    if flags & 0x01:
        raise malformed("CONNECT reserved flag set", CONNECT)  # [MQTT-3.1.2-3]
    will_flag = bool(flags & 0x04)
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if not will_flag and (will_qos or will_retain):
        raise malformed("will QoS/retain without a will", CONNECT)  # [MQTT-3.1.2-11], [MQTT-3.1.2-13]
    if will_qos == 3:
        raise malformed("will QoS 3", CONNECT)  # [MQTT-3.1.2-12]
    has_user, has_password = bool(flags & 0x80), bool(flags & 0x40)
    if has_password and not has_user and not v5:
        raise malformed("password without a user name", CONNECT)  # [MQTT-3.1.2-22] (3.1.1)
    keep_alive, pos = read_u16(buf, pos, end)
    props = EMPTY
    if v5:
        props, pos = decode_properties(buf, pos, end, CONNECT)
    client_id, pos = read_str(buf, pos, end)  # [MQTT-3.1.3-3]
    will = None
    if will_flag:
        will_props = EMPTY
        if v5:
            will_props, pos = decode_properties(buf, pos, end, WILL)
        will_topic, pos = read_str(buf, pos, end)
        validate_topic_name(will_topic, CONNECT)
        will_payload, pos = read_bin(buf, pos, end)
        will = Will(will_topic, will_payload, will_qos, will_retain, will_props)
    username = password = None
    if has_user:
        username, pos = read_str(buf, pos, end)
    if has_password:
        password, pos = read_bin(buf, pos, end)
    _end(pos, end, CONNECT)
    return Connect(client_id, version, bool(flags & 0x02), keep_alive, username, password, will, props)


def _decode_subscribe(buf: memoryview, pos: int, end: int, version: int) -> Subscribe:
    pid, pos = _packet_id(buf, pos, end, SUBSCRIBE)
    v5 = version >= MQTT_5
    props = EMPTY
    if v5:
        props, pos = decode_properties(buf, pos, end, SUBSCRIBE)
    subs = []
    while pos < end:
        topic_filter, pos = read_str(buf, pos, end)
        options, pos = read_u8(buf, pos, end)
        qos = options & 0x03
        if qos == 3:
            raise malformed("subscription QoS 3", SUBSCRIBE)  # [MQTT-3.8.3-4] (3.1.1)
        if options & (0xC0 if v5 else 0xFC):
            raise malformed("reserved subscription option bits set", SUBSCRIBE)  # [MQTT-3.8.3-5]
        retain_handling = (options >> 4) & 0x03
        if retain_handling == 3:
            raise protocol_error("retain handling 3", SUBSCRIBE)
        subs.append(
            Subscription(topic_filter, qos, bool(options & 0x04), bool(options & 0x08), retain_handling)
        )
    if not subs:
        # [MQTT-3.8.3-2] (5.0), [MQTT-3.8.3-3] (3.1.1): at least one topic filter
        raise (protocol_error if v5 else malformed)("SUBSCRIBE without a topic filter", SUBSCRIBE)
    return Subscribe(pid, tuple(subs), props)


def _decode_unsubscribe(buf: memoryview, pos: int, end: int, version: int) -> Unsubscribe:
    pid, pos = _packet_id(buf, pos, end, UNSUBSCRIBE)
    v5 = version >= MQTT_5
    props = EMPTY
    if v5:
        props, pos = decode_properties(buf, pos, end, UNSUBSCRIBE)
    filters = []
    while pos < end:
        topic_filter, pos = read_str(buf, pos, end)
        filters.append(topic_filter)
    if not filters:
        # [MQTT-3.10.3-2]: at least one topic filter
        raise (protocol_error if v5 else malformed)("UNSUBSCRIBE without a topic filter", UNSUBSCRIBE)
    return Unsubscribe(pid, tuple(filters), props)


def _decode_suback(ptype: int, buf: memoryview, pos: int, end: int, version: int) -> SubAck | UnsubAck:
    pid, pos = _packet_id(buf, pos, end, ptype)
    v5 = version >= MQTT_5
    props = EMPTY
    if v5:
        props, pos = decode_properties(buf, pos, end, ptype)
    codes = tuple(buf[pos:end])
    if ptype == UNSUBACK:
        if not v5:
            _end(pos, end, ptype)
            return UnsubAck(pid)
        for code in codes:
            _check_rc(ptype, code, version)
        return UnsubAck(pid, codes, props)
    if not codes:
        raise malformed("SUBACK without reason codes", ptype)
    for code in codes:
        if v5:
            _check_rc(ptype, code, version)
        elif code not in SUBACK_311:
            raise malformed(f"SUBACK return code 0x{code:02x}", ptype)
    return SubAck(pid, codes, props)


def _decode_tail(ptype: int, buf: memoryview, pos: int, end: int, version: int) -> Disconnect | Auth:
    if version < MQTT_5:
        if ptype == AUTH:
            raise malformed("AUTH before MQTT 5", ptype)
        _end(pos, end, ptype)  # [MQTT-3.14.1-1] 3.1.1 DISCONNECT has no body
        return Disconnect()
    rc = 0
    props = EMPTY
    if pos < end:
        rc = _check_rc(ptype, buf[pos], version)
        pos += 1
        if pos < end:
            props, pos = decode_properties(buf, pos, end, ptype)
    _end(pos, end, ptype)
    return Disconnect(rc, props) if ptype == DISCONNECT else Auth(rc, props)


def decode_body(first: int, buf: memoryview, pos: int, end: int, version: int) -> Packet:
    """Decode one packet whose fixed header byte is ``first`` and body is ``buf[pos:end]``."""
    ptype = first >> 4
    flags = first & 0x0F
    if ptype == PUBLISH:
        return decode_publish(flags, buf, pos, end, version)
    if ptype == 0 or (ptype == AUTH and version < MQTT_5):
        raise malformed(f"reserved packet type {ptype}", ptype)
    if flags != (0x02 if ptype in (PUBREL, SUBSCRIBE, UNSUBSCRIBE) else 0):
        # [MQTT-2.1.3-1] (5.0), [MQTT-2.2.2-1] and [MQTT-2.2.2-2] (3.1.1): reserved flags as listed
        raise malformed(f"invalid fixed header flags 0x{flags:x}", ptype)
    if PUBACK <= ptype <= PUBCOMP:
        return _decode_ack(ptype, buf, pos, end, version)
    if ptype == CONNECT:
        return _decode_connect(buf, pos, end)
    if ptype == SUBSCRIBE:
        return _decode_subscribe(buf, pos, end, version)
    if ptype == UNSUBSCRIBE:
        return _decode_unsubscribe(buf, pos, end, version)
    if ptype in (SUBACK, UNSUBACK):
        return _decode_suback(ptype, buf, pos, end, version)
    if ptype in (PINGREQ, PINGRESP):
        _end(pos, end, ptype)
        return PingReq() if ptype == PINGREQ else PingResp()
    if ptype == CONNACK:
        flags_byte, pos = read_u8(buf, pos, end)
        if flags_byte & 0xFE:
            raise malformed("CONNACK reserved flags set", ptype)
        rc, pos = read_u8(buf, pos, end)
        props = EMPTY
        if version >= MQTT_5:
            _check_rc(ptype, rc, version)
            props, pos = decode_properties(buf, pos, end, ptype)
        elif rc > 5:
            raise malformed(f"CONNACK return code {rc}", ptype)
        _end(pos, end, ptype)
        return ConnAck(bool(flags_byte & 1), rc, props)
    return _decode_tail(ptype, buf, pos, end, version)
