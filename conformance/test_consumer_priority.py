"""Consumer priorities (``x-priority``) and single active consumer queues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from conformance._util import observe, wait_until

SAC = {"x-single-active-consumer": True}


class Sink:
    """A consumer that records deliveries and can ack them later."""

    def __init__(self, ch: BlockingChannel, queue: str, *, prefetch: int = 0,
                 priority: int | None = None, tag: str | None = None) -> None:
        self.ch = ch
        self.got: list[tuple[Any, bytes]] = []
        if prefetch:
            ch.basic_qos(prefetch_count=prefetch)
        args = {"x-priority": priority} if priority is not None else None
        self.tag = ch.basic_consume(queue, self._on, arguments=args,
                                    consumer_tag=tag)  # type: ignore[arg-type]

    def _on(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        self.got.append((method, body))

    def bodies(self) -> list[bytes]:
        return [b for _, b in self.got]


def _publish(ch: BlockingChannel, queue: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        ch.basic_publish("", queue, str(i).encode())


def test_higher_priority_consumer_gets_everything_while_it_has_room(
    connection: pika.BlockingConnection, names: Any,
) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q)
    low = Sink(connection.channel(), q, priority=1)
    high = Sink(connection.channel(), q, priority=10)
    _publish(ch, q, 10)
    wait_until(connection, lambda: len(high.got) == 10, what="10 deliveries to the high one")
    observe(connection)
    assert low.got == []
    assert high.bodies() == [str(i).encode() for i in range(10)]


def test_lower_priority_consumer_gets_messages_when_higher_ones_are_full(
    connection: pika.BlockingConnection, names: Any,
) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q)
    low = Sink(connection.channel(), q, prefetch=100, priority=-5)
    high = Sink(connection.channel(), q, prefetch=2, priority=5)
    default = Sink(connection.channel(), q, prefetch=3)  # priority 0
    _publish(ch, q, 10)
    wait_until(connection, lambda: len(low.got) + len(high.got) + len(default.got) == 10,
               what="10 deliveries")
    assert len(high.got) == 2
    assert len(default.got) == 3
    assert len(low.got) == 5
    # an ack makes room in the highest one: the next message goes there
    high.ch.basic_ack(high.got[0][0].delivery_tag)
    _publish(ch, q, 1, start=10)
    wait_until(connection, lambda: len(high.got) == 3, what="the high consumer to get room")
    observe(connection)
    assert len(low.got) == 5


def test_equal_priorities_take_turns(connection: pika.BlockingConnection, names: Any) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q)
    a = Sink(connection.channel(), q, priority=3)
    b = Sink(connection.channel(), q, priority=3)
    low = Sink(connection.channel(), q)
    _publish(ch, q, 10)
    wait_until(connection, lambda: len(a.got) + len(b.got) == 10, what="10 deliveries")
    assert (len(a.got), len(b.got)) == (5, 5)
    observe(connection)
    assert low.got == []


def test_invalid_priority_refused(channel: BlockingChannel, names: Any) -> None:
    q = names.queue()
    channel.queue_declare(q)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.basic_consume(q, lambda *a: None, arguments={"x-priority": "high"})
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{q}' in vhost '/': "
        '"expected integer, got longstr"')


# ----------------------------------------------------------- single active consumer
def test_single_active_consumer_gets_everything(
    connection: pika.BlockingConnection, names: Any,
) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q, arguments=SAC)
    first = Sink(connection.channel(), q)
    second = Sink(connection.channel(), q)
    assert ch.queue_declare(q, passive=True).method.consumer_count == 2
    _publish(ch, q, 6)
    wait_until(connection, lambda: len(first.got) == 6, what="6 deliveries to the first")
    observe(connection)
    assert second.got == []


def test_next_consumer_takes_over_with_requeued_messages(
    connection: pika.BlockingConnection,
    connection_factory: Callable[..., pika.BlockingConnection],
    names: Any,
) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q, arguments=SAC)
    first_conn = connection_factory()
    first = Sink(first_conn.channel(), q, prefetch=2)
    second = Sink(connection.channel(), q)
    third = Sink(connection.channel(), q)
    _publish(ch, q, 5)
    wait_until(first_conn, lambda: len(first.got) == 2, what="2 deliveries to the first")
    first.ch.basic_ack(first.got[0][0].delivery_tag)  # message 0 done, 1 unacked
    wait_until(first_conn, lambda: len(first.got) == 3, what="a third delivery")
    first_conn.close()  # messages 1 and 2 go back; the second consumer takes over
    wait_until(connection, lambda: len(second.got) == 4, what="4 deliveries to the second")
    assert second.bodies() == [b"1", b"2", b"3", b"4"]
    assert [m.redelivered for m, _ in second.got] == [True, True, False, False]
    observe(connection)
    assert third.got == []
    # cancelling the active one hands the queue to the next in line
    second.ch.basic_cancel(second.tag)
    _publish(ch, q, 1, start=5)
    wait_until(connection, lambda: len(third.got) == 1, what="the third consumer")


def test_single_active_consumer_equivalence(channel: BlockingChannel, names: Any) -> None:
    q = names.queue()
    channel.queue_declare(q, arguments=SAC)
    channel.queue_declare(q, arguments=SAC)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.queue_declare(q)
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue '{q}' "
        "in vhost '/': received none but current is the value 'true' of type 'bool'")


def test_single_active_consumer_type_checked(channel: BlockingChannel, names: Any) -> None:
    q = names.queue()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        channel.queue_declare(q, arguments={"x-single-active-consumer": "yes"})
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{q}' "
        "in vhost '/': {unacceptable_type,longstr}")


def test_single_active_consumer_hands_over_to_highest_priority(
    connection: pika.BlockingConnection, names: Any,
) -> None:
    q = names.queue()
    ch = connection.channel()
    ch.queue_declare(q, arguments=SAC)
    first = Sink(connection.channel(), q)
    low = Sink(connection.channel(), q, priority=1)
    high = Sink(connection.channel(), q, priority=7)
    _publish(ch, q, 2)
    # a later, higher-priority consumer does not take over from the active one
    wait_until(connection, lambda: len(first.got) == 2, what="the first consumer")
    first.ch.basic_cancel(first.tag)
    _publish(ch, q, 2, start=2)
    wait_until(connection, lambda: len(high.got) == 2, what="the high-priority consumer")
    observe(connection)
    assert low.got == []
