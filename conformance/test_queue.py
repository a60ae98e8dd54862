"""queue.declare / purge / delete: naming, counts, equivalence, exclusivity, lifetimes."""

from __future__ import annotations

from collections.abc import Callable

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._raw import RawConnection, shortstr, table
from conformance._util import eventually, queue_exists, shortstr_text, wait_until
from conformance.conftest import Names

Factory = Callable[..., pika.BlockingConnection]


def test_server_named_queue(channel: BlockingChannel, names: Names) -> None:
    ok = channel.queue_declare("", exclusive=True)
    name = ok.method.queue
    assert name.startswith("amq.gen-")
    assert len(name) > len("amq.gen-")
    names.queues.add(name)
    assert channel.queue_declare("", exclusive=True).method.queue != name


def test_declare_ok_counts(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    queue = names.queue()
    ok = ch.queue_declare(queue)
    assert (ok.method.queue, ok.method.message_count, ok.method.consumer_count) == (queue, 0, 0)
    for i in range(3):
        ch.basic_publish("", queue, str(i).encode())
    ok = ch.queue_declare(queue, passive=True)
    assert (ok.method.message_count, ok.method.consumer_count) == (3, 0)
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=1)
    consumer.basic_consume(queue, lambda *a: None)
    # one message is now unacked at the consumer: declare-ok counts ready messages only
    eventually(lambda: ch.queue_declare(queue, passive=True).method.message_count == 2)
    ok = ch.queue_declare(queue)  # non-passive redeclare reports the same counts
    assert (ok.method.message_count, ok.method.consumer_count) == (2, 1)


def test_passive_missing_is_404(channel: BlockingChannel, names: Names) -> None:
    queue = names.queue("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare(queue, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no queue '{queue}' in vhost '/'"


def test_amq_prefix_is_403(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.queue_declare("amq.conformance-reserved")
    assert info.value.reply_code == 403
    assert info.value.reply_text == (
        "ACCESS_REFUSED - queue name 'amq.conformance-reserved' contains reserved prefix 'amq.*'"
    )


@pytest.mark.parametrize(
    ("first", "second", "arg", "received", "current"),
    [
        ({"durable": False}, {"durable": True}, "durable", "'true'", "'false'"),
        ({"auto_delete": False}, {"auto_delete": True}, "auto_delete", "'true'", "'false'"),
        ({"arguments": {"x-max-length": 10}}, {"arguments": {"x-max-length": 20}},
         "x-max-length", "'20'", "'10'"),
        ({}, {"arguments": {"x-message-ttl": 1000}},
         "x-message-ttl", "the value '1000' of type 'signedint'", "none"),
    ],
    ids=["durable", "auto_delete", "arg-changed", "arg-added"],
)
def test_inequivalent_redeclare_is_406(
    connection: pika.BlockingConnection, names: Names, first: dict[str, object],
    second: dict[str, object], arg: str, received: str, current: str,
) -> None:
    queue = names.queue()
    connection.channel().queue_declare(queue, **first)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_declare(queue, **second)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{queue}' in vhost '/':"
        f" received {received} but current is {current}"
    )


def test_unknown_x_argument_is_ignored(channel: BlockingChannel, names: Names) -> None:
    queue = names.queue()
    channel.queue_declare(queue, arguments={"x-conformance-unknown": "yes"})
    channel.queue_declare(queue, arguments={"x-conformance-unknown": "other"})


def test_exclusive_queue_from_other_connection_is_405(
    connection: pika.BlockingConnection, connection_factory: Factory, names: Names,
) -> None:
    queue = names.queue()
    connection.channel().queue_declare(queue, exclusive=True)
    other = connection_factory()
    expected = shortstr_text(
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}'"
        " in vhost '/'. It could be originally declared on another connection or the"
        " exclusive property value does not match that of the original declaration."
    )
    for action in (
        lambda ch: ch.queue_declare(queue, passive=True),
        lambda ch: ch.queue_declare(queue, exclusive=True),
        lambda ch: ch.basic_consume(queue, lambda *a: None),
        lambda ch: ch.basic_get(queue),
        lambda ch: ch.queue_purge(queue),
        lambda ch: ch.queue_delete(queue),
    ):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            action(other.channel())
        assert info.value.reply_code == 405
        assert info.value.reply_text == expected
    # The owner keeps full use of it.
    assert connection.channel().queue_declare(queue, passive=True).method.queue == queue


def test_exclusive_queue_deleted_when_connection_closes(
    connection_factory: Factory, names: Names,
) -> None:
    owner = connection_factory()
    queue = names.queue()
    owner.channel().queue_declare(queue, exclusive=True)
    observer = connection_factory()
    assert queue_exists(observer, queue)
    owner.close()
    eventually(lambda: not queue_exists(observer, queue), what="exclusive queue deletion")


def test_exclusive_queue_survives_channel_close(connection: pika.BlockingConnection,
                                                names: Names) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue, exclusive=True)
    ch.close()
    assert queue_exists(connection, queue)


def test_auto_delete_goes_with_last_consumer(
    connection: pika.BlockingConnection, connection_factory: Factory, names: Names,
) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue, auto_delete=True)
    observer = connection_factory()
    # Never consumed: an auto-delete queue stays.
    assert queue_exists(observer, queue)
    t1 = ch.basic_consume(queue, lambda *a: None)
    t2 = ch.basic_consume(queue, lambda *a: None)
    ch.basic_cancel(t1)
    assert queue_exists(observer, queue)
    ch.basic_cancel(t2)
    eventually(lambda: not queue_exists(observer, queue), what="auto-delete")


def test_auto_delete_goes_when_consumer_channel_closes(
    connection: pika.BlockingConnection, connection_factory: Factory, names: Names,
) -> None:
    queue = names.queue()
    ch = connection.channel()
    ch.queue_declare(queue, auto_delete=True)
    ch.basic_consume(queue, lambda *a: None)
    ch.close()
    observer = connection_factory()
    eventually(lambda: not queue_exists(observer, queue), what="auto-delete")


def test_purge_returns_count(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    for i in range(7):
        channel.basic_publish("", queue, str(i).encode())
    assert channel.queue_purge(queue).method.message_count == 7
    assert channel.queue_purge(queue).method.message_count == 0
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_purge_keeps_unacked(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    queue = names.queue()
    ch.queue_declare(queue)
    for i in range(3):
        ch.basic_publish("", queue, str(i).encode())
    method, _, _ = ch.basic_get(queue, auto_ack=False)
    assert ch.queue_purge(queue).method.message_count == 2
    ch.basic_nack(method.delivery_tag, requeue=True)
    wait_until(connection, lambda: ch.queue_declare(queue, passive=True).method.message_count == 1)


def test_delete_if_empty_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    ch.confirm_delivery()
    queue = names.queue()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        ch.queue_delete(queue, if_empty=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == f"PRECONDITION_FAILED - queue '{queue}' in vhost '/' not empty"
    assert connection.channel().queue_delete(queue).method.message_count == 1


def test_delete_if_unused_is_406(connection: pika.BlockingConnection, names: Names) -> None:
    ch = connection.channel()
    queue = names.queue()
    ch.queue_declare(queue)
    tag = ch.basic_consume(queue, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        connection.channel().queue_delete(queue, if_unused=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == f"PRECONDITION_FAILED - queue '{queue}' in vhost '/' in use"
    ch.basic_cancel(tag)
    assert connection.channel().queue_delete(queue, if_unused=True).method.message_count == 0


def test_delete_missing_is_ok(channel: BlockingChannel, names: Names) -> None:
    ok = channel.queue_delete(names.queue("never-declared"))
    assert ok.method.message_count == 0
    assert channel.is_open


def test_delete_returns_message_count(channel: BlockingChannel, names: Names) -> None:
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    for _ in range(4):
        channel.basic_publish("", queue, b"x")
    assert channel.queue_delete(queue).method.message_count == 4
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        channel.queue_declare(queue, passive=True)


def test_declare_without_name_on_a_channel_reuses_last_queue(channel: BlockingChannel,
                                                             names: Names) -> None:
    """AMQP: an empty queue name in queue.bind/purge means the channel's last declared queue."""
    channel.confirm_delivery()
    queue = names.queue()
    channel.queue_declare(queue)
    channel.queue_bind("", "amq.direct", "conformance-last-queue")
    channel.basic_publish("amq.direct", "conformance-last-queue", b"x")
    assert channel.queue_purge("").method.message_count == 1
    channel.queue_unbind("", "amq.direct", "conformance-last-queue")


EMPTY_NAME_METHODS = {
    # method: (class_id, method_id, arguments after reserved-1 with queue name "")
    "basic.get": (60, 70, shortstr("") + b"\x01"),
    "basic.consume": (60, 20, shortstr("") + shortstr("") + b"\x00" + table()),
    "queue.bind": (50, 20, shortstr("") + shortstr("amq.direct") + shortstr("k") + b"\x00"
                   + table()),
    "queue.unbind": (50, 50, shortstr("") + shortstr("amq.direct") + shortstr("k") + table()),
    "queue.purge": (50, 30, shortstr("") + b"\x00"),
    "queue.delete": (50, 40, shortstr("") + b"\x00"),
}


@pytest.mark.parametrize("method", sorted(EMPTY_NAME_METHODS))
def test_empty_queue_name_without_a_declared_queue_is_404(url: str, method: str) -> None:
    """No queue declared on the channel yet: a channel error, not a connection error."""
    class_id, method_id, args = EMPTY_NAME_METHODS[method]
    raw = RawConnection(url).open()
    try:
        for _ in range(2):  # the reopened channel gives the same answer
            raw.send_method(1, class_id, method_id, b"\x00\x00" + args)
            assert raw.expect_close(1) == (
                404, "NOT_FOUND - no previously declared queue", class_id, method_id)
            raw.open_channel(1)
        raw.queue_declare("", exclusive=True)  # the connection is unharmed
    finally:
        raw.close()


def test_passive_declare_of_empty_name_is_404(url: str) -> None:
    raw = RawConnection(url).open()
    try:
        raw.send_method(1, 50, 10, b"\x00\x00" + shortstr("") + b"\x01" + table())
        assert raw.expect_close(1) == (404, "NOT_FOUND - no queue '' in vhost '/'", 50, 10)
    finally:
        raw.close()


def test_empty_queue_name_pika_basic_get(channel: BlockingChannel) -> None:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        channel.basic_get("")
    assert (info.value.reply_code, info.value.reply_text) == (
        404, "NOT_FOUND - no previously declared queue")
    assert channel.connection.is_open
