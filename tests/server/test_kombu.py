"""kombu (py-amqp underneath, as Celery uses it) against the real broker."""

from __future__ import annotations

import uuid

import pytest

from tests.brokerproc import BrokerProcess

kombu = pytest.importorskip("kombu")


@pytest.mark.parametrize("login_method", ["AMQPLAIN", "PLAIN"])
def test_kombu_task_queue_round_trip(broker: BrokerProcess, login_method: str) -> None:
    from kombu import Connection, Exchange, Queue

    name = f"celery-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}//"
    with Connection(url, login_method=login_method, heartbeat=10) as conn:
        exchange = Exchange(name, type="direct", durable=True)
        queue = Queue(name, exchange, routing_key="task", durable=True,
                      queue_arguments={"x-max-priority": 10})
        with conn.Producer() as producer:
            for i in range(10):
                producer.publish({"task": "add", "args": [i, i]}, exchange=exchange,
                                 routing_key="task", declare=[queue], serializer="json",
                                 delivery_mode=2, priority=i % 3)
        got: list[dict] = []

        def on_message(body: dict, message: object) -> None:
            got.append(body)
            message.ack()  # type: ignore[attr-defined]

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]) as consumer:
            consumer.qos(prefetch_count=4)
            while len(got) < 10:
                conn.drain_events(timeout=10)
        assert sorted(b["args"][0] for b in got) == list(range(10))
        # priority 2 messages come first, as a priority queue serves them
        assert {b["args"][0] % 3 for b in got[:3]} == {2}
        queue(conn.default_channel).delete()
        exchange(conn.default_channel).delete()


def test_kombu_simple_queue(broker: BrokerProcess) -> None:
    from kombu import Connection

    name = f"simple-{uuid.uuid4().hex[:8]}"
    with Connection(f"amqp://guest:guest@127.0.0.1:{broker.port}//") as conn:
        q = conn.SimpleQueue(name)
        q.put({"hello": "world"})
        msg = q.get(block=True, timeout=10)
        assert msg.payload == {"hello": "world"}
        msg.ack()
        q.close()  # cancel the consumer first: deleting under it sends basic.cancel
        conn.default_channel.queue_delete(name)
