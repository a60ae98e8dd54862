"""What librdkafka's own test-runner (scripts/librdkafka_tests.sh) asked of the
Kafka front, checked with confluent-kafka (librdkafka) and kafka-python against a
broker subprocess (issue 37): growing a topic, manual replica assignments, and an
initial rebalance delay that lets consumers started together share a generation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import KafkaError

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.kafkaclient import bootstrap, kafka_broker, kafka_port
from tests.server.mqttclient import listening

DEADLINE = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    with kafka_broker(tmp_path / "data") as b:
        yield b


def test_create_partitions_and_produce_to_the_new_ones(broker: Any) -> None:
    bs = bootstrap(broker)
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic("events", num_partitions=1, replication_factor=1)])[
        "events"].result(DEADLINE)
    # confluent-kafka's NewTopic refuses replica_assignment locally; kafka-python sends it
    ka = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=int(DEADLINE * 1000))
    try:
        ka.create_topics([KNewTopic("pinned", -1, -1, replica_assignments={
            0: [0], 1: [0], 2: [0]})])
        with pytest.raises(KafkaError, match=r"Error 39.*amqplite is one node"):
            ka.create_topics([KNewTopic("events2", -1, -1, replica_assignments={
                0: [0], 1: [5]})])
    finally:
        ka.close()
    meta = admin.list_topics(timeout=DEADLINE)
    assert len(meta.topics["pinned"].partitions) == 3
    assert "events2" not in meta.topics
    admin.create_partitions([NewPartitions("events", 3)])["events"].result(DEADLINE)
    with pytest.raises(KafkaException, match="must be larger"):
        admin.create_partitions([NewPartitions("events", 2)])["events"].result(DEADLINE)
    assert len(admin.list_topics("events", timeout=DEADLINE).topics["events"].partitions) == 3
    p = Producer({"bootstrap.servers": bs, "acks": "all", "topic.metadata.refresh.interval.ms":
                  1000})
    failed: list[Any] = []
    for part in range(3):
        p.produce("events", value=b"v%d" % part, partition=part,
                  on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(DEADLINE) == 0 and not failed


def _poll_one(c: Consumer, deadline: float) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            return True
    return False


def test_initial_rebalance_delay_puts_consumers_started_together_in_one_generation(
        tmp_path: Path) -> None:
    """librdkafka's 0118: two consumers subscribe, then each polls in turn. A consumer
    learns of a rebalance only inside poll(), so had the first been answered alone,
    the second's join would wait for the first to poll again: with Kafka's delay the
    group forms once, with both, and the second reads while the first is not polling."""
    b = BrokerProcess(tmp_path / "data", None, "--kafka-port", str(free_port()), env={
        "AMQPLITE_KAFKA_NUM_PARTITIONS": "4",
        "AMQPLITE_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "3000"}).start()
    consumers: list[Consumer] = []
    try:
        wait_for(lambda: listening(kafka_port(b)), 30, what="the Kafka listener")
        bs = bootstrap(b)
        p = Producer({"bootstrap.servers": bs, "acks": "all"})
        for i in range(200):
            p.produce("split", key=b"k%d" % i, value=b"v")
        assert p.flush(DEADLINE) == 0
        for _ in range(2):
            c = Consumer({"bootstrap.servers": bs, "group.id": "together",
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
            # a rebalance callback, as 0118 sets: librdkafka then serves rebalances
            # only inside poll()
            c.subscribe(["split"], on_assign=lambda _c, _parts: None)
            consumers.append(c)
        assert _poll_one(consumers[0], DEADLINE)
        assert _poll_one(consumers[1], DEADLINE), "the second consumer got no partition"
        assert len(consumers[0].assignment()) + len(consumers[1].assignment()) == 4
    finally:
        for c in consumers:
            c.close()
        b.stop()
