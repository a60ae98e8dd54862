"""MQTT 5 properties (section 2.2.2): a typed record and its codec.

Properties are encoded in ascending identifier order; user properties keep
their order (a tuple of ``(name, value)`` pairs), as do the subscription
identifiers a server PUBLISH may carry. Which properties a packet may carry is
checked on decode: a property not valid for the packet is malformed, a
duplicate of a single-valued property is a protocol error (section 2.2.2.2).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.mqtt.datatypes import (
    body_varint,
    encode_bin,
    encode_str,
    encode_varint,
    pack_u16,
    pack_u32,
    read_bin,
    read_str,
    read_u8,
    read_u16,
    read_u32,
)
from amqplite.protocol.mqtt.errors import ReasonCode, malformed, protocol_error

# Packet types (section 2.1.2); WILL is a pseudo-type for the will properties.
CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = range(8, 16)
WILL = 0


@mypyc_attr(native_class=False)
@attrs.frozen(repr=False, slots=False)
class Properties:
    """Every MQTT 5 property; ``None`` (or an empty tuple) means absent.

    A dict-backed class (not slots) so the decoder can build one from the few
    properties present with one dict update instead of 27 frozen setattrs
    (:func:`_build`); a PUBLISH rarely carries more than two or three.
    """

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def __bool__(self) -> bool:
        return self is not EMPTY and self != EMPTY

    def __repr__(self) -> str:
        """Only the properties that are present (the record has 27 fields)."""
        shown = ", ".join(
            f"{a.name}={getattr(self, a.name)!r}"
            for a in attrs.fields(Properties)
            if getattr(self, a.name) not in (None, ())
        )
        return f"Properties({shown})"


EMPTY = Properties()
_DEFAULTS = dict(EMPTY.__dict__)
_new = object.__new__


def _build(values: dict[str, Any]) -> Properties:
    """A Properties with ``values`` set and every other field at its default."""
    props: Properties = _new(Properties)
    fields = props.__dict__
    fields.update(_DEFAULTS)
    fields.update(values)
    return props


_ALL_PUB = frozenset({PUBLISH, WILL})
_ACKS = frozenset({PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK})

# id -> (attribute, kind, packets it may appear in, bool-valued)
# kinds: b byte, h u16, i u32, v varint, s string, d binary, p string pair
_SPEC: dict[int, tuple[str, str, frozenset[int]]] = {
    0x01: ("payload_format_indicator", "b", _ALL_PUB),
    0x02: ("message_expiry_interval", "i", _ALL_PUB),
    0x03: ("content_type", "s", _ALL_PUB),
    0x08: ("response_topic", "s", _ALL_PUB),
    0x09: ("correlation_data", "d", _ALL_PUB),
    0x0B: ("subscription_identifiers", "v", frozenset({PUBLISH, SUBSCRIBE})),
    0x11: ("session_expiry_interval", "i", frozenset({CONNECT, CONNACK, DISCONNECT})),
    0x12: ("assigned_client_identifier", "s", frozenset({CONNACK})),
    0x13: ("server_keep_alive", "h", frozenset({CONNACK})),
    0x15: ("authentication_method", "s", frozenset({CONNECT, CONNACK, AUTH})),
    0x16: ("authentication_data", "d", frozenset({CONNECT, CONNACK, AUTH})),
    0x17: ("request_problem_information", "b", frozenset({CONNECT})),
    0x18: ("will_delay_interval", "i", frozenset({WILL})),
    0x19: ("request_response_information", "b", frozenset({CONNECT})),
    0x1A: ("response_information", "s", frozenset({CONNACK})),
    0x1C: ("server_reference", "s", frozenset({CONNACK, DISCONNECT})),
    0x1F: ("reason_string", "s", _ACKS | {CONNACK, DISCONNECT, AUTH}),
    0x21: ("receive_maximum", "h", frozenset({CONNECT, CONNACK})),
    0x22: ("topic_alias_maximum", "h", frozenset({CONNECT, CONNACK})),
    0x23: ("topic_alias", "h", frozenset({PUBLISH})),
    0x24: ("maximum_qos", "b", frozenset({CONNACK})),
    0x25: ("retain_available", "b", frozenset({CONNACK})),
    0x26: ("user_properties", "p", frozenset(range(16)) - {PINGREQ, PINGRESP}),
    0x27: ("maximum_packet_size", "i", frozenset({CONNECT, CONNACK})),
    0x28: ("wildcard_subscription_available", "b", frozenset({CONNACK})),
    0x29: ("subscription_identifier_available", "b", frozenset({CONNACK})),
    0x2A: ("shared_subscription_available", "b", frozenset({CONNACK})),
}
# Byte properties whose only values are 0 and 1 (anything else is a protocol error).
_BOOLEAN = frozenset({0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A})
# Properties where 0 is a protocol error (3.1.2.11.3, 3.1.2.11.4, 3.3.2.3.8 is the alias:
# left to the connection, which answers 0x94).
_NONZERO = frozenset({0x21, 0x27, 0x0B})
_ORDER = sorted(_SPEC)
_ENCODE_ORDER = [(ident, _SPEC[ident][1]) for ident in _ORDER]
# one C call fetches every attribute in identifier order
_VALUES_OF = operator.attrgetter(*(_SPEC[ident][0] for ident in _ORDER))


def _read_pair(buf: memoryview, pos: int, end: int) -> tuple[tuple[str, str], int]:
    """A UTF-8 String Pair (user property)."""
    name, pos = read_str(buf, pos, end)
    value, pos = read_str(buf, pos, end)
    return (name, value), pos


def _read_varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    return body_varint(buf, pos, end)


_READERS: dict[str, Callable[[memoryview, int, int], tuple[Any, int]]] = {
    "b": read_u8,
    "h": read_u16,
    "i": read_u32,
    "v": _read_varint,
    "s": read_str,
    "d": read_bin,
    "p": _read_pair,
}


def decode_properties(buf: memoryview, pos: int, end: int, packet_type: int) -> tuple[Properties, int]:
    """Read a property length and the properties after it; returns (Properties, offset)."""
    if pos < end and buf[pos] < 0x80:
        length = buf[pos]
        pos += 1
    else:
        length, pos = body_varint(buf, pos, end)
    if length == 0:
        return EMPTY, pos
    stop = pos + length
    if stop > end:
        raise malformed("property length runs past the end of the packet", packet_type)
    values: dict[str, Any] = {}
    users: list[tuple[str, str]] = []
    sub_ids: list[int] = []
    while pos < stop:
        ident = buf[pos]
        if ident < 0x80:
            pos += 1
        else:
            ident, pos = body_varint(buf, pos, stop)
        spec = _SPEC.get(ident)
        if spec is None:
            raise malformed(f"unknown property identifier 0x{ident:02x}", packet_type)
        name, kind, allowed = spec
        if packet_type not in allowed:
            # 2.2.2.2: an identifier not valid for the packet type is malformed
            raise malformed(f"property {name} not allowed in this packet", packet_type)
        value, pos = _READERS[kind](buf, pos, stop)
        if ident == 0x26:
            users.append(value)
            continue
        if ident in _BOOLEAN and value > 1:
            raise protocol_error(f"{name} must be 0 or 1", packet_type)
        if ident in _NONZERO and value == 0:
            raise protocol_error(f"{name} must not be 0", packet_type)
        if ident == 0x0B:
            if sub_ids and packet_type == SUBSCRIBE:
                raise protocol_error("subscription identifier given twice", packet_type)
            sub_ids.append(value)
            continue
        if name in values:
            raise protocol_error(f"property {name} given more than once", packet_type)
        values[name] = value
    if users:
        values["user_properties"] = tuple(users)
    if sub_ids:
        values["subscription_identifiers"] = tuple(sub_ids)
    return _build(values), stop


def encode_properties(props: Properties) -> bytes:
    """Property length plus properties, ascending identifier, list order kept."""
    if props is EMPTY:
        return b"\x00"
    out = bytearray()
    for (ident, kind), value in zip(_ENCODE_ORDER, _VALUES_OF(props), strict=True):
        if value is None or value == ():
            continue
        if kind == "p":
            for key, val in value:
                out.append(ident)
                out += encode_str(key)
                out += encode_str(val)
        elif kind == "v":
            for sub_id in value:
                out.append(ident)
                out += encode_varint(sub_id)
        else:
            out.append(ident)
            if kind == "b":
                out.append(value)
            elif kind == "h":
                out += pack_u16(value)
            elif kind == "i":
                out += pack_u32(value)
            elif kind == "s":
                out += encode_str(value)
            else:
                out += encode_bin(value)
    return encode_varint(len(out)) + bytes(out)


def allowed_properties(packet_type: int) -> frozenset[str]:
    """The attribute names a packet type may carry (for tests and strategies)."""
    return frozenset(name for name, _, allowed in _SPEC.values() if packet_type in allowed)


REASON_CODES = frozenset(int(code) for code in ReasonCode)
