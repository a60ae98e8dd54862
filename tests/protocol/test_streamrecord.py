"""Stream records and the frames written from them: the same bytes as the general path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amqplite.protocol import streamrecord
from amqplite.protocol.frames import encode_deliver, write_stream_deliveries
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.protocol.strategies import FAST, properties, shortstr


class _Entry:
    def __init__(self, data: bytes, at: int) -> None:
        self.data, self.at = data, at


@FAST
@given(st.lists(st.tuples(shortstr(40), shortstr(40), properties(), st.binary(max_size=300)),
                min_size=1, max_size=6),
       st.sampled_from([0, 4096, 8 + 17, 8 + 100]), st.integers(1, 2**40), shortstr(30),
       st.integers(1, 65535))
def test_stream_deliveries_equal_encode_deliver(
        items: list[tuple[str, str, BasicProperties, bytes]], frame_max: int, first: int,
        ctag: str, channel: int) -> None:
    records = [streamrecord.pack(7, i, streamrecord.route(ex, rk), encode_properties(p), body)
               for i, (ex, rk, p, body) in enumerate(items)]
    chunk = b"".join(records)
    starts = [at for _, _, at in streamrecord.walk(chunk, 100, len(records))]
    out = bytearray()
    write_stream_deliveries(out, channel, ctag, first, [_Entry(chunk, at) for at in starts],
                            frame_max)
    want = b"".join(encode_deliver(channel, ctag, first + i, False, ex, rk,
                                   encode_properties(p), body, frame_max)
                    for i, (ex, rk, p, body) in enumerate(items))
    assert bytes(out) == want
    for i, (_, data, at) in enumerate(streamrecord.entries([(100, len(records), chunk)], 101)):
        ts, key, ex, rk, props, body = streamrecord.decode(data, at)
        assert (ts, key, ex, rk, props, body) == (7, i + 1, items[i + 1][0], items[i + 1][1],
                                                  encode_properties(items[i + 1][2]),
                                                  items[i + 1][3])
