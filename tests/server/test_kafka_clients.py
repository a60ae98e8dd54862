"""Kafka's own clients against a broker subprocess (issue 37): kcat, confluent-kafka
(librdkafka), aiokafka and kafka-python 3, each as its users run it, without consumer
groups (test_kafka_groups.py has those). Every wait has a deadline."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.brokerproc import BrokerProcess
from tests.server.kafkaclient import aiokafka_read, bootstrap, kafka_broker, kafka_port

DEADLINE = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with kafka_broker(tmp_path / "data") as b:
        yield b


def read_partition(bs: str, topic: str, partition: int, n: int) -> list[Any]:
    """``n`` records of one partition from offset 0, assigned (no group)."""
    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        got: list[Any] = []
        end = time.monotonic() + DEADLINE
        while len(got) < n and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_lists_produces_and_consumes(broker: BrokerProcess) -> None:
    bs = bootstrap(broker)
    subprocess.run(["kcat", "-b", bs, "-P", "-t", "t1", "-X", "acks=all"],
                   input=b"one\ntwo\nthree\n", check=True, timeout=DEADLINE)
    out = subprocess.run(["kcat", "-b", bs, "-C", "-t", "t1", "-e", "-f", "%o:%s\n"],
                         capture_output=True, check=True, timeout=DEADLINE)
    assert out.stdout.decode().split() == ["0:one", "1:two", "2:three"]
    listed = subprocess.run(["kcat", "-b", bs, "-L"], capture_output=True, check=True,
                            timeout=DEADLINE).stdout.decode()
    assert f"broker 0 at 127.0.0.1:{kafka_port(broker)}" in listed
    assert 'topic "t1" with 1 partitions' in listed


def test_confluent_idempotent_lz4_into_three_partitions(broker: BrokerProcess) -> None:
    bs = bootstrap(broker)
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1,
                                  config={"retention.ms": "3600000"})])["orders"].result(
        DEADLINE)
    p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True,
                  "compression.type": "lz4", "linger.ms": 5})
    failed: list[Any] = []
    for i in range(60):
        p.produce("orders", key=f"user-{i % 7}", value=f"order-{i}",
                  headers={"n": str(i)},
                  on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(DEADLINE) == 0 and not failed
    seen: dict[str, list[int]] = {}
    total = 0
    marks = Consumer({"bootstrap.servers": bs, "group.id": "x"})
    for part in range(3):
        # everything the partition holds: its high watermark says how many
        lo, hi = marks.get_watermark_offsets(TopicPartition("orders", part), timeout=DEADLINE)
        records = read_partition(bs, "orders", part, hi) if hi else []
        assert lo == 0 and len(records) == hi
        total += hi
        for m in records:
            key = m.key().decode()
            seen.setdefault(key, []).append(int(dict(m.headers())["n"]))
            assert m.partition() == part
    assert total == 60
    marks.close()
    for key, ns in seen.items():  # per-key order, each key on one partition
        assert ns == sorted(ns), key
    configs = admin.describe_configs([ConfigResource("topic", "orders")])
    got = next(iter(configs.values())).result(DEADLINE)
    assert got["retention.ms"].value == "3600000"
    admin.delete_topics(["orders"])["orders"].result(DEADLINE)
    assert "orders" not in admin.list_topics(timeout=DEADLINE).topics


def test_kafka_python_and_aiokafka(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    bs = bootstrap(broker)
    kp = KafkaProducer(bootstrap_servers=bs, acks="all")
    for i in range(5):
        kp.send("kp", key=b"k", value=b"kp-%d" % i).get(timeout=DEADLINE)
    kp.close()
    kc = KafkaConsumer("kp", bootstrap_servers=bs, auto_offset_reset="earliest",
                       consumer_timeout_ms=int(DEADLINE * 1000))
    got = []
    for m in kc:
        got.append(m.value)
        if len(got) == 5:
            break
    kc.close()
    assert got == [b"kp-%d" % i for i in range(5)]

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaProducer

        pr = AIOKafkaProducer(bootstrap_servers=bs, compression_type="gzip", acks="all")
        await pr.start()
        try:
            for i in range(5):
                await pr.send_and_wait("ak", b"ak-%d" % i)
        finally:
            await pr.stop()
        return await aiokafka_read(bs, "ak", 5, DEADLINE)
    assert asyncio.run(aio()) == [b"ak-%d" % i for i in range(5)]


def test_acks_all_survives_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafka_broker(data) as b:
        bs = bootstrap(b)
        p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0})
        acked: list[int] = []
        for i in range(200):
            p.produce("durable", value=b"%d" % i,
                      on_delivery=lambda err, m: acked.append(m.offset()) if not err else None)
        p.flush(DEADLINE)
        assert len(acked) == 200
        b.kill()
        with kafka_broker(data) as again:
            got = read_partition(bootstrap(again), "durable", 0, 200)
            assert [m.value() for m in got] == [b"%d" % i for i in range(200)]


def test_acks_all_batches_survive_kill_9_and_read_over_amqp(tmp_path: Path) -> None:
    """Batches of many records, stored as they came: every acknowledged record is
    there after ``kill -9``, offsets go on after them, and an AMQP stream consumer
    reads each record with its own ``x-stream-offset``."""
    import pika

    data = tmp_path / "data"
    n = 3000
    with kafka_broker(data) as b:
        p = Producer({"bootstrap.servers": bootstrap(b), "acks": "all", "linger.ms": 20,
                      "enable.idempotence": True})
        acked: list[int] = []
        for i in range(n):
            p.produce("batched", key=b"k%d" % (i % 7), value=b"%d" % i,
                      on_delivery=lambda err, m: acked.append(m.offset()) if not err else None)
        assert p.flush(DEADLINE) == 0
        assert sorted(acked) == list(range(n))
        b.kill()
    with kafka_broker(data) as again:
        bs = bootstrap(again)
        got = read_partition(bs, "batched", 0, n)
        assert [(m.offset(), m.value()) for m in got] == [(i, b"%d" % i) for i in range(n)]
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        more: list[int] = []
        p.produce("batched", value=b"after", on_delivery=lambda err, m: more.append(m.offset()))
        assert p.flush(DEADLINE) == 0 and more == [n]
        conn = pika.BlockingConnection(pika.URLParameters(again.url + "?heartbeat=0"))
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=100)
            seen = []
            for method, props, body in ch.consume("batched", arguments={
                    "x-stream-offset": n - 5}, inactivity_timeout=DEADLINE):
                assert method is not None, "no delivery in time"
                seen.append((props.headers["x-stream-offset"], method.routing_key, body))
                ch.basic_ack(method.delivery_tag)
                if len(seen) == 6:
                    break
            ch.cancel()
        finally:
            conn.close()
        assert seen == [(i, f"k{i % 7}", b"%d" % i) for i in range(n - 5, n)] + [
            (n, "", b"after")]


def test_amqp_and_kafka_share_one_stream(broker: BrokerProcess) -> None:
    """A stream declared over AMQP is a topic: pika publishes, confluent-kafka reads;
    confluent-kafka produces, pika reads with ``x-stream-offset``."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.queue_declare("shared", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        ch.basic_publish("", "shared", b"from amqp", pika.BasicProperties(
            delivery_mode=2, headers={"trace": "t-1"}))
        bs = bootstrap(broker)
        [m] = read_partition(bs, "shared", 0, 1)
        assert (m.value(), m.key(), m.headers()) == (b"from amqp", None, [("trace", b"t-1")])
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        p.produce("shared", key=b"user-1", value=b"from kafka", headers={"source": b"k"})
        assert p.flush(DEADLINE) == 0
        ch.basic_qos(prefetch_count=10)
        got = []
        for method, props, body in ch.consume("shared", arguments={"x-stream-offset": "first"},
                                              inactivity_timeout=DEADLINE):
            assert method is not None, "no delivery in time"
            got.append((method.routing_key, props.headers.get("source"), body))
            ch.basic_ack(method.delivery_tag)
            if len(got) == 2:
                break
        ch.cancel()
        assert got[1] == ("user-1", "k", b"from kafka")
    finally:
        conn.close()
