"""Hypothesis strategies for MQTT packets of every type and protocol level."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from amqplite.protocol.mqtt import packets as pk
from amqplite.protocol.mqtt.properties import EMPTY, WILL, Properties, allowed_properties

VERSIONS = (3, 4, 5)

# well-formed MQTT strings: no U+0000 (hypothesis never draws surrogates)
text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
topic_names = text.filter(lambda t: t and "+" not in t and "#" not in t)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
ids = st.integers(1, 0xFFFF)
binary = st.binary(max_size=24)

_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "payload_format_indicator": st.integers(0, 1),
    "message_expiry_interval": u32,
    "content_type": text,
    "response_topic": topic_names,
    "correlation_data": binary,
    "subscription_identifiers": st.lists(st.integers(1, 268_435_455), min_size=1, max_size=3).map(tuple),
    "session_expiry_interval": u32,
    "assigned_client_identifier": text,
    "server_keep_alive": u16,
    "authentication_method": text,
    "authentication_data": binary,
    "request_problem_information": st.integers(0, 1),
    "will_delay_interval": u32,
    "request_response_information": st.integers(0, 1),
    "response_information": text,
    "server_reference": text,
    "reason_string": text,
    "receive_maximum": ids,
    "topic_alias_maximum": u16,
    "topic_alias": ids,
    "maximum_qos": st.integers(0, 1),
    "retain_available": st.integers(0, 1),
    "user_properties": st.lists(st.tuples(text, text), min_size=1, max_size=4).map(tuple),
    "maximum_packet_size": st.integers(1, 0xFFFFFFFF),
    "wildcard_subscription_available": st.integers(0, 1),
    "subscription_identifier_available": st.integers(0, 1),
    "shared_subscription_available": st.integers(0, 1),
}


@st.composite
def properties(draw: st.DrawFn, packet_type: int, version: int = 5) -> Properties:
    """Any valid property set for ``packet_type`` (EMPTY before MQTT 5)."""
    if version < 5:
        return EMPTY
    names = sorted(allowed_properties(packet_type))
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))) if names else []
    values = {name: draw(_VALUES[name]) for name in chosen}
    if packet_type == pk.SUBSCRIBE and "subscription_identifiers" in values:
        values["subscription_identifiers"] = values["subscription_identifiers"][:1]
    return Properties(**values)


def _codes(packet_type: int, version: int) -> st.SearchStrategy[int]:
    if version < 5:
        return st.just(0)
    return st.sampled_from(sorted(pk.VALID_REASON_CODES[packet_type]))


def kinds(version: int) -> list[int]:
    """The packet types that exist at ``version`` (pk.AUTH only in MQTT 5)."""
    return list(range(1, 15)) + ([pk.AUTH] if version == 5 else [])


@st.composite
def packets(draw: st.DrawFn, version: int, kind: int | None = None) -> pk.Packet:
    """Any packet valid at ``version`` (both directions), of type ``kind`` if given."""
    v5 = version == 5
    if kind is None:
        kind = draw(st.sampled_from(kinds(version)))
    if kind == pk.CONNECT:
        will = None
        if draw(st.booleans()):
            will = pk.Will(draw(topic_names), draw(binary), draw(st.integers(0, 2)), draw(st.booleans()),
                           draw(properties(WILL, version)))  # fmt: skip
        username = draw(st.none() | text)
        password = draw(st.none() | binary) if (username is not None or v5) else None
        return pk.Connect(draw(text), version, draw(st.booleans()), draw(u16), username, password, will,
                          draw(properties(pk.CONNECT, version)))  # fmt: skip
    if kind == pk.CONNACK:
        code = draw(_codes(pk.CONNACK, 5)) if v5 else draw(st.integers(0, 5))
        present = draw(st.booleans()) if version > 3 else False
        return pk.ConnAck(present, code, draw(properties(pk.CONNACK, version)))
    if kind == pk.PUBLISH:
        qos = draw(st.integers(0, 2))
        return pk.Publish(draw(topic_names), draw(binary), qos, draw(st.booleans()),
                          draw(st.booleans()) if qos else False, draw(ids) if qos else None,
                          draw(properties(pk.PUBLISH, version)))  # fmt: skip
    if kind in (pk.PUBACK, pk.PUBREC, pk.PUBREL, pk.PUBCOMP):
        cls = {pk.PUBACK: pk.PubAck, pk.PUBREC: pk.PubRec, pk.PUBREL: pk.PubRel, pk.PUBCOMP: pk.PubComp}[kind]
        return cls(draw(ids), draw(_codes(kind, version)), draw(properties(kind, version)))
    if kind == pk.SUBSCRIBE:
        subs = draw(st.lists(_subscription(version), min_size=1, max_size=4))
        return pk.Subscribe(draw(ids), tuple(subs), draw(properties(pk.SUBSCRIBE, version)))
    if kind == pk.SUBACK:
        codes = st.sampled_from(sorted(pk.VALID_REASON_CODES[pk.SUBACK] if v5 else pk.SUBACK_311))
        return pk.SubAck(draw(ids), tuple(draw(st.lists(codes, min_size=1, max_size=4))),
                         draw(properties(pk.SUBACK, version)))  # fmt: skip
    if kind == pk.UNSUBSCRIBE:
        filters = draw(st.lists(text, min_size=1, max_size=4))
        return pk.Unsubscribe(draw(ids), tuple(filters), draw(properties(pk.UNSUBSCRIBE, version)))
    if kind == pk.UNSUBACK:
        if not v5:
            return pk.UnsubAck(draw(ids))
        codes = draw(st.lists(_codes(pk.UNSUBACK, 5), max_size=4))
        return pk.UnsubAck(draw(ids), tuple(codes), draw(properties(pk.UNSUBACK, version)))
    if kind == 12:
        return pk.PingReq()
    if kind == 13:
        return pk.PingResp()
    if kind == pk.DISCONNECT:
        return pk.Disconnect(draw(_codes(pk.DISCONNECT, version)), draw(properties(pk.DISCONNECT, version)))
    return pk.Auth(draw(_codes(pk.AUTH, 5)), draw(properties(pk.AUTH, version)))


@st.composite
def _subscription(draw: st.DrawFn, version: int) -> pk.Subscription:
    if version < 5:
        return pk.Subscription(draw(text), draw(st.integers(0, 2)))
    return pk.Subscription(draw(text), draw(st.integers(0, 2)), draw(st.booleans()), draw(st.booleans()),
                           draw(st.integers(0, 2)))  # fmt: skip


versioned_packets = st.sampled_from(VERSIONS).flatmap(lambda v: st.tuples(st.just(v), packets(v)))
