"""Growing a topic and manual replica assignments from confluent-kafka's AdminClient
(librdkafka), against a broker subprocess (issue 37)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import KafkaError

from tests.server.kafkaclient import bootstrap, kafka_broker

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
