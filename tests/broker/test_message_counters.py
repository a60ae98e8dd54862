"""The per-channel and per-queue message counters behind message_stats, on the pure core."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from amqplite.broker.base import MESSAGE_SIZE_BUCKETS, Counters
from amqplite.broker.core import Broker
from amqplite.broker.effects import GetOk
from amqplite.broker.model import CHANNEL_STATS, ChannelState, channel_counts
from amqplite.broker.queue import QUEUE_STATS, queue_counts
from tests.broker.conftest import PERSISTENT, TRANSIENT, deliveries, session_channel


def counts_of(ch: ChannelState) -> dict[str, int]:
    return dict(zip(CHANNEL_STATS, channel_counts(ch), strict=True))


def test_each_outcome_is_counted_once_on_its_channel_and_queue(broker: Broker) -> None:
    _, pub = session_channel(broker, 1)
    _, con = session_channel(broker, 2)
    broker.queue_declare(pub, "q", durable=True)
    for i in range(6):
        broker.basic_publish(pub, "", "q", PERSISTENT, b"%d" % i)
    broker.basic_publish(pub, "amq.direct", "nowhere", TRANSIENT, b"r", mandatory=True)
    broker.basic_publish(pub, "amq.direct", "nowhere", TRANSIENT, b"d")
    # get: one with ack, one no-ack
    got = broker.basic_get(con, "q", no_ack=False)
    broker.basic_get(con, "q", no_ack=True)
    assert isinstance(got, GetOk)
    broker.basic_nack(con, got.delivery_tag, False, True)  # back, flagged redelivered
    broker.basic_qos(con, 0, 10, False)
    tag = broker.basic_consume(con, "q")
    broker.start_consumer(con, tag)
    ds = deliveries(broker)
    assert len(ds) == 5 and sum(d.redelivered for d in ds) == 1
    broker.basic_ack(con, ds[2].delivery_tag, multiple=True)  # 3 at once
    broker.basic_ack(con, ds[4].delivery_tag)
    broker.basic_cancel(con, tag)  # ds[3] stays unacked: not counted as acked
    assert broker.basic_get(con, "q", no_ack=True) is None

    assert counts_of(pub) == dict.fromkeys(CHANNEL_STATS, 0) | {
        "publish": 8, "return_unroutable": 1, "drop_unroutable": 1}
    assert counts_of(con) == dict.fromkeys(CHANNEL_STATS, 0) | {
        "deliver": 5, "get": 1, "get_no_ack": 1, "get_empty": 1, "ack": 4, "redeliver": 1}
    q = broker.vhosts["/"].queues["q"]
    assert dict(zip(QUEUE_STATS, queue_counts(q), strict=True)) == {
        "deliver": 5, "deliver_no_ack": 0, "get": 1, "get_no_ack": 1, "get_empty": 1,
        "ack": 4, "redeliver": 1}
    assert q.deliver_get == 7


def test_no_ack_consumers_count_deliver_no_ack(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    tag = broker.basic_consume(ch, "q", no_ack=True)
    broker.start_consumer(ch, tag)
    for _ in range(3):
        broker.basic_publish(ch, "", "q", TRANSIENT, b"x")
    assert len(deliveries(broker)) == 3
    assert counts_of(ch)["deliver_no_ack"] == 3 and counts_of(ch)["ack"] == 0
    assert broker.vhosts["/"].queues["q"].n_deliver_no_ack == 3


def test_a_closed_channel_keeps_its_counts_in_its_vhost(broker: Broker) -> None:
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    broker.basic_publish(ch, "", "q", TRANSIENT, b"x")
    broker.basic_get(ch, "q", no_ack=True)
    broker.close_channel(ch)
    broker.close_channel(ch)  # twice: counted once
    vh = dict(zip(CHANNEL_STATS, broker.vhosts["/"].closed_stats, strict=True))
    assert vh["publish"] == 1 and vh["get_no_ack"] == 1


@given(st.lists(st.sampled_from([0, 1, 100, 101, 1000, 1024, 10_000, 60_000_000])
                | st.integers(0, 10**9), max_size=50), st.integers(1, 4))
def test_the_size_histogram_counts_each_publish_in_its_bucket(sizes: list[int],
                                                              folds: int) -> None:
    """Runs of one size are counted together; any split into folds gives the same."""
    c = Counters()
    step = max(1, len(sizes) // folds)
    for i in range(0, len(sizes), step):
        c.new_sizes.extend(sizes[i : i + step])
        c.fold_sizes()
    expect = [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)
    for size in sizes:
        expect[next((i for i, b in enumerate(MESSAGE_SIZE_BUCKETS) if size <= b),
                    len(MESSAGE_SIZE_BUCKETS))] += 1
    assert c.message_sizes == expect
    assert c.message_bytes == sum(sizes)
    assert c.new_sizes == []
