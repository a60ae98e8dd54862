"""Kafka record batches stored as they came (``kafka.stored``), in the pure broker with a
real SQLite store: one stream record spans its records' offsets, AMQP readers get
each record expanded with its own offset, retention and restarts count offsets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.model import Consumer
from amqplite.broker.streamlog import Cursor, StreamLog
from amqplite.broker.streams import Streams
from amqplite.protocol import streamrecord
from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka import stored
from amqplite.protocol.properties import decode_properties
from amqplite.store.apply import stream_chunks
from amqplite.storeops import AppendStreams
from tests.broker.conftest import PERSISTENT, FakeClock, session_channel
from tests.broker.test_spill import Shell, _reopen, _store
from tests.broker.test_streams import STREAM, consume

T0 = 1_700_000_000_000


def kafka_batch(values: list[bytes], key: bytes | None = b"k") -> bytes:
    return rb.encode_batch([rb.Record(i, i, key, v, [("h", b"x")]) for i, v in enumerate(values)],
                           base_timestamp=T0)


def deliveries(shell: Shell) -> list[tuple[int, str, bytes]]:
    """(x-stream-offset, routing key, body) of what was delivered; cleared."""
    out = []
    for d in shell.deliveries:
        h = decode_properties(d.message.properties_raw).headers
        assert h is not None
        out.append((h["x-stream-offset"], d.message.routing_key, d.message.body))
    shell.deliveries.clear()
    return out


def mixed(tmp_path: Path, **args: Any) -> tuple[Broker, Shell, Any]:
    """Stream ``s``: two AMQP publishes, a Kafka batch of five, two AMQP publishes."""
    b = Broker(now=FakeClock())
    shell = Shell(b, _store(tmp_path / "s.db"))
    _, ch = session_channel(b)
    b.queue_declare(ch, "s", durable=True, arguments={**STREAM, **args})
    q = b.vhosts["/"].queues["s"]
    for i in range(2):
        b.basic_publish(ch, "", "s", PERSISTENT, b"a%d" % i)
    assert b.stream_publish_batch(ch, q, kafka_batch([b"k%d" % i for i in range(5)]), 5) == 2
    for i in range(2, 4):
        b.basic_publish(ch, "", "s", PERSISTENT, b"a%d" % i)
    shell.settle()
    return b, shell, ch


EXPECTED = [(0, "s", b"a0"), (1, "s", b"a1"), *[(2 + i, "k", b"k%d" % i) for i in range(5)],
            (7, "s", b"a2"), (8, "s", b"a3")]


def test_a_batch_takes_one_offset_per_record_and_amqp_reads_each(tmp_path: Path) -> None:
    b, shell, ch = mixed(tmp_path)
    st = b.vhosts["/"].queues["s"].stream
    assert st is not None and (st.first_offset, st.next_offset) == (0, 9)
    consume(b, shell, ch, "c", "first")
    assert deliveries(shell) == EXPECTED
    consume(b, shell, ch, "mid", 4)  # inside the batch: from that record on
    assert deliveries(shell) == EXPECTED[4:]
    # the one store record: its chunk counts offsets, not records
    [(first, count, data)] = shell.store.fetch_stream(b.vhosts["/"].queues["s"].id, 0, 100)
    assert (first, count) == (0, 9)
    assert [o for o, _, _ in streamrecord.entries([(first, count, data)])] == [0, 1, 2, 7, 8]
    assert [o for o, _, _ in stored.entries([(first, count, data)], 3)] == [3, 4, 5, 6, 7, 8]


def test_a_read_that_stops_inside_a_batch_goes_on_there(tmp_path: Path) -> None:
    b, shell, _ = mixed(tmp_path)
    q = b.vhosts["/"].queues["s"]
    chunks = shell.store.fetch_stream(q.id, 0, 100)
    st = StreamLog()
    st.restore([(1, 0, 8, 0, 0, 100)])
    ch = b.open_channel(b.open_session("guest", "/"), 1)
    cur = Cursor(Consumer("reader", ch, q, True, False, 0), 0)
    got: list[int] = []
    chunk = [(f, n, d, 0) for f, n, d in chunks]
    while Streams._take_entries(st, cur, chunk, 3):
        got.extend(e.position for e in cur.buffer)
        cur.buffer.clear()
        if cur.pending is None:
            break
        data, at, off, end = cur.pending
        chunk = [(off, end - off, data, at)]
    got.extend(e.position for e in cur.buffer)
    assert got == list(range(9))
    assert len(st.expanded) == 1  # expanded once, reused on going on


def test_chunk_rows_span_a_batchs_offsets() -> None:
    rec = streamrecord.pack_batch(5, 1, 100, kafka_batch([b"x"] * 100))
    rows = stream_chunks([AppendStreams(7, [(0, 1, 5, 1, 10, (b"\x00\x00", b"", b"", b"a")),
                                            (1, 1, 5, 1, 10, rec),
                                            (101, 1, 6, 2, 10, (b"\x00\x00", b"", b"", b"b"))])])
    assert [(r[1], r[2], r[6]) for r in rows] == [(0, 101, 102)]


def test_offsets_go_on_after_a_restart(tmp_path: Path) -> None:
    _, shell, _ = mixed(tmp_path)
    shell.store.close()
    store, b2 = _reopen(tmp_path / "s.db")
    shell2 = Shell(b2, store)
    store.start()
    q = b2.vhosts["/"].queues["s"]
    assert q.stream is not None and q.stream.next_offset == 9
    _, ch2 = session_channel(b2)
    assert b2.stream_publish_batch(ch2, q, kafka_batch([b"z0", b"z1"]), 2) == 9
    shell2.settle()
    consume(b2, shell2, ch2, "c", 6)
    assert deliveries(shell2) == [*EXPECTED[6:], (9, "k", b"z0"), (10, "k", b"z1")]


def test_retention_drops_whole_batches(tmp_path: Path) -> None:
    b = Broker(now=FakeClock())
    shell = Shell(b, _store(tmp_path / "s.db"))
    _, ch = session_channel(b)
    size = len(kafka_batch([b"v%02d" % i for i in range(10)]))
    b.queue_declare(ch, "s", durable=True, arguments={
        **STREAM, "x-stream-max-segment-size-bytes": size * 2, "x-max-length-bytes": size * 3})
    q = b.vhosts["/"].queues["s"]
    for _ in range(8):
        b.stream_publish_batch(ch, q, kafka_batch([b"v%02d" % i for i in range(10)]), 10)
        shell.settle()
    st = q.stream
    assert st is not None and st.next_offset == 80
    assert st.first_offset > 0 and st.first_offset % 20 == 0  # whole segments of 2 batches
    consume(b, shell, ch, "c", "first")
    assert [o for o, _, _ in deliveries(shell)] == list(range(st.first_offset, 80))


def test_a_compressed_batch_reads_over_amqp(tmp_path: Path) -> None:
    """Stored compressed as it came (Fetch serves it so); expanded, each record is an
    AMQP message: a null value an empty body, the key the routing key and header."""
    b = Broker(now=FakeClock())
    shell = Shell(b, _store(tmp_path / "s.db"))
    _, ch = session_channel(b)
    b.queue_declare(ch, "s", durable=True, arguments=STREAM)
    q = b.vhosts["/"].queues["s"]
    for codec in (rb.GZIP, rb.LZ4, rb.ZSTD, rb.SNAPPY):
        raw = rb.encode_batch([rb.Record(0, 0, b"c%d" % codec, b"v" * 500),
                               rb.Record(1, 1, None, None)], compression=codec,
                              base_timestamp=T0)
        b.stream_publish_batch(ch, q, raw, 2)
    shell.settle()
    consume(b, shell, ch, "c", "first")
    got = []
    for d in shell.deliveries:
        h = decode_properties(d.message.properties_raw).headers
        assert h is not None
        got.append((h["x-stream-offset"], d.message.routing_key, h.get("x-kafka-value-null"),
                    len(d.message.body or b"")))
    assert got == [x for i, codec in enumerate((rb.GZIP, rb.LZ4, rb.ZSTD, rb.SNAPPY))
                   for x in ((2 * i, f"c{codec}", None, 500), (2 * i + 1, "", True, 0))]


def test_a_stored_batch_counts_each_record_in_the_size_histogram(tmp_path: Path) -> None:
    b, _, _ = mixed(tmp_path)  # two AMQP publishes, a batch of five, two more
    assert sum(b.message_sizes) == 9, "rabbitmq_message_size_bytes counts records"
