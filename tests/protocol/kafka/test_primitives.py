"""Primitives and headers: round trips, edge values, and aiokafka's varints as an oracle."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.record.util import decode_varint, encode_varint
from hypothesis import given
from hypothesis import strategies as st

from amqplite.protocol.kafka import framing
from amqplite.protocol.kafka import primitives as p
from amqplite.protocol.kafka.schema import Message

I64 = st.integers(-(2**63), 2**63 - 1)


@given(value=I64)
def test_varlong_round_trips_and_matches_aiokafka(value: int) -> None:
    raw = p.varint(value)
    assert p.read_varint(raw, 0) == (value, len(raw))
    theirs = bytearray()
    encode_varint(value, theirs.append)
    assert bytes(theirs) == raw
    assert decode_varint(raw, 0)[0] == value


@given(value=st.integers(0, 2**64 - 1))
def test_unsigned_varint_round_trips(value: int) -> None:
    raw = p.uvarint(value)
    assert p.read_uvarint(raw + b"tail", 0) == (value, len(raw))


@pytest.mark.parametrize(("value", "raw"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"),
                                            (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01")])
def test_zigzag_edges(value: int, raw: bytes) -> None:
    assert p.varint(value) == raw


def test_overlong_varint_is_a_codec_error() -> None:
    with pytest.raises(p.CodecError):
        p.read_uvarint(b"\xff" * 11, 0)
    with pytest.raises(ValueError):
        p.uvarint(-1)


@pytest.mark.parametrize(("kind", "values"), [
    ("int8", st.integers(-128, 127)), ("int16", st.integers(-(2**15), 2**15 - 1)),
    ("int32", st.integers(-(2**31), 2**31 - 1)), ("int64", I64),
    ("uint16", st.integers(0, 0xFFFF)), ("uint32", st.integers(0, 2**32 - 1)),
    ("bool", st.booleans()), ("uuid", st.uuids()),
    ("string", st.text(max_size=300)), ("bytes", st.binary(max_size=300)),
    ("records", st.binary(max_size=300)), ("[]int32", st.lists(st.integers(0, 9), max_size=9)),
    ("[]string", st.lists(st.text(max_size=4), max_size=5)),
])
@given(data=st.data())
def test_each_type_round_trips_plain_compact_and_nullable(kind: str, values: st.SearchStrategy,
                                                         data: st.DataObject) -> None:
    msg = Message("T", f"a {kind} null=1+\nb int8\n", flexible=2)
    for version in (0, 1, 2):  # plain, plain nullable, compact nullable
        nullable = version >= 1 and kind not in ("int8", "int16", "int32", "int64", "uint16",
                                                 "uint32", "bool", "uuid")
        value = data.draw(st.none() | values if nullable else values)
        raw = msg.encode({"a": value, "b": 7}, version)
        got, end = msg.decode(raw, version)
        assert end == len(raw) and got["b"] == 7
        assert (got["a"] == value) or (bytes(got["a"]) == value)


def test_compact_lengths_are_plus_one_and_null_is_zero() -> None:
    msg = Message("T", "s string null\nb bytes null\n", flexible=0)
    assert msg.encode({"s": "ab", "b": None}, 0) == b"\x03ab\x00\x00"
    plain = Message("T", "s string null\nb bytes null\n", flexible=None)
    assert plain.encode({"s": None, "b": b"x"}, 0) == b"\xff\xff\x00\x00\x00\x01x"


def test_a_null_where_not_nullable_is_a_codec_error() -> None:
    msg = Message("T", "s string\n", flexible=1)
    for version, raw in ((0, b"\xff\xff"), (1, b"\x00\x00")):
        with pytest.raises(p.CodecError):
            msg.decode(raw, version)


def test_unknown_tags_are_skipped_and_known_ones_read() -> None:
    msg = Message("T", "a int32\nt int64 tag=1 default=-1\n", flexible=0)
    assert msg.encode({"a": 1}, 0) == b"\x00\x00\x00\x01\x00"
    raw = msg.encode({"a": 1, "t": 5}, 0)
    assert raw == b"\x00\x00\x00\x01\x01\x01\x08" + (5).to_bytes(8, "big")
    unknown = b"\x00\x00\x00\x01\x03" + b"\x00\x02hi" + b"\x01\x08" + (5).to_bytes(8, "big") \
        + b"\x07\x00"
    assert msg.decode(unknown, 0)[0] == {"a": 1, "t": 5}
    assert msg.decode(b"\x00\x00\x00\x01\x00", 0)[0] == {"a": 1, "t": -1}
    for bad in (b"\x00\x00\x00\x01\x02\x01\x00\x00\x00",  # tags out of order
                b"\x00\x00\x00\x01\x01\x00\x09ab",  # size past the end
                b"\x00\x00\x00\x01\x01\x01\x09" + bytes(9)):  # stray bytes in a known tag
        with pytest.raises(p.CodecError):
            msg.decode(bad, 0)


@given(key=st.integers(-(2**15), 2**15 - 1), version=st.integers(0, 2**15 - 1),
       corr=st.integers(-(2**31), 2**31 - 1), client=st.none() | st.text(max_size=20),
       hv=st.sampled_from((0, 1, 2)))
def test_request_headers_round_trip(key: int, version: int, corr: int, client: str | None,
                                    hv: int) -> None:
    head = framing.RequestHeader(key, version, corr, client)
    raw = framing.request_header_bytes(head, hv)
    got, pos = framing.read_request_header(raw + b"body", hv)
    assert pos == len(raw)
    assert (got.api_key, got.api_version, got.correlation_id) == (key, version, corr)
    assert got.client_id == (client if hv else None)


@given(corr=st.integers(-(2**31), 2**31 - 1), hv=st.sampled_from((0, 1)))
def test_response_headers_round_trip(corr: int, hv: int) -> None:
    raw = framing.response_header_bytes(corr, hv)
    assert len(raw) == 4 + hv
    assert framing.read_response_header(raw, hv) == (corr, len(raw))


def test_frame_buffer_hands_out_frames_across_reads() -> None:
    buf = framing.FrameBuffer()
    frames = [b"", b"a", b"b" * 1000, bytes(range(256))]
    wire = b"".join(framing.frame([f]) for f in frames)
    got = []
    for i in range(0, len(wire), 7):
        buf.feed(wire[i:i + 7])
        got.extend(buf.frames())
    assert got == frames and buf.pending == 0


def test_uuid_nil_default() -> None:
    msg = Message("T", "u uuid 1+\n", flexible=None)
    assert msg.decode(b"", 0)[0] == {"u": uuid.UUID(int=0)}
