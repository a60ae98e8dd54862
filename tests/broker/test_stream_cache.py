"""A stream's chunk cache and its expanded Kafka batches: found by bisection, never
more than CACHE_BYTES each, and nothing kept once the stream has no reader."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as hs

from amqplite.broker.core import Broker
from amqplite.broker.streamlog import CACHE_BYTES, Cursor, StreamLog
from amqplite.protocol import streamrecord
from tests.broker.conftest import PERSISTENT, session_channel
from tests.broker.test_stream_batches import kafka_batch, mixed
from tests.broker.test_streams import STREAM, consume

#: chunk sizes around the budget: small ones, ones a few of fill it, one over it
SIZES = hs.sampled_from([10, CACHE_BYTES // 5, CACHE_BYTES // 2, CACHE_BYTES,
                         CACHE_BYTES + 1])


def reading_log() -> tuple[StreamLog, Cursor]:
    """A stream with one reader's cursor (the cache keeps chunks only for readers)."""
    b = Broker()
    _, ch = session_channel(b)
    b.queue_declare(ch, "s", durable=True, arguments=STREAM)
    b.basic_qos(ch, 0, 10, False)
    b.basic_consume(ch, "s", "c", arguments={"x-stream-offset": "first"})
    b.start_consumer(ch, "c")
    st = b.vhosts["/"].queues["s"].stream
    assert st is not None
    [cur] = st.cursors.values()
    return st, cur


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(1, 20), SIZES), min_size=1, max_size=30),
       hs.randoms(use_true_random=False))
def test_the_cache_finds_each_chunk_and_keeps_to_its_budget(
        spans: list[tuple[int, int]], rnd: object) -> None:
    st, cur = reading_log()
    chunks: list[tuple[int, int, bytes]] = []
    lo = 0
    for count, size in spans:
        chunks.append((lo, count, bytes(size)))
        lo += count + 1  # a gap: an offset no chunk holds
    order = list(chunks)
    rnd.shuffle(order)  # type: ignore[attr-defined]
    for c in order:  # cursors read different parts of the log: chunks come in any order
        st.loaded(cur, [c])
        assert st.cache_bytes == sum(len(d) for _f, _n, d in st.cache.values())
        assert st.cache_bytes <= CACHE_BYTES
        assert st.cache_starts == sorted(st.cache)
        for probe in range(lo + 1):
            want = next((k for k in st.cache.values() if k[0] <= probe < k[0] + k[1]), None)
            assert st.cached(probe) == want
    assert all(len(c[2]) <= CACHE_BYTES for c in st.cache.values())


def test_expanded_batches_keep_to_their_budget_and_the_recent_ones_stay() -> None:
    st = StreamLog()
    batch = streamrecord.pack_batch(0, 1, 50, kafka_batch([bytes(8000)] * 50))
    one = len(st.expansion(0, batch, 0)[0])
    fits = CACHE_BYTES // one
    assert fits >= 3
    for i in range(1, 3 * fits):
        st.expansion(1000 * i, batch, 0)
        st.expansion(0, batch, 0)  # used all along: never the one to go
        assert st.expanded_bytes == sum(len(e[0]) for e in st.expanded.values())
        assert st.expanded_bytes <= CACHE_BYTES
    assert 0 in st.expanded and len(st.expanded) == fits
    big = streamrecord.pack_batch(0, 1, 5, kafka_batch([bytes(CACHE_BYTES // 4)] * 5))
    assert len(st.expansion(10**6, big, 0)[0]) > CACHE_BYTES  # read, not kept
    assert 10**6 not in st.expanded and st.expanded_bytes <= CACHE_BYTES


def test_a_stream_nobody_reads_keeps_no_chunks(tmp_path: Path) -> None:
    b, shell, ch = mixed(tmp_path)
    for i in range(20):
        b.basic_publish(ch, "", "s", PERSISTENT, b"more%d" % i)
    shell.settle()
    _, ch2 = session_channel(b)
    consume(b, shell, ch, "a", "first")
    consume(b, shell, ch2, "b", "first")
    st = b.vhosts["/"].queues["s"].stream
    assert st is not None and len(shell.deliveries) == 2 * 29
    assert st.cache and st.cache_bytes and st.expanded
    b.basic_cancel(ch, "a")
    assert st.cache and st.expanded, "b still reads"
    b.basic_cancel(ch2, "b")
    shell.settle()
    assert (st.cache, st.cache_starts, st.cache_bytes) == ({}, [], 0)
    assert (st.expanded, st.expanded_bytes) == ({}, 0)
