"""MQTT codec: round trips for every packet type and level, framing, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqplite.protocol.mqtt import packets as pk
from amqplite.protocol.mqtt.datatypes import decode_varint, encode_varint
from amqplite.protocol.mqtt.decoder import Decoder, decode_all
from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode
from amqplite.protocol.mqtt.properties import EMPTY, Properties
from tests.protocol.mqtt.strategies import VERSIONS, kinds, packets, versioned_packets

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MALFORMED = ReasonCode.MALFORMED_PACKET
PROTOCOL = ReasonCode.PROTOCOL_ERROR


def _code(data: bytes, version: int = 5) -> int:
    with pytest.raises(MQTTError) as info:
        decode_all(data, version)
    return info.value.reason_code


@pytest.mark.parametrize(
    ("version", "kind"), [(v, k) for v in VERSIONS for k in kinds(v)], ids=lambda x: str(x)
)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_packet_type_round_trips_at_every_level(version: int, kind: int, data: st.DataObject) -> None:
    packet = data.draw(packets(version, kind))
    assert kind == packet.TYPE
    raw = pk.encode(packet, version)
    assert raw[0] >> 4 == kind
    assert decode_all(raw, version) == [packet]


@pytest.mark.parametrize("version", VERSIONS)
@FAST
@given(data=st.data())
def test_random_splits_give_the_same_packets(version: int, data: st.DataObject) -> None:
    items = data.draw(st.lists(packets(version), min_size=1, max_size=6))
    stream = b"".join(pk.encode(p, version) for p in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = Decoder(version)
    out: list[pk.Packet] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[last:cut])
        last = cut
    assert out == items
    assert dec.buffered == 0


@given(st.integers(0, 268_435_455))
def test_varint_round_trip_and_minimal_length(value: int) -> None:
    raw = encode_varint(value)
    assert len(raw) == 1 + (value >= 128) + (value >= 16384) + (value >= 2_097_152)
    assert decode_varint(raw, 0, len(raw)) == (value, len(raw))


def test_known_bytes() -> None:
    """Exact bytes from the specifications' examples (3.1.1 PINGREQ, PUBACK, CONNECT)."""
    assert pk.encode(pk.PingReq()) == b"\xc0\x00"
    assert pk.encode(pk.PubAck(10), 5) == b"\x40\x02\x00\x0a"
    assert pk.encode(pk.PubAck(10, 0x10), 5) == b"\x40\x03\x00\x0a\x10"
    assert pk.encode(pk.PubRel(1), 4) == b"\x62\x02\x00\x01"
    assert pk.encode(pk.Disconnect(), 5) == b"\xe0\x00"
    assert pk.encode(pk.Connect("", 4, keep_alive=10)) == b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x0a\x00\x00"
    assert pk.encode(pk.Connect("a", 3, clean_start=False, keep_alive=0)) == (
        b"\x10\x0f\x00\x06MQIsdp\x03\x00\x00\x00\x00\x01a"
    )
    assert pk.encode(pk.Publish("a/b", b"x", 1, packet_id=1), 5) == b"\x32\x09\x00\x03a/b\x00\x01\x00x"
    assert pk.encode(pk.SubAck(1, (0x00, 0x80)), 4) == b"\x90\x04\x00\x01\x00\x80"


def test_long_form_acks_decode_like_short_ones() -> None:
    assert decode_all(b"\x40\x04\x00\x0a\x00\x00", 5) == [pk.PubAck(10)]
    assert decode_all(b"\xe0\x01\x00", 5) == [pk.Disconnect()]


def test_properties_keep_user_property_order() -> None:
    props = Properties(user_properties=(("b", "1"), ("a", "2"), ("b", "3")), content_type="t")
    packet = pk.Publish("t", b"", properties=props)
    (decoded,) = decode_all(pk.encode(packet, 5), 5)
    assert isinstance(decoded, pk.Publish)
    assert decoded.properties.user_properties == (("b", "1"), ("a", "2"), ("b", "3"))


# ------------------------------------------------------------------ malformed


def test_varint_longer_than_four_bytes() -> None:
    assert _code(b"\x30\xff\xff\xff\xff\x01") == MALFORMED


def test_varint_not_minimal() -> None:
    assert _code(b"\xc0\x80\x00") == MALFORMED


def test_truncated_stream_waits_then_is_malformed_when_complete_is_demanded() -> None:
    raw = pk.encode(pk.Publish("a", b"xyz", 1, packet_id=3), 5)
    dec = Decoder(5)
    assert dec.feed(raw[:-1]) == []
    assert _code(raw[:-1]) == MALFORMED


@pytest.mark.parametrize(
    "raw",
    [
        b"\x32\x03\x00\x05a",  # topic length runs past the body (lying length)
        b"\x40\x01\x00",  # PUBACK truncated packet id
        b"\x30\x02\x00",  # topic length cut
        b"\x82\x05\x00\x01\x00\x05a",  # SUBSCRIBE filter length lies
        b"\x32\x06\x00\x01a\x00\x01\x05",  # property length 5, nothing after
    ],
)
def test_lying_lengths_are_malformed(raw: bytes) -> None:
    assert _code(raw) == MALFORMED


@pytest.mark.parametrize(
    "raw",
    [
        b"\x42\x02\x00\x01",  # PUBACK with flags
        b"\x60\x02\x00\x01",  # PUBREL without its 0010 flags [MQTT-3.6.1-1]
        b"\x80\x06\x00\x01\x00\x01a\x00",  # SUBSCRIBE without 0010
        b"\xa0\x05\x00\x01\x00\x01a",  # UNSUBSCRIBE without 0010
        b"\xc1\x00",  # PINGREQ with flags
        b"\xe8\x00",  # DISCONNECT with flags
        b"\x11\x00",  # CONNECT with flags
        b"\x36\x05\x00\x01a\x00\x01",  # PUBLISH QoS 3
        b"\x38\x03\x00\x01a",  # PUBLISH QoS 0 with DUP
        b"\x00\x00",  # reserved type 0
    ],
)
def test_bad_fixed_header_flags(raw: bytes) -> None:
    for version in VERSIONS:
        assert _code(raw, version) == MALFORMED


def test_auth_before_mqtt5_is_malformed() -> None:
    assert _code(b"\xf0\x00", 4) == MALFORMED
    assert decode_all(b"\xf0\x00", 5) == [pk.Auth()]


def test_packet_too_large_is_refused_before_buffering() -> None:
    dec = Decoder(5, max_packet_size=100)
    with pytest.raises(MQTTError) as info:
        dec.feed(b"\x30\xe8\x07")  # remaining length 1000, no body yet
    assert info.value.reason_code == ReasonCode.PACKET_TOO_LARGE
    with pytest.raises(MQTTError):  # poisoned
        dec.feed(b"\xc0\x00")


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\x80", b"a\x00b"])
def test_bad_utf8_topic(bad: bytes) -> None:
    """Ill-formed UTF-8, a surrogate (ED A0 80), an overlong NUL (C0 80), U+0000."""
    body = len(bad).to_bytes(2, "big") + bad + b"\x00"
    assert _code(bytes((0x30, len(body))) + body, 5) == MALFORMED


def test_bad_utf8_in_subscribe_and_connect() -> None:
    assert _code(b"\x82\x06\x00\x01\x00\x01\xff\x00", 4) == MALFORMED
    bad_id = b"\x00\x04MQTT\x04\x02\x00\x0a\x00\x02\xed\xa0"
    assert _code(bytes((0x10, len(bad_id))) + bad_id) == MALFORMED


@pytest.mark.parametrize("topic", [b"a/+", b"#", b"a/#/b", b"+"])
def test_wildcards_in_publish_topic(topic: bytes) -> None:
    body = len(topic).to_bytes(2, "big") + topic
    for version in VERSIONS:
        extra = b"\x00" if version == 5 else b""
        raw = bytes((0x30, len(body) + len(extra))) + body + extra
        assert _code(raw, version) == ReasonCode.TOPIC_NAME_INVALID


def test_empty_topic_only_in_mqtt5() -> None:
    assert _code(b"\x30\x02\x00\x00", 4) == ReasonCode.TOPIC_NAME_INVALID
    assert decode_all(b"\x30\x03\x00\x00\x00", 5) == [pk.Publish("")]


def _publish_with_props(props: bytes) -> bytes:
    body = b"\x00\x01a" + encode_varint(len(props)) + props
    return b"\x30" + encode_varint(len(body)) + body


def test_duplicate_property_is_a_protocol_error() -> None:
    assert _code(_publish_with_props(b"\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02")) == PROTOCOL


def test_repeatable_properties_repeat() -> None:
    (p,) = decode_all(_publish_with_props(b"\x26\x00\x01k\x00\x01v\x26\x00\x01k\x00\x01w"), 5)
    assert isinstance(p, pk.Publish)
    assert p.properties.user_properties == (("k", "v"), ("k", "w"))


def test_unknown_property_and_wrong_packet_are_malformed() -> None:
    assert _code(_publish_with_props(b"\x7f\x00")) == MALFORMED
    assert _code(_publish_with_props(b"\x11\x00\x00\x00\x01")) == MALFORMED  # session expiry in PUBLISH


@pytest.mark.parametrize(
    "props",
    [b"\x01\x02", b"\x0b\x00"],  # payload format 2, subscription identifier 0
)
def test_bad_property_values_are_protocol_errors(props: bytes) -> None:
    assert _code(_publish_with_props(props)) == PROTOCOL


def test_two_subscription_identifiers_in_subscribe() -> None:
    body = b"\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00"
    assert _code(b"\x82" + bytes((len(body),)) + body) == PROTOCOL


def _connect(name: bytes, level: int, flags: int, rest: bytes = b"\x00\x01c") -> bytes:
    body = len(name).to_bytes(2, "big") + name + bytes((level, flags)) + b"\x00\x0a"
    body += (b"\x00" if level == 5 else b"") + rest
    return b"\x10" + encode_varint(len(body)) + body


def test_connect_rules() -> None:
    assert decode_all(_connect(b"MQTT", 4, 0x02), 4) == [pk.Connect("c", 4, keep_alive=10)]
    assert _code(_connect(b"MQTT", 6, 0x02)) == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert _code(_connect(b"MQTT", 3, 0x02)) == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert _code(_connect(b"MQIsdp", 4, 0x02)) == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    assert _code(_connect(b"MQTT", 4, 0x03)) == MALFORMED  # reserved bit
    assert _code(_connect(b"MQTT", 4, 0x10)) == MALFORMED  # will QoS without will
    assert _code(_connect(b"MQTT", 4, 0x20)) == MALFORMED  # will retain without will
    assert _code(_connect(b"MQTT", 4, 0x40, b"\x00\x01c\x00\x01p")) == MALFORMED  # password, no user
    assert _code(_connect(b"MQTT", 4, 0x1C, b"\x00\x01c\x00\x01t\x00\x00")) == MALFORMED  # will QoS 3
    assert _code(_connect(b"MQTT", 4, 0x04, b"\x00\x01c\x00\x01#\x00\x00")) == ReasonCode.TOPIC_NAME_INVALID
    assert _code(_connect(b"MQTT", 4, 0x02, b"\x00\x01cX")) == MALFORMED  # trailing byte
    pw = pk.Connect("c", 5, keep_alive=10, password=b"p", clean_start=False)
    assert decode_all(_connect(b"MQTT", 5, 0x40, b"\x00\x01c\x00\x01p"), 5) == [pw]


def test_decoder_learns_the_level_from_connect() -> None:
    dec = Decoder(4)
    stream = pk.encode(pk.Connect("c", 5)) + pk.encode(pk.PubAck(1, 0x10), 5)
    assert dec.feed(stream) == [pk.Connect("c", 5), pk.PubAck(1, 0x10)]
    assert dec.version == 5


def test_subscribe_rules() -> None:
    def sub(options: int, version: int) -> bytes:
        body = b"\x00\x01" + (b"\x00" if version == 5 else b"") + b"\x00\x01a" + bytes((options,))
        return b"\x82" + bytes((len(body),)) + body

    assert _code(sub(0x03, 4), 4) == MALFORMED  # QoS 3
    assert _code(sub(0x04, 4), 4) == MALFORMED  # reserved bits in 3.1.1
    assert _code(sub(0x40, 5), 5) == MALFORMED  # reserved bits in 5
    assert _code(sub(0x30, 5), 5) == PROTOCOL  # retain handling 3
    assert _code(b"\x82\x03\x00\x01\x00", 5) == PROTOCOL  # no filter
    assert _code(b"\x82\x02\x00\x01", 4) == MALFORMED
    assert _code(b"\xa2\x03\x00\x01\x00", 5) == PROTOCOL  # UNSUBSCRIBE without filter
    assert _code(b"\x82\x06\x00\x00\x00\x01a\x00", 4) == PROTOCOL  # packet id 0


def test_reason_codes_are_checked() -> None:
    assert _code(b"\x40\x03\x00\x01\x05", 5) == PROTOCOL  # 0x05 not a PUBACK code
    assert _code(b"\x62\x03\x00\x01\x10", 5) == PROTOCOL  # PUBREL: 0x00 / 0x92 only
    assert _code(b"\xe0\x01\x05", 5) == PROTOCOL
    assert _code(b"\x90\x03\x00\x01\x03", 4) == MALFORMED  # SUBACK 3.1.1
    assert _code(b"\x40\x03\x00\x01\x00", 4) == MALFORMED  # 3.1.1 PUBACK is 2 bytes
    assert _code(b"\xe0\x01\x00", 4) == MALFORMED  # 3.1.1 DISCONNECT has no body


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=64), st.sampled_from(VERSIONS))
def test_fuzz_arbitrary_bytes_give_packets_or_our_error(data: bytes, version: int) -> None:
    dec = Decoder(version, max_packet_size=1 << 16)
    try:
        packets = dec.feed(data)
    except MQTTError as err:
        assert 0x80 <= err.reason_code <= 0xA2
        return
    for packet in packets:  # whatever decoded re-encodes to a decodable packet
        assert decode_all(pk.encode(packet, dec.version), dec.version) == [packet]


@settings(max_examples=500, deadline=None)
@given(versioned_packets, st.data())
def test_fuzz_mutated_packets(vp: tuple[int, pk.Packet], data: st.DataObject) -> None:
    """Flip, cut or extend a valid packet: only packets or MQTTError come out."""
    version, packet = vp
    raw = bytearray(pk.encode(packet, version))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(1, len(raw)))] + data.draw(st.binary(max_size=4))
    try:
        Decoder(version).feed(bytes(raw))
    except MQTTError as err:
        assert 0x80 <= err.reason_code <= 0xA2


def test_encoder_ignores_properties_before_mqtt5() -> None:
    p = pk.Publish("t", b"x", properties=Properties(content_type="c"))
    assert pk.encode(p, 4) == pk.encode(pk.Publish("t", b"x"), 4)
    assert Properties() == EMPTY
