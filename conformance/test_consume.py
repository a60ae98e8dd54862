"""Consumers, prefetch, acknowledgements, basic.get, recover and requeue on close."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._raw import RawConnection, shortstr, table
from conformance._util import drain, message_count, observe, wait_until
from conformance.conftest import Names

Factory = Callable[..., pika.BlockingConnection]
Received = list[tuple[Any, pika.BasicProperties, bytes]]


def _fill(ch: BlockingChannel, queue: str, count: int, declare: bool = True) -> None:
    """Declare `queue` and publish `count` numbered messages with confirms."""
    if declare:
        ch.queue_declare(queue)
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", queue, str(i).encode())


def _collector(store: Received) -> Callable[..., None]:
    def on_message(_ch: Any, method: Any, props: pika.BasicProperties, body: bytes) -> None:
        store.append((method, props, body))
    return on_message


def test_server_generated_consumer_tag(url: str, names: Names) -> None:
    """pika always picks its own tag, so ask for an empty one on a raw connection."""
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        raw.queue_declare(queue)
        tags = []
        for _ in range(2):
            raw.send_method(1, 60, 20, b"\x00\x00" + shortstr(queue) + shortstr("") + b"\x00"
                            + table())
            ok = raw.expect((60, 21), channel=1)
            tags.append(ok.args[1 : 1 + ok.args[0]].decode())
        assert all(t.startswith("amq.ctag-") for t in tags)
        assert tags[0] != tags[1]
        # A client-chosen tag is echoed back; reusing it on the channel is 530.
        raw.send_method(1, 60, 20, b"\x00\x00" + shortstr(queue) + shortstr("mine") + b"\x00"
                        + table())
        ok = raw.expect((60, 21), channel=1)
        assert ok.args[1:5] == b"mine"
        raw.send_method(1, 60, 20, b"\x00\x00" + shortstr(queue) + shortstr("mine") + b"\x00"
                        + table())
        close = raw.read_method()
        assert close.ids == (10, 50)
        assert close.close_reason() == (530, "NOT_ALLOWED - attempt to reuse consumer tag 'mine'")
    finally:
        raw.sock.close()


def test_round_robin_two_consumers(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    got: Received = []
    t1 = ch.basic_consume(queue, _collector(got), auto_ack=True)
    t2 = ch.basic_consume(queue, _collector(got), auto_ack=True)
    _fill(connection.channel(), queue, 10, declare=False)
    wait_until(connection, lambda: len(got) == 10)
    tags = [m.consumer_tag for m, _, _ in got]
    assert tags.count(t1) == tags.count(t2) == 5
    assert all(a != b for a, b in itertools.pairwise(tags)), "strict alternation"
    assert [b for _, _, b in got] == [str(i).encode() for i in range(10)]


def test_prefetch_per_consumer_never_exceeded(connection: pika.BlockingConnection,
                                              names: Names) -> None:
    queue = names.queue()
    _fill(connection.channel(), queue, 20)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=3)  # global=false: each consumer may hold 3
    a: Received = []
    b: Received = []
    ch.basic_consume(queue, _collector(a))
    ch.basic_consume(queue, _collector(b))
    wait_until(connection, lambda: len(a) == 3 and len(b) == 3)
    assert message_count(connection.channel(), queue) == 14
    observe(connection)
    assert (len(a), len(b)) == (3, 3)
    ch.basic_ack(a[0][0].delivery_tag)
    wait_until(connection, lambda: len(a) == 4)
    observe(connection)
    assert (len(a), len(b)) == (4, 3)
    for method, _, _ in b:
        ch.basic_ack(method.delivery_tag)
    wait_until(connection, lambda: len(b) == 6)
    assert message_count(connection.channel(), queue) == 10


def test_prefetch_global_shared_by_channel_consumers(connection: pika.BlockingConnection,
                                                     names: Names) -> None:
    q1, q2 = names.queue("a"), names.queue("b")
    _fill(connection.channel(), q1, 10)
    _fill(connection.channel(), q2, 10)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=4, global_qos=True)
    got: Received = []
    ch.basic_consume(q1, _collector(got))
    ch.basic_consume(q2, _collector(got))
    wait_until(connection, lambda: len(got) == 4)
    observe(connection)
    assert len(got) == 4
    ch.basic_ack(got[0][0].delivery_tag)
    wait_until(connection, lambda: len(got) == 5)
    observe(connection)
    assert len(got) == 5


def test_prefetch_global_and_per_consumer_combined(connection: pika.BlockingConnection,
                                                   names: Names) -> None:
    """RabbitMQ applies both: per consumer 2 (global=false) and per channel 3 (global=true)."""
    q1, q2 = names.queue("a"), names.queue("b")
    _fill(connection.channel(), q1, 10)
    _fill(connection.channel(), q2, 10)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=2)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    a: Received = []
    b: Received = []
    ch.basic_consume(q1, _collector(a))
    wait_until(connection, lambda: len(a) == 2)
    ch.basic_consume(q2, _collector(b))
    wait_until(connection, lambda: len(b) == 1)
    observe(connection)
    assert (len(a), len(b)) == (2, 1)


def test_prefetch_zero_is_unlimited(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    _fill(connection.channel(), queue, 50)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=0)
    got: Received = []
    ch.basic_consume(queue, _collector(got))
    wait_until(connection, lambda: len(got) == 50)


def test_no_ack_consumer_ignores_prefetch(connection: pika.BlockingConnection,
                                          names: Names) -> None:
    queue = names.queue()
    _fill(connection.channel(), queue, 30)
    ch = connection.channel()
    ch.basic_qos(prefetch_count=1)
    got: Received = []
    ch.basic_consume(queue, _collector(got), auto_ack=True)
    wait_until(connection, lambda: len(got) == 30)
    assert message_count(connection.channel(), queue) == 0
    assert [m.delivery_tag for m, _, _ in got] == list(range(1, 31))


def test_exclusive_consumer_blocks_others(connection: pika.BlockingConnection,
                                          names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    ch.basic_consume(queue, lambda *a: None, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().basic_consume(queue, lambda *a: None)
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use")


def test_exclusive_consume_on_queue_with_consumers_is_403(connection: pika.BlockingConnection,
                                                          names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    ch.basic_consume(queue, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().basic_consume(queue, lambda *a: None, exclusive=True)
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use")


def test_harmless_consumer_arguments_are_accepted(connection: pika.BlockingConnection,
                                                 names: Names) -> None:
    """x-cancel-on-ha-failover (mirrored queues) and unknown x- arguments are ignored."""
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    got: Received = []
    ch.basic_consume(queue, _collector(got), auto_ack=True, arguments={
        "x-cancel-on-ha-failover": True, "x-conformance-unknown": "ignored"})
    _fill(connection.channel(), queue, 3, declare=False)
    wait_until(connection, lambda: len(got) == 3)
    assert [b for _, _, b in got] == [b"0", b"1", b"2"]


def test_consume_missing_queue_is_404(channel: BlockingChannel, names: Names) -> None:
    queue = names.queue("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.basic_consume(queue, lambda *a: None)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no queue '{queue}' in vhost '/'"


def test_basic_cancel_stops_delivery(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    got: Received = []
    tag = ch.basic_consume(queue, _collector(got), auto_ack=True)
    _fill(connection.channel(), queue, 2, declare=False)
    wait_until(connection, lambda: len(got) == 2)
    ch.basic_cancel(tag)
    _fill(connection.channel(), queue, 3, declare=False)
    assert message_count(connection.channel(), queue) == 3
    observe(connection)  # let pika dispatch anything that did arrive
    assert len(got) == 2


def test_cancel_unknown_tag_is_ok(url: str) -> None:
    """pika never sends basic.cancel for a tag it does not know: use raw frames."""
    raw = RawConnection(url).open()
    try:
        raw.send_method(1, 60, 30, shortstr("never-registered") + b"\x00")
        ok = raw.expect((60, 31), channel=1)
        assert ok.args == shortstr("never-registered")
        raw.queue_declare("", exclusive=True)  # the channel is still open
    finally:
        raw.close()


def test_server_cancel_when_queue_deleted(connection: pika.BlockingConnection,
                                          connection_factory: Factory, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    cancelled: list[Any] = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume(queue, lambda *a: None)
    connection_factory().channel().queue_delete(queue)
    wait_until(connection, lambda: bool(cancelled), what="server-sent basic.cancel")
    assert cancelled == [tag]
    assert ch.is_open


def test_basic_get_and_get_empty(channel: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    _fill(channel, queue, 3)
    method, _props, body = channel.basic_get(queue, auto_ack=False)
    assert (body, method.message_count, method.redelivered) == (b"0", 2, False)
    assert method.exchange == "" and method.routing_key == queue
    channel.basic_ack(method.delivery_tag)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"1", 1)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"2", 0)
    assert channel.basic_get(queue) == (None, None, None)


def test_get_ignores_prefetch(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 3)
    ch.basic_qos(prefetch_count=1)
    gets = [ch.basic_get(queue, auto_ack=False)[0] for _ in range(3)]
    assert all(m is not None for m in gets)


def test_nack_requeue_and_drop(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 4)
    got = drain(ch, queue, 4, auto_ack=False)
    ch.basic_nack(got[1][0].delivery_tag, multiple=True, requeue=True)  # tags 1, 2 back
    ch.basic_nack(got[2][0].delivery_tag, requeue=False)  # 3 dropped (no DLX)
    ch.basic_reject(got[3][0].delivery_tag, requeue=True)  # 4 back
    again = drain(ch, queue, 3)
    assert [b for _, _, b in again] == [b"0", b"1", b"3"]
    assert all(m.redelivered for m, _, _ in again)
    assert ch.basic_get(queue) == (None, None, None)


def test_reject_without_requeue_drops(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 1)
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_reject(method.delivery_tag, requeue=False)
    assert message_count(ch, queue) == 0


def test_ack_multiple(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 5)
    got = drain(ch, queue, 5, auto_ack=False)
    ch.basic_ack(got[2][0].delivery_tag, multiple=True)  # acks 1..3
    ch.close()
    ch = connection.channel()
    again = drain(ch, queue, 2)
    assert [b for _, _, b in again] == [b"3", b"4"]


def test_ack_zero_multiple_acks_everything(connection: pika.BlockingConnection,
                                           names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 3)
    drain(ch, queue, 3, auto_ack=False)
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert message_count(connection.channel(), queue) == 0


def test_ack_unknown_tag_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.basic_ack(5)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 5"


def test_double_ack_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 1)
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=False)
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - unknown delivery tag {method.delivery_tag}")


@pytest.mark.parametrize("action", ["nack", "reject"])
def test_nack_reject_unknown_tag_is_406(connection: pika.BlockingConnection, action: str) -> None:
    ch = connection.channel()
    if action == "nack":
        ch.basic_nack(7)
    else:
        ch.basic_reject(7)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - unknown delivery tag 7"


def test_ack_of_no_ack_delivery_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 1)
    [(method, _, _)] = drain(ch, queue, 1, auto_ack=True)
    ch.basic_ack(method.delivery_tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406


def test_delivery_tags_are_per_channel(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    _fill(connection.channel(), queue, 4)
    c1, c2 = connection.channel(), connection.channel()
    tags = [c.basic_get(queue)[0].delivery_tag for c in (c1, c2, c1, c2)]
    assert tags == [1, 1, 2, 2]


def test_recover_requeue_redelivers(connection: pika.BlockingConnection, names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue)
    got: Received = []
    ch.basic_consume(queue, _collector(got))
    _fill(connection.channel(), queue, 3, declare=False)
    wait_until(connection, lambda: len(got) == 3)
    assert not any(m.redelivered for m, _, _ in got)
    ch.basic_recover(requeue=True)
    wait_until(connection, lambda: len(got) == 6)
    again = got[3:]
    assert [b for _, _, b in again] == [b"0", b"1", b"2"]
    assert all(m.redelivered for m, _, _ in again)
    assert [m.delivery_tag for m, _, _ in got] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("close", ["channel", "connection"])
def test_requeue_on_close_keeps_order(connection_factory: Factory, names: Names,
                                      close: str) -> None:
    queue = names.queue()
    observer = connection_factory()
    _fill(observer.channel(), queue, 6)
    consumer_conn = connection_factory()
    ch = consumer_conn.channel()
    got: Received = []
    ch.basic_consume(queue, _collector(got))
    wait_until(consumer_conn, lambda: len(got) == 6)
    ch.basic_ack(got[1][0].delivery_tag)  # "1" is done; the rest go back
    if close == "channel":
        ch.close()
    else:
        consumer_conn.close()
    check = observer.channel()
    back = drain(check, queue, 5)
    assert [b for _, _, b in back] == [b"0", b"2", b"3", b"4", b"5"]
    assert all(m.redelivered for m, _, _ in back)


def test_requeued_messages_go_before_newer_ones(connection: pika.BlockingConnection,
                                                names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    _fill(ch, queue, 3)
    first = drain(ch, queue, 1, auto_ack=False)
    ch.basic_publish("", queue, b"3")
    ch.basic_nack(first[0][0].delivery_tag, requeue=True)
    rest = drain(ch, queue, 4)
    assert [b for _, _, b in rest] == [b"0", b"1", b"2", b"3"]
    assert [m.redelivered for m, _, _ in rest] == [True, False, False, False]


def test_consumer_receives_backlog_in_order(connection: pika.BlockingConnection,
                                            names: Names) -> None:
    queue = names.queue()
    _fill(connection.channel(), queue, 100)
    ch = connection.channel()
    got: Received = []
    ch.basic_consume(queue, _collector(got), auto_ack=True)
    wait_until(connection, lambda: len(got) == 100)
    assert [b for _, _, b in got] == [str(i).encode() for i in range(100)]
    method = got[0][0]
    assert (method.exchange, method.routing_key, method.redelivered) == ("", queue, False)
