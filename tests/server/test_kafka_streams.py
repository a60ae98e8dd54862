"""Kafka topics are streams AMQP clients read and write (issue 37), end to end: the
in-process server on a real SQLite file, the topic commands called on its loop as the
Kafka shell will call them (the Kafka listener comes with the wire codecs), pika as
the AMQP client. An ``acks=all`` produce is answered from its Confirm after the
commit; Fetch reads through the store writer; a long poll wakes on an AMQP publish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import trio

from amqplite.broker.model import ChannelState
from amqplite.config import Settings
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import Record
from amqplite.server.app import Server
from amqplite.sessions.kafka.topics import Fetched, Topics

TOPIC = "events"


class ConfirmSink:
    """The broker session's transport, as the Kafka connection will be: it is told
    of the Confirms covering its produces (after their commit) and nothing else."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.changed = trio.Event()

    def send_confirm(self, ch: ChannelState, upto: int, multiple: bool, nack: bool) -> None:
        assert not nack
        self.confirmed = max(self.confirmed, upto)
        self.changed.set()
        self.changed = trio.Event()

    def flush(self) -> None:
        pass

    async def wait(self, seq: int) -> None:
        while self.confirmed < seq:
            await self.changed.wait()


def amqp_reads_and_writes(port: int) -> list[Any]:
    """A pika stream consumer from the first offset (three Kafka records), then a
    publish into the stream; returns what it received."""
    conn = pika.BlockingConnection(pika.URLParameters(
        f"amqp://guest:guest@127.0.0.1:{port}/%2F?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        got: list[Any] = []
        for method, props, body in ch.consume(TOPIC, arguments={"x-stream-offset": "first"},
                                              inactivity_timeout=30):
            assert method is not None, "no delivery within 30 s"
            got.append((method.routing_key, props.timestamp, props.headers, body))
            ch.basic_ack(method.delivery_tag)
            if len(got) == 3:
                break
        ch.cancel()
        ch.confirm_delivery()
        ch.basic_publish("", TOPIC, b"from amqp", pika.BasicProperties(
            delivery_mode=2, timestamp=1_700_000_500, headers={"trace": "t-1"}))
        return got
    finally:
        conn.close()


async def test_kafka_and_amqp_share_a_stream(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        b = server.broker
        topics = Topics(b)
        sink = ConfirmSink()
        s = b.open_session("guest", "/", "kafka-test")
        s.protocol = "Kafka"
        s.transport = sink
        ch = b.open_channel(s, 1)
        b.confirm_select(ch)

        assert server.execute(topics.create_topic, ch, TOPIC).error == ErrorCode.NONE
        await server.committed()
        records = [Record(i, 1_700_000_000_000 + i * 1500, b"user-%d" % i, b"value-%d" % i,
                          [("source", b"kafka")]) for i in range(3)]
        p = server.execute(topics.produce, ch, TOPIC, 0, records)
        assert (p.error, p.base_offset, p.seq) == (ErrorCode.NONE, 0, 3)
        with trio.fail_after(30):
            await sink.wait(3)  # acks=all: the answer may leave now

        woken = trio.Event()
        cancel = topics.wait_append("/", TOPIC, 0, woken.set)
        assert cancel is not None
        got = await trio.to_thread.run_sync(amqp_reads_and_writes, server.listen_ports[0])
        assert [(rk, ts, h["x-kafka-key"], h["source"], h["x-stream-offset"], body)
                for rk, ts, h, body in got] == [
            ("user-0", 1_700_000_000, "user-0", "kafka", 0, b"value-0"),
            ("user-1", 1_700_000_001, "user-1", "kafka", 1, b"value-1"),
            ("user-2", 1_700_000_003, "user-2", "kafka", 2, b"value-2")]
        assert got[1][2]["x-kafka-timestamp"] == 1_700_000_001_500
        with trio.fail_after(30):
            await woken.wait()  # the AMQP publish woke the long poll

        read = topics.fetch(ch, TOPIC, 0, 0, 1 << 20)
        assert read.read and read.high_watermark == 4
        server.interpret()
        chunks = await server.persist.read("fetch_stream", read.queue_id, read.lo, read.limit)
        fetched = topics.fetched(read, chunks)
        assert isinstance(fetched, Fetched)
        assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in fetched.records] == [
            (0, b"user-0", b"value-0", 1_700_000_000_000, [("source", b"kafka")]),
            (1, b"user-1", b"value-1", 1_700_000_001_500, [("source", b"kafka")]),
            (2, b"user-2", b"value-2", 1_700_000_003_000, [("source", b"kafka")]),
            (3, None, b"from amqp", 1_700_000_500_000, [("trace", b"t-1")])]
        nursery.cancel_scope.cancel()
