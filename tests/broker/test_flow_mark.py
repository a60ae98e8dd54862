"""Credit flow, the broker's half: a publish that leaves a consumed queue with a
backlog marks the publishing session ``congested`` (the shell then stops reading
from it until the consumers catch up, see server/flow.py); a queue nobody
consumes is a buffer and never marks anyone."""

from __future__ import annotations

from amqplite.broker.core import Broker
from amqplite.broker.publish import FLOW_READY
from tests.broker.conftest import TRANSIENT, session_channel


def _consumer(b: Broker, queue: str, prefetch: int) -> None:
    _s, ch = session_channel(b, 1)
    b.basic_qos(ch, 0, prefetch, False)
    tag = b.basic_consume(ch, queue, "", no_ack=False)
    b.start_consumer(ch, tag)


def test_backlog_behind_a_consumer_marks_the_publisher(broker: Broker) -> None:
    s, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    _consumer(broker, "q", prefetch=10)
    for i in range(FLOW_READY + 10):  # 10 delivered, FLOW_READY ready: not yet behind
        broker.basic_publish(ch, "", "q", TRANSIENT, b"%d" % i)
    assert s.congested is None
    broker.basic_publish(ch, "", "q", TRANSIENT, b"one more")
    assert s.congested is broker.vhosts["/"].queues["q"]


def test_a_queue_without_consumers_is_a_buffer(broker: Broker) -> None:
    s, ch = session_channel(broker)
    broker.queue_declare(ch, "q")
    for i in range(3 * FLOW_READY):
        broker.basic_publish(ch, "", "q", TRANSIENT, b"%d" % i)
    assert s.congested is None


def test_fanout_marks_the_publisher_for_the_queue_behind(broker: Broker) -> None:
    s, ch = session_channel(broker)
    broker.exchange_declare(ch, "fan", "fanout")
    for name in ("idle", "busy"):
        broker.queue_declare(ch, name)
        broker.queue_bind(ch, name, "fan", "")
    _consumer(broker, "busy", prefetch=1)
    for i in range(FLOW_READY + 2):
        broker.basic_publish(ch, "fan", "", TRANSIENT, b"%d" % i)
    assert s.congested is broker.vhosts["/"].queues["busy"]
