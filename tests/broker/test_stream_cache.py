"""A stream's chunk cache: found by bisection (each cursor looks in it per dispatch)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from amqplite.broker.core import Broker
from amqplite.broker.streamlog import CACHE_BYTES, Cursor, StreamLog
from tests.broker.conftest import session_channel
from tests.broker.test_streams import STREAM

#: chunk sizes around the budget: small ones, ones a few of fill it, one over it
SIZES = hs.sampled_from([10, CACHE_BYTES // 5, CACHE_BYTES // 2, CACHE_BYTES])


def reading_log() -> tuple[StreamLog, Cursor]:
    """A stream with one reader's cursor."""
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
def test_the_cache_finds_each_chunk(spans: list[tuple[int, int]], rnd: object) -> None:
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
        assert st.cache_starts == sorted(st.cache)
        for probe in range(lo + 1):
            want = next((k for k in st.cache.values() if k[0] <= probe < k[0] + k[1]), None)
            assert st.cached(probe) == want
