"""Streams over AMQP 0-9-1 (x-queue-type: stream), as RabbitMQ serves them.

A stream is an append-only log: consuming removes nothing, every consumer
reads from an offset of its choice, every delivery says its offset in the
``x-stream-offset`` header.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance.conftest import Names

STREAM = {"x-queue-type": "stream"}
Got = list[tuple[int, bytes]]


def declare(ch: BlockingChannel, name: str, **args: Any) -> None:
    ch.queue_declare(name, durable=True, arguments={**STREAM, **args})


def publish(ch: BlockingChannel, queue: str, bodies: list[bytes], exchange: str = "") -> None:
    """Publish with confirms: every body is in the log when this returns."""
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish(exchange, queue, body)


def stream_with(connection: pika.BlockingConnection, names: Names, bodies: list[bytes],
                prefetch: int) -> tuple[BlockingChannel, str]:
    """A new stream holding ``bodies``, and a channel with that prefetch."""
    q = names.queue()
    ch = connection.channel()
    declare(ch, q)
    publish(ch, q, bodies)
    ch.basic_qos(prefetch_count=prefetch)
    return ch, q


def consume(ch: BlockingChannel, queue: str, got: Got, offset: Any = None,
            *, ack: bool = True) -> str:
    """Attach a consumer appending (x-stream-offset, body) to ``got``."""
    args = {} if offset is None else {"x-stream-offset": offset}

    def on(c: BlockingChannel, m: Any, p: pika.BasicProperties, body: bytes) -> None:
        got.append((p.headers["x-stream-offset"], body))
        if ack:
            c.basic_ack(m.delivery_tag)

    return ch.basic_consume(queue, on, arguments=args)


def wait(ch: BlockingChannel, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        ch.connection.process_data_events(time_limit=0.05)


def settle(ch: BlockingChannel, seconds: float = 0.5) -> None:
    """Let the broker send anything more it would send (to assert that it sends nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ch.connection.process_data_events(time_limit=0.05)


@pytest.mark.parametrize(("flags", "prop"), [
    ({"durable": False}, "non-durable"),
    ({"durable": True, "exclusive": True}, "exclusive-owner"),
    ({"durable": True, "auto_delete": True}, "auto-delete"),
])
def test_stream_must_be_durable_shared_and_kept(channel: BlockingChannel, names: Names,
                                                flags: dict[str, bool], prop: str) -> None:
    q = names.queue()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.queue_declare(q, arguments=STREAM, **flags)
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{q}' in vhost '/'")


def test_stream_arguments_accepted(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q, **{"x-max-age": "7D", "x-max-length-bytes": 10_000_000,
                           "x-stream-max-segment-size-bytes": 1_000_000,
                           "x-initial-cluster-size": 1})
    ok = channel.queue_declare(q, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (0, 0)


@pytest.mark.parametrize(("arg", "value", "tail"), [
    ("x-max-age", "7X", ": invalid_max_age"),
    ("x-stream-max-segment-size-bytes", "big", ': "expected integer, got longstr"'),
    ("x-max-priority", 5, " of queue type rabbit_stream_queue"),
    ("x-message-ttl", 1000, " of queue type rabbit_stream_queue"),
    ("x-dead-letter-exchange", "dlx", " of queue type rabbit_stream_queue"),
    # no single active consumer on streams over AMQP in 3.10 (amqplite's consumer groups
    # are consumer arguments instead, see docs/streams.md)
    ("x-single-active-consumer", True, " of queue type rabbit_stream_queue"),
])
def test_bad_or_queue_only_arguments_refused(channel: BlockingChannel, names: Names, arg: str,
                                             value: Any, tail: str) -> None:
    q = names.queue()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        declare(channel, q, **{arg: value})
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{q}' in vhost '/'{tail}")


@pytest.mark.parametrize(("args", "text"), [
    ({}, "'x-queue-type' for queue '{q}' in vhost '/': received none but current is the "
         "value 'stream' of type 'longstr'"),
    ({**STREAM, "x-max-age": "2h"}, "'x-max-age' for queue '{q}' in vhost '/': received "
                                    "'2h' but current is '1h'"),
])
def test_redeclare_must_be_equivalent(connection: pika.BlockingConnection, names: Names,
                                      args: dict[str, Any], text: str) -> None:
    q = names.queue()
    connection.channel().queue_declare(q, durable=True, arguments={**STREAM, "x-max-age": "1h"})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        connection.channel().queue_declare(q, durable=True, arguments=args)
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == "PRECONDITION_FAILED - inequivalent arg " + text.format(q=q)


@pytest.mark.parametrize(("command", "call"), [
    ("basic.get", lambda ch, q: ch.basic_get(q)),
    ("queue.purge", lambda ch, q: ch.queue_purge(q)),
])
def test_get_and_purge_not_implemented(connection: pika.BlockingConnection, names: Names,
                                       command: str, call: Callable[..., Any]) -> None:
    ch = connection.channel()
    q = names.queue()
    declare(ch, q)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        call(ch, q)
    assert exc.value.reply_code == 540
    assert exc.value.reply_text == (
        f"NOT_IMPLEMENTED - {command} not supported by stream queues queue '{q}' in vhost '/'")


def test_consumer_needs_prefetch(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        consume(channel, q, [])
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - consumer prefetch count is not set for "
        f"'queue '{q}' in vhost '/''")


def test_consumer_needs_manual_acks(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    q = names.queue()
    declare(ch, q)
    ch.basic_qos(prefetch_count=10)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        ch.basic_consume(q, lambda *a: None, auto_ack=True)
    assert exc.value.reply_code == 540
    assert exc.value.reply_text == (
        "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues "
        f"queue '{q}' in vhost '/'")


def test_read_from_first_through_an_exchange(channel: BlockingChannel, names: Names) -> None:
    q, x = names.queue(), names.exchange()
    declare(channel, q)
    channel.exchange_declare(x, "fanout")
    channel.queue_bind(q, x)
    bodies = [f"m{i}".encode() for i in range(20)]
    publish(channel, "", bodies, exchange=x)
    channel.basic_qos(prefetch_count=5)
    got: Got = []
    consume(channel, q, got, "first")
    wait(channel, lambda: len(got) >= 20)
    assert [b for _, b in got] == bodies
    offsets = [o for o, _ in got]
    assert offsets == sorted(set(offsets))  # strictly increasing
    assert offsets == list(range(offsets[0], offsets[0] + 20))


def test_offset_header_is_a_long(connection: pika.BlockingConnection, names: Names) -> None:
    """The header's field type is 'l' (signed 64-bit), checked on the raw frame."""
    from pika import spec

    ch = connection.channel()
    q = names.queue()
    declare(ch, q)
    publish(ch, q, [b"x"])
    ch.basic_qos(prefetch_count=1)
    raw: list[bytes] = []
    orig = spec.BasicProperties.decode

    def spy(self: Any, encoded: bytes, offset: int = 0) -> Any:
        raw.append(bytes(encoded[offset:]))
        return orig(self, encoded, offset)

    spec.BasicProperties.decode = spy  # type: ignore[method-assign]
    try:
        got: Got = []
        consume(ch, q, got, "first")
        wait(ch, lambda: len(got) == 1)
    finally:
        spec.BasicProperties.decode = orig  # type: ignore[method-assign]
    assert any(b"\x0fx-stream-offsetl" in r for r in raw)


def test_independent_consumers_and_acks_delete_nothing(
        connection: pika.BlockingConnection, names: Names) -> None:
    q = names.queue()
    ch1, ch2 = connection.channel(), connection.channel()
    declare(ch1, q)
    bodies = [f"e{i}".encode() for i in range(10)]
    publish(ch1, q, bodies)
    a: Got = []
    b: Got = []
    ch1.basic_qos(prefetch_count=3)
    ch2.basic_qos(prefetch_count=7)
    consume(ch1, q, a, "first")
    consume(ch2, q, b, "first")
    wait(ch1, lambda: len(a) >= 10 and len(b) >= 10)
    assert [x for _, x in a] == bodies and [x for _, x in b] == bodies
    ch3 = connection.channel()
    ch3.basic_qos(prefetch_count=2)
    c: Got = []
    consume(ch3, q, c, "first")
    wait(ch3, lambda: len(c) >= 10)
    assert [x for _, x in c] == bodies


def test_default_is_next_and_waiting_consumer_gets_appends(
        connection: pika.BlockingConnection, names: Names) -> None:
    ch, q = stream_with(connection, names, [b"old1", b"old2"], 10)
    got: Got = []
    consume(ch, q, got)
    settle(ch, 0.3)
    assert got == []
    pub = connection.channel()
    publish(pub, q, [b"new1", b"new2"])
    wait(ch, lambda: len(got) >= 2)
    assert [x for _, x in got] == [b"new1", b"new2"]
    assert got[0][0] == got[1][0] - 1


def test_integer_offset(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q)
    first: Got = []
    channel.basic_qos(prefetch_count=10)
    publish(channel, q, [f"i{i}".encode() for i in range(6)])
    consume(channel, q, first, "first")
    wait(channel, lambda: len(first) >= 6)
    base = first[0][0]
    got: Got = []
    consume(channel, q, got, base + 3)
    wait(channel, lambda: any(o == base + 5 for o, _ in got))
    # RabbitMQ may start at the chunk holding the offset; what it must deliver is base+3 on
    at_or_after = [(o, x) for o, x in got if o >= base + 3]
    assert at_or_after == [(base + 3, b"i3"), (base + 4, b"i4"), (base + 5, b"i5")]


def test_last_offset_starts_near_the_end(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q)
    channel.basic_qos(prefetch_count=10)
    publish(channel, q, [f"l{i}".encode() for i in range(5)])
    got: Got = []
    consume(channel, q, got, "last")
    wait(channel, lambda: any(x == b"l4" for _, x in got))
    assert got[-1][1] == b"l4"
    assert len(got) <= 5


def test_timestamp_and_interval_offsets(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q)
    channel.basic_qos(prefetch_count=10)
    publish(channel, q, [b"t0", b"t1"])
    past: Got = []
    consume(channel, q, past, datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1))
    interval: Got = []
    consume(channel, q, interval, "1h")
    future: Got = []
    consume(channel, q, future, datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
    wait(channel, lambda: len(past) >= 2 and len(interval) >= 2)
    assert [x for _, x in past] == [b"t0", b"t1"]
    assert [x for _, x in interval] == [b"t0", b"t1"]
    settle(channel, 0.3)
    assert future == []
    publish(channel, q, [b"t2"])
    wait(channel, lambda: len(future) >= 1)
    assert [x for _, x in future] == [b"t2"]


def test_enormous_ages_are_taken(connection: pika.BlockingConnection, names: Names) -> None:
    """RabbitMQ takes a max-age of 5000 digits (keep everything) and an offset interval
    of 300 digits (from the start): no error, the connection stays open."""
    q = names.queue()
    ch = connection.channel()
    declare(ch, q, **{"x-max-age": "9" * 5000 + "s"})
    publish(ch, q, [b"a0", b"a1", b"a2"])
    ch.basic_qos(prefetch_count=10)
    got: Got = []
    consume(ch, q, got, "9" * 300 + "Y")
    wait(ch, lambda: len(got) >= 3)
    assert got == [(0, b"a0"), (1, b"a1"), (2, b"a2")]
    assert connection.is_open


@pytest.mark.parametrize("settle_with", ["nack-requeue", "nack", "reject-requeue", "reject"])
def test_nack_and_reject_not_implemented(connection: pika.BlockingConnection, names: Names,
                                         settle_with: str) -> None:
    """RabbitMQ (3.10) closes the connection: a stream has nothing to requeue or drop."""
    ch, q = stream_with(connection, names, [b"n0"], 1)
    got: Got = []
    consume(ch, q, got, "first", ack=False)
    wait(ch, lambda: len(got) == 1)
    method, _, requeue = settle_with.partition("-")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        if method == "nack":
            ch.basic_nack(1, requeue=bool(requeue))
        else:
            ch.basic_reject(1, requeue=bool(requeue))
        settle(ch, 5)
    assert exc.value.reply_code == 540
    assert exc.value.reply_text == (
        "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues "
        f"queue '{q}' in vhost '/'")


def test_unacked_on_close_are_not_redelivered(connection: pika.BlockingConnection,
                                              names: Names) -> None:
    """Closing a channel with unacked deliveries requeues nothing: a new consumer from
    first reads the log once, unchanged."""
    ch, q = stream_with(connection, names, [b"c0", b"c1"], 5)
    got: Got = []
    consume(ch, q, got, "first", ack=False)
    wait(ch, lambda: len(got) == 2)
    ch.close()
    ch2 = connection.channel()
    ch2.basic_qos(prefetch_count=5)
    again: list[tuple[bytes, bool]] = []
    ch2.basic_consume(q, lambda c, m, p, b: again.append((b, m.redelivered)),
                      arguments={"x-stream-offset": "first"})
    wait(ch2, lambda: len(again) >= 2)
    settle(ch2, 0.3)
    assert again == [(b"c0", False), (b"c1", False)]


def test_prefetch_bounds_unacked_deliveries(channel: BlockingChannel, names: Names) -> None:
    q = names.queue()
    declare(channel, q)
    publish(channel, q, [f"p{i}".encode() for i in range(10)])
    channel.basic_qos(prefetch_count=3)
    got: Got = []
    consume(channel, q, got, "first", ack=False)
    wait(channel, lambda: len(got) >= 3)
    settle(channel, 0.3)
    assert len(got) == 3


def test_super_stream_layout_routes_by_partition_key(connection: pika.BlockingConnection,
                                                     names: Names) -> None:
    """The layout rabbitmq-streams add_super_stream builds, declared over AMQP: a direct
    exchange with x-super-stream, streams bound by key with x-stream-partition-order;
    messages reach their partition by routing key, in order per partition."""
    ch = connection.channel()
    x = names.exchange("super")
    ch.exchange_declare(x, "direct", durable=True, arguments={"x-super-stream": True})
    parts = [names.queue(f"super-{i}") for i in range(3)]
    for i, q in enumerate(parts):
        declare(ch, q)
        ch.queue_bind(q, x, str(i), arguments={"x-stream-partition-order": i})
    ch.confirm_delivery()
    for n in range(12):
        ch.basic_publish(x, str(n % 3), b"p%d" % n, mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish(x, "3", b"nowhere", mandatory=True)
    ch.basic_qos(prefetch_count=10)
    got: dict[str, Got] = {q: [] for q in parts}
    for q in parts:
        consume(ch, q, got[q], "first")
    wait(ch, lambda: all(len(v) >= 4 for v in got.values()))
    for i, q in enumerate(parts):
        assert [b for _, b in got[q]] == [b"p%d" % n for n in range(i, 12, 3)]
        assert [o for o, _ in got[q]] == sorted(o for o, _ in got[q])
