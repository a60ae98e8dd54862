"""Kafka fuzzed against the live broker: pipelined requests of every API, mutated;
sizes negative, zero and past 100 MiB; unknown API keys and versions; floods of
pipelined requests and of junk (tests/server/kafka_fuzz.py makes the cases).

Every case ends in a close or silence with whole responses in request order, and
a bad connection leaves at most one line in the broker's log (its reason for
closing); never a crash or a traceback. Between batches a long-lived
confluent-kafka producer and consumer, a fresh raw Kafka client and a pika client
on AMQP keep working. Bounded: a fixed seed, CASES cases, TIME_BUDGET seconds."""

from __future__ import annotations

import collections
import random
import re
import time
from collections.abc import Iterator

import pika
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.brokerproc import BrokerProcess
from tests.protocol.fuzz_harness import run_batches
from tests.server.conftest import connect as amqp_connect
from tests.server.kafka_fuzz import case, run_case
from tests.server.kafkaclient import bootstrap, kafka_broker, kafka_port
from tests.server.test_kafka_wire import Raw, metadata

pytestmark = pytest.mark.timeout(300)
CASES = 240
SEED = 20261129
TIME_BUDGET = 120.0
BATCH = 24
DEADLINE = 30.0
CANARY = "kfz-canary"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with kafka_broker(tmp_path_factory.mktemp("kafka-fuzz")) as b:
        yield b


class Healthy:
    """A long-lived producer (acks=all) and consumer of CANARY, a fresh raw client per
    check and an AMQP client: all keep working while the fuzz runs."""

    def __init__(self, b: BrokerProcess) -> None:
        self.b = b
        bs = bootstrap(b)
        self.producer = Producer({"bootstrap.servers": bs, "acks": "all"})
        self.producer.produce(CANARY, b"start")  # (the topic is made on first use)
        assert self.producer.flush(DEADLINE) == 0
        self.consumer = Consumer({"bootstrap.servers": bs, "group.id": "kfz-canary",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(CANARY, 0, 1)])
        self.amqp = amqp_connect(b)
        self.ch = self.amqp.channel()
        self.ch.queue_declare("kfz-amqp-canary", durable=True)
        self.ch.confirm_delivery()

    def check(self, n: int) -> None:
        value = b"alive-%d" % n
        self.producer.produce(CANARY, value)
        assert self.producer.flush(DEADLINE) == 0
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            m = self.consumer.poll(0.2)
            if m is not None and m.error() is None and m.value() == value:
                break
        else:
            raise AssertionError(f"the canary consumer did not get {value!r}")
        fresh = Raw(self.b, "kfz-fresh")
        assert metadata(fresh, [CANARY])["topics"][0]["error_code"] == 0
        fresh.close()
        self.ch.basic_publish("", "kfz-amqp-canary", value,
                              pika.BasicProperties(delivery_mode=2))
        assert self.ch.basic_get("kfz-amqp-canary", auto_ack=True)[2] == value

    def close(self) -> None:
        self.consumer.close()
        self.amqp.close()


def test_fuzzed_kafka_never_hurts_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    cases = [case(rng) for _ in range(CASES)]
    port = kafka_port(broker)
    healthy = Healthy(broker)
    kinds: dict[str, int] = {}
    locals_: list[int] = []
    t0 = time.monotonic()
    try:
        for kind, local in run_batches(cases, lambda c: run_case(port, *c), healthy.check,
                                       BATCH, TIME_BUDGET):
            kinds[kind] = kinds.get(kind, 0) + 1
            locals_.append(local)
    finally:
        healthy.close()
    print(f"kafka fuzz: {sum(kinds.values())} cases in {time.monotonic() - t0:.1f}s: {kinds}")
    assert sum(kinds.values()) >= CASES // 2, kinds
    for kind in ("size", "version", "flood", "pipeline"):
        assert any(k.startswith(kind + ":") for k in kinds), kinds
    assert kinds.get("size:closed", 0) and kinds.get("version:closed", 0), kinds
    assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
    log = broker.log_path.read_text(errors="replace")  # (log() keeps only its tail)
    assert "Traceback" not in log and "crashed" not in log, log[-3000:]
    # one line at most per bad connection: the reason it was closed
    per_conn: dict[str, int] = {}
    for m in re.finditer(r"Kafka 127\.0\.0\.1:(\d+)\b", log):
        per_conn[m.group(1)] = per_conn.get(m.group(1), 0) + 1
    # a local port can come round again for a later case: count connections per port
    uses = collections.Counter(locals_)
    assert all(per_conn.get(str(p), 0) <= n for p, n in uses.items()), \
        [p for p, n in uses.items() if per_conn.get(str(p), 0) > n]
    lines = [per_conn.get(str(p), 0) for p in uses]
    assert sum(lines) >= kinds.get("size:closed", 0) + kinds.get("version:closed", 0)
