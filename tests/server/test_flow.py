"""Credit flow on a live broker: a publisher is taken in as fast as a queue's
consumers drain it, not faster (the backlog in between is latency), while a
queue whose consumer is slow or stuck still buffers everything at once."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqplite.broker.publish import FLOW_READY
from conformance._raw import RawConnection, shortstr, table
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
COUNT = 20_000
BODY = 512

#: A fast consumer in its own process: the benchmark's asyncio client (it parses
#: deliveries several times faster than the broker sends them), prefetch 100, one
#: multiple ack per read. Prints "ready", then the count once it has COUNT.
FAST_CONSUMER = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from amqpbench import wire
from amqpbench.client import Connection

async def main(url, queue, count):
    conn = await Connection.open(url)
    done = asyncio.get_running_loop().create_future()
    state = {"n": 0, "tag": 0, "acked": 0}
    def on_deliver(tag, _stamp):
        state["n"] += 1
        state["tag"] = tag
        if state["n"] >= count and not done.done():
            done.set_result(None)
    def after_batch():
        if state["tag"] > state["acked"]:
            conn.write(wire.ack(1, state["tag"], multiple=True))
            state["acked"] = state["tag"]
    conn.protocol.on_deliver = on_deliver
    conn.protocol.after_batch = after_batch
    await conn.qos(100)
    await conn.consume(queue, no_ack=False)
    print("ready", flush=True)
    await asyncio.wait_for(done, 120)
    print(state["n"], flush=True)
    await conn.close()

asyncio.run(main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("flow")).start()
    yield b
    b.stop()


def flood_then_count(b: BrokerProcess, queue: str, count: int) -> int:
    """Write ``count`` publishes in one go, then a passive queue.declare on the same
    channel: its message_count is the queue's backlog right after the broker has
    read the last publish (frames of one channel are handled in order)."""
    raw = RawConnection(b.url, timeout=60).open()
    try:
        one = raw.publish_frames("", queue, b"\x00" * BODY)
        raw.send_raw(one * count)
        raw.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(queue) + b"\x01" + table())
        ok = raw.expect((50, 11), channel=1)
        name_len = ok.args[0]
        message_count, _consumers = struct.unpack_from(">II", ok.args, 1 + name_len)
        return int(message_count)
    finally:
        raw.close()


def test_a_publisher_is_taken_in_at_its_fast_consumers_pace(broker: BrokerProcess) -> None:
    setup = connect(broker)
    setup.channel().queue_declare("flow-fast")
    setup.close()
    consumer = subprocess.Popen(
        [sys.executable, "-c", FAST_CONSUMER, str(SCRIPTS), broker.url, "flow-fast", str(COUNT)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline().strip() == "ready"
        backlog = flood_then_count(broker, "flow-fast", COUNT)
        out, _ = consumer.communicate(timeout=120)
        assert out.strip() == str(COUNT)  # everything arrived
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    # Without credit flow the broker reads the whole flood at once and most of it
    # waits in the queue (about 60 % of COUNT on this machine); with it, reading
    # stops while the queue holds more than FLOW_READY, so what is left is about
    # FLOW_READY plus one read's worth. The bound leaves room for a consumer that
    # the machine starved long enough to be taken for a slow one once.
    assert backlog < COUNT // 4, backlog


def test_a_stuck_consumer_does_not_hold_the_publisher(broker: BrokerProcess) -> None:
    """A consumer that never acks fills its prefetch and stops: the publisher's
    messages are all taken in and confirmed, as RabbitMQ does (the queue buffers)."""
    stuck = connect(broker)
    sch = stuck.channel()
    sch.queue_declare("flow-stuck")
    sch.basic_qos(prefetch_count=1)
    sch.basic_consume("flow-stuck", lambda *a: None, auto_ack=False)
    stuck.process_data_events(time_limit=0)
    pub = connect(broker)
    pch = pub.channel()
    pch.confirm_delivery()
    n = 4 * FLOW_READY
    for i in range(n):  # each publish waits for its confirm: one read per message
        pch.basic_publish("", "flow-stuck", b"%d" % i)
    assert wait_for(lambda: pch.queue_declare("flow-stuck", passive=True).method.message_count
                    == n - 1, what="all but the one delivered in the queue")
    pub.close()
    stuck.close()
