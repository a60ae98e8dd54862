"""Hostile bytes: the framing and every decoder raise nothing but their own errors."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.kafka import messages as m
from amqplite.protocol.kafka import records as rc
from amqplite.protocol.kafka.framing import FrameBuffer, FrameError
from amqplite.protocol.kafka.primitives import CodecError
from tests.protocol.kafka.strategies import struct_value

KEYS = sorted(int(k) for k in m.SUPPORTED)


@settings(max_examples=300)
@given(chunks=st.lists(st.binary(max_size=64), max_size=8), limit=st.integers(0, 200))
def test_frame_buffer_yields_frames_or_frame_error(chunks: list[bytes], limit: int) -> None:
    buf = FrameBuffer(max_frame=limit)
    data = b"".join(chunks)
    got = []
    try:
        for c in chunks:
            buf.feed(c)
            got.extend(buf.frames())
    except FrameError:
        return
    # what came out is exactly the frames the bytes hold, in order, with the rest pending
    pos = 0
    for f in got:
        assert int.from_bytes(data[pos:pos + 4], "big", signed=True) == len(f) <= limit
        assert data[pos + 4:pos + 4 + len(f)] == f
        pos += 4 + len(f)
    assert buf.pending == len(data) - pos


@pytest.mark.parametrize("size", [-1, -(2**31), 101])
def test_negative_and_oversized_frames_are_frame_errors(size: int) -> None:
    buf = FrameBuffer(max_frame=100)
    buf.feed(size.to_bytes(4, "big", signed=True) + b"x" * 10)
    with pytest.raises(FrameError):
        buf.next_frame()


def _decode_only_own_errors(frame: bytes) -> None:
    with contextlib.suppress(CodecError, m.UnsupportedRequest):
        m.decode_request(frame)


@settings(max_examples=500)
@given(key=st.sampled_from(KEYS), data=st.data(), tail=st.binary(max_size=80))
def test_random_bodies_after_a_valid_header(key: int, data: st.DataObject, tail: bytes) -> None:
    lo, hi = m.SUPPORTED[key]
    version = data.draw(st.integers(lo, hi))
    header = m.encode_request(key, version, 1, "fuzz", {})[4:]
    head_len = 8 + 2 + 4 + (1 if m.request_header_version(key, version) == 2 else 0)
    _decode_only_own_errors(header[:head_len] + tail)


@settings(max_examples=300)
@given(key=st.sampled_from(KEYS), data=st.data())
def test_mutated_valid_requests(key: int, data: st.DataObject) -> None:
    """Valid requests with bytes flipped, cut or inserted: an error of ours, or a decode."""
    lo, hi = m.SUPPORTED[key]
    version = data.draw(st.integers(lo, hi))
    schema = m.SCHEMAS[key][0]
    value = data.draw(struct_value(schema.fields, version, schema.is_flexible(version)))
    frame = bytearray(m.encode_request(key, version, 1, "fuzz", value)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(("flip", "cut", "insert")))
        at = data.draw(st.integers(0, max(0, len(frame) - 1)))
        if op == "flip" and frame:
            frame[at] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del frame[at:at + data.draw(st.integers(1, 8))]
        else:
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    _decode_only_own_errors(bytes(frame))


@settings(max_examples=200)
@given(key=st.sampled_from(KEYS), data=st.data(), body=st.binary(max_size=120))
def test_random_responses(key: int, data: st.DataObject, body: bytes) -> None:
    lo, hi = m.SUPPORTED[key]
    version = data.draw(st.integers(lo, hi))
    with contextlib.suppress(CodecError):
        m.decode_response(key, version, b"\x00\x00\x00\x01" + body)


_BATCH = rc.encode_batch([rc.Record(i, i, b"k", b"v" * 30, [("h", b"x")]) for i in range(5)])
_GZ = rc.encode_batch([rc.Record(i, i, b"k", b"v" * 30, []) for i in range(5)],
                      compression=rc.GZIP)


@settings(max_examples=500)
@given(data=st.data(), base=st.sampled_from((_BATCH, _GZ)), check_crc=st.booleans())
def test_mutated_batches(data: st.DataObject, base: bytes, check_crc: bool) -> None:
    raw = bytearray(base)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    try:
        rc.decode_batch(bytes(raw), check_crc=check_crc, max_uncompressed=1 << 16)
        rc.split_batches(bytes(raw))
    except CodecError:
        pass


@settings(max_examples=300)
@given(raw=st.binary(max_size=200), codec=st.sampled_from(range(8)))
def test_random_batches(raw: bytes, codec: int) -> None:
    with contextlib.suppress(CodecError):
        rc.decode_batch(raw, check_crc=False, max_uncompressed=1 << 16)
    with contextlib.suppress(CodecError):
        rc.decompress(codec, raw, 1 << 16)
