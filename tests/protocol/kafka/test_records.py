"""Record batches v2: round trips, aiokafka as the oracle, and every refusal."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from aiokafka.codec import snappy_encode
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.kafka import records as rc
from amqplite.protocol.kafka.primitives import CodecError

CODECS = (rc.NONE, rc.GZIP, rc.SNAPPY, rc.LZ4, rc.ZSTD)
_blob = st.none() | st.binary(max_size=40)
_record_lists = st.lists(st.tuples(_blob, _blob, st.lists(st.tuples(st.text(max_size=5), _blob),
                                                          max_size=2),
                                   st.integers(0, 10**6)), min_size=1, max_size=6)


def _records(items: list) -> list[rc.Record]:
    return [rc.Record(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(items)]


@settings(max_examples=40)
@given(items=_record_lists, codec=st.sampled_from(CODECS), base=st.integers(0, 2**40))
def test_batches_round_trip(items: list, codec: int, base: int) -> None:
    recs = _records(items)
    data = rc.encode_batch(recs, base_offset=base, base_timestamp=1_700_000_000_000,
                           compression=codec, producer_id=9, producer_epoch=2, base_sequence=4)
    batch = rc.decode_batch(data)
    assert batch.records == recs
    assert (batch.base_offset, batch.compression, batch.record_count) == (base, codec, len(recs))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 4)
    assert batch.last_offset == base + len(recs) - 1
    assert batch.max_timestamp == 1_700_000_000_000 + max(r.timestamp_delta for r in recs)


def _aiokafka_batch(codec: int, n: int = 20, transactional: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                  is_transactional=int(transactional), producer_id=42,
                                  producer_epoch=3, base_sequence=100, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=1000 + 3 * i, key=None if i % 3 == 0 else b"k%d" % i,
                 value=b"value-%d-" % i * 20, headers=[("h", b"%d" % i), ("nil", None)])
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_batches_decode(codec: int) -> None:
    batch = rc.decode_batch(_aiokafka_batch(codec, transactional=True))
    assert batch.compression == codec and batch.is_transactional and not batch.is_control
    assert batch.records is not None and len(batch.records) == 20
    r = batch.records[4]
    assert (r.offset_delta, r.key, r.value) == (4, b"k4", b"value-4-" * 20)
    assert batch.base_timestamp + r.timestamp_delta == 1012
    assert r.headers == [("h", b"4"), ("nil", None)]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 100)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_our_batches(codec: int) -> None:
    recs = [rc.Record(i, i, b"k", b"v" * i, [("a", b"b")]) for i in range(10)]
    ours = rc.encode_batch(recs, base_offset=500, base_timestamp=7000, compression=codec)
    theirs = DefaultRecordBatch(ours)
    assert theirs.validate_crc() and theirs.compression_type == codec
    got = [(m.offset, m.timestamp, m.key, m.value, m.headers) for m in theirs]
    assert got == [(500 + i, 7000 + i, b"k", b"v" * i, [("a", b"b")]) for i in range(10)]


def _batch_with_payload(payload: bytes, codec: int, count: int, magic: int = 2) -> bytes:
    """A batch assembled by hand from the published layout (an independent writer)."""
    tail = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + payload
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, magic, crc32c.crc32c(tail)) + tail


def test_snappy_raw_and_xerial_both_decode() -> None:
    recs = [rc.Record(i, 0, None, b"abc" * 5000, []) for i in range(12)]
    plain = bytes(rc.encode_records(recs))
    for payload in (snappy_encode(plain, xerial_compatible=False),
                    snappy_encode(plain, xerial_compatible=True, xerial_blocksize=4096)):
        assert rc.decode_batch(_batch_with_payload(payload, rc.SNAPPY, 12)).records == recs


def test_rebase_patches_offset_and_epoch_only() -> None:
    stored = _aiokafka_batch(rc.LZ4)
    moved = rc.rebase_batch(stored, 10_000, partition_leader_epoch=7)
    assert moved[16:] == stored[16:] and len(moved) == len(stored)
    theirs = DefaultRecordBatch(moved)
    assert theirs.validate_crc() and theirs.base_offset == 10_000
    batch = rc.decode_batch(moved)
    assert batch.partition_leader_epoch == 7 and batch.last_offset == 10_019
    assert b"".join(rc.rebased_pieces(stored, 10_000, 7)) == moved


def test_split_batches() -> None:
    a, b = _aiokafka_batch(rc.NONE, 3), _aiokafka_batch(rc.GZIP, 5)
    assert [bytes(x) for x in rc.split_batches(a + b)] == [a, b]
    with pytest.raises(CodecError):
        rc.split_batches(a + b[:-1])
    assert [bytes(x) for x in rc.split_batches(a + b[:-1], allow_partial=True)] == [a]
    with pytest.raises(CodecError):
        rc.split_batches(a + b"\x00" * 5)


def test_bad_crc_is_refused() -> None:
    data = bytearray(_aiokafka_batch(rc.NONE))
    data[-1] ^= 0x01
    with pytest.raises(CodecError, match="CRC"):
        rc.decode_batch(bytes(data))
    assert rc.decode_batch(bytes(data), check_crc=False).record_count == 20


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magics_are_refused(magic: int) -> None:
    with pytest.raises(CodecError, match="magic"):
        rc.decode_batch(_batch_with_payload(bytes(rc.encode_records(
            [rc.Record(0, 0, None, b"x")])), 0, 1, magic=magic))
    # a v0/v1 message set shorter than a v2 header is named for its magic too
    with pytest.raises(CodecError, match="magic"):
        rc.read_batch_header(struct.pack(">qiib", 0, 20, 0, magic) + b"\x00" * 10)


def test_lengths_that_disagree_are_refused() -> None:
    good = _aiokafka_batch(rc.NONE, 2)
    for bad in (good[:-1], good + b"\x00", good[:40]):
        with pytest.raises(CodecError):
            rc.decode_batch(bad)
    recs = bytes(rc.encode_records([rc.Record(0, 0, None, b"x"), rc.Record(1, 0, None, b"y")]))
    with pytest.raises(CodecError):  # header claims 3 records, two follow
        rc.decode_batch(_batch_with_payload(recs, 0, 3))
    with pytest.raises(CodecError):  # header claims 1 record, two follow
        rc.decode_batch(_batch_with_payload(recs, 0, 1))


@pytest.mark.parametrize("codec", [rc.GZIP, rc.LZ4, rc.ZSTD, rc.SNAPPY])
def test_decompression_bombs_stop_at_the_bound(codec: int) -> None:
    plain = bytes(rc.encode_records([rc.Record(0, 0, None, b"\x00" * (4 << 20))]))
    payload = rc.compress(codec, plain)
    assert len(payload) < 300_000
    data = _batch_with_payload(payload, codec, 1)
    with pytest.raises(CodecError):
        rc.decode_batch(data, max_uncompressed=1 << 20)
    assert rc.decode_batch(data, max_uncompressed=8 << 20).records[0].value == b"\x00" * (4 << 20)


def test_corrupt_compressed_payload_is_a_codec_error() -> None:
    payload = zlib.compress(b"x" * 1000)[:-4]
    for codec in (rc.GZIP, rc.LZ4, rc.ZSTD, rc.SNAPPY, 5):
        with pytest.raises(CodecError):
            rc.decode_batch(_batch_with_payload(payload, codec, 1))
