"""Messages no consumer's selector matches (parked) still count for the queue's
length and byte limits and still expire: plain calls on a pure broker."""

from __future__ import annotations

from amqplite.broker.core import Broker
from amqplite.broker.selector import parse
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.broker.conftest import FakeClock


def _node(arguments: dict) -> tuple[Broker, FakeClock, object]:
    clock = FakeClock()
    b = Broker(now=clock)
    s = b.open_session("guest", "/")
    ch = b.open_channel(s, 1)
    b.queue_declare(ch, "q", arguments=arguments)
    b.basic_consume(b.open_channel(s, 2), "q", "only-a", selector=parse("k = 'a'"))
    return b, clock, ch


def _publish(b: Broker, ch: object, n: int, size: int = 10) -> None:
    table = FieldTable()
    table.set("k", "b", "S")
    props = encode_properties(BasicProperties(headers=table))
    for _ in range(n):
        b.basic_publish(ch, "", "q", props, b"x" * size)  # type: ignore[arg-type]


def test_parked_messages_count_for_max_length() -> None:
    b, _, ch = _node({"x-max-length": 2})
    _publish(b, ch, 5)
    q = b.vhosts["/"].queues["q"]
    assert len(q.parked) == 2 and q.message_count == 2, "drop-head kept the newest two"


def test_parked_messages_count_for_max_bytes_and_reject_publish() -> None:
    b, _, ch = _node({"x-max-length-bytes": 25, "x-overflow": "reject-publish"})
    _publish(b, ch, 5)
    q = b.vhosts["/"].queues["q"]
    assert q.message_count == 2 and q.backlog() == (2, 20)


def test_parked_messages_expire() -> None:
    b, clock, ch = _node({"x-message-ttl": 1000})
    _publish(b, ch, 3)
    q = b.vhosts["/"].queues["q"]
    assert len(q.parked) == 3
    clock.t += 2
    b.tick()
    assert q.message_count == 0 and not q.parked
