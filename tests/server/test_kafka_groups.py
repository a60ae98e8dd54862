"""Kafka consumer groups end to end (issue 37): two confluent-kafka consumers split a
3-partition topic and read every record once; the offsets they commit take the group
on from there after it restarts; DescribeGroups and ListGroups show it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.kafkaclient import aiokafka_read, bootstrap, kafka_broker

DEADLINE = 60.0
TOPIC = "jobs"


def consumer(bs: str, name: str) -> Consumer:
    return Consumer({"bootstrap.servers": bs, "group.id": "workers", "client.id": name,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def produce(bs: str, first: int, n: int) -> None:
    p = Producer({"bootstrap.servers": bs, "acks": "all"})
    for i in range(first, first + n):
        p.produce(TOPIC, key=b"k%d" % i, value=b"%d" % i)
    assert p.flush(DEADLINE) == 0


def drain(consumers: list[Consumer], want: int, both: bool) -> list[tuple[int, int]]:
    """(consumer index, value) of ``want`` records, each committed; with ``both``, until
    each consumer holds an assignment too."""
    got: list[tuple[int, int]] = []
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        for i, c in enumerate(consumers):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((i, int(m.value())))
                c.commit(message=m, asynchronous=False)
        if len(got) >= want and (not both or all(c.assignment() for c in consumers)):
            break
    return got


def test_two_consumers_split_and_resume(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "data") as b:
        bs = bootstrap(b)
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics(
            [NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[TOPIC].result(DEADLINE)
        c1, c2 = consumer(bs, "c1"), consumer(bs, "c2")
        c1.subscribe([TOPIC])
        c2.subscribe([TOPIC])
        # both in the group before anything is produced: the split is then settled
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end and not (c1.assignment() and c2.assignment()
                                              and len(c1.assignment() + c2.assignment()) == 3):
            c1.poll(0.2)
            c2.poll(0.2)
        parts = sorted(tp.partition for tp in c1.assignment() + c2.assignment())
        assert parts == [0, 1, 2]
        produce(bs, 0, 90)
        got = drain([c1, c2], 90, both=True)
        values = sorted(v for _i, v in got)
        assert values == list(range(90))  # every record once
        assert {i for i, _v in got} == {0, 1}  # both consumers had their share

        listed = admin.list_consumer_groups().result(DEADLINE)
        assert "workers" in [g.group_id for g in listed.valid]
        described = admin.describe_consumer_groups(["workers"])["workers"].result(DEADLINE)
        assert sorted(m.client_id for m in described.members) == ["c1", "c2"]
        c1.close()
        c2.close()

        produce(bs, 90, 30)
        c3 = consumer(bs, "c3")
        c3.subscribe([TOPIC])
        again = drain([c3], 30, both=False)
        c3.close()
        assert sorted(v for _i, v in again) == list(range(90, 120))  # from the commits
        admin.delete_consumer_groups(["workers"])["workers"].result(DEADLINE)
        assert "workers" not in [g.group_id for g in
                                 admin.list_consumer_groups().result(DEADLINE).valid]


def test_committed_offsets_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafka_broker(data) as b:
        bs = bootstrap(b)
        produce(bs, 0, 10)
        c = consumer(bs, "first")
        c.subscribe([TOPIC])
        got: list[Any] = drain([c], 10, both=False)
        c.close()
        assert sorted(v for _i, v in got) == list(range(10))
    with kafka_broker(data) as b:
        bs = bootstrap(b)
        produce(bs, 10, 5)
        c = consumer(bs, "second")
        c.subscribe([TOPIC])
        got = drain([c], 5, both=False)
        c.close()
        assert sorted(v for _i, v in got) == list(range(10, 15))


def test_kafka_python_aiokafka_and_kcat_groups(tmp_path: Path) -> None:
    import asyncio
    import shutil
    import subprocess

    from kafka import KafkaConsumer

    with kafka_broker(tmp_path / "data") as b:
        bs = bootstrap(b)
        produce(bs, 0, 20)
        kc = KafkaConsumer(TOPIC, bootstrap_servers=bs, group_id="kp",
                           auto_offset_reset="earliest", consumer_timeout_ms=10_000)
        values = []
        for m in kc:
            values.append(int(m.value))
            if len(values) == 20:
                break
        kc.commit()
        kc.close()
        assert sorted(values) == list(range(20))

        got = asyncio.run(aiokafka_read(bs, TOPIC, 20, DEADLINE, group_id="aio"))
        assert sorted(int(v) for v in got) == list(range(20))
        if shutil.which("kcat") is not None:
            out = subprocess.run(["kcat", "-b", bs, "-G", "kc", "-o", "beginning", "-e", TOPIC],
                                 capture_output=True, timeout=DEADLINE, check=True)
            assert sorted(int(v) for v in out.stdout.split()) == list(range(20))


def test_a_vhost_created_again_has_no_committed_offsets(tmp_path: Path) -> None:
    """A deleted vhost's groups go with it: created again at once under the same name,
    OffsetFetch finds no committed offset of the group."""
    import httpx
    from confluent_kafka import OFFSET_INVALID, TopicPartition

    with kafka_broker(tmp_path / "data") as b:
        bs = bootstrap(b)
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": "tenant:guest", "sasl.password": "guest"}

        def committed() -> int:
            c = Consumer({"bootstrap.servers": bs, "group.id": "g", **sasl})
            try:
                tp = c.committed([TopicPartition(TOPIC, 0)], timeout=DEADLINE)[0]
                assert tp.error is None
                return int(tp.offset)
            finally:
                c.close()

        with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"),
                          timeout=30) as api:
            for rnd in range(2):
                assert api.put("/api/vhosts/tenant").status_code in (201, 204)
                assert api.put("/api/permissions/tenant/guest", json={
                    "configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
                p = Producer({"bootstrap.servers": bs, "acks": "all", **sasl})
                p.produce(TOPIC, b"v")
                assert p.flush(DEADLINE) == 0
                if rnd == 0:
                    c = Consumer({"bootstrap.servers": bs, "group.id": "g", **sasl})
                    c.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
                    c.close()
                    assert committed() == 1
                    assert api.delete("/api/vhosts/tenant").status_code == 204
            assert committed() == OFFSET_INVALID
