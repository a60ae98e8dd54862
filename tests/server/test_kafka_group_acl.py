"""Group ACLs end to end (docs/kafka.md, Permissions): a user whose read permission
covers topic ``acl-orders`` and groups ``app.*`` consumes in group ``app.readers``
with kafka-python and confluent-kafka over SASL/PLAIN, and is refused group
``billing`` with GROUP_AUTHORIZATION_FAILED, whichever client asks."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from tests.brokerproc import BrokerProcess
from tests.server.kafkaclient import bootstrap, kafka_broker

pytestmark = pytest.mark.timeout(180)
DEADLINE = 60.0
TOPIC = "acl-orders"
USER, PASSWORD = "acl-app", "acl-secret"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with kafka_broker(tmp_path_factory.mktemp("kafka-acl")) as b:
        with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest"), timeout=30) as api:
            assert api.put(f"/api/users/{USER}", json={"password": PASSWORD,
                                                       "tags": ""}).status_code == 201
            assert api.put(f"/api/permissions/%2F/{USER}", json={
                "configure": "", "write": "", "read": rf"^({TOPIC}|app\..*)$"}
                ).status_code == 201
        p = Producer({"bootstrap.servers": bootstrap(b), "acks": "all"})  # guest, anonymous
        for i in range(5):
            p.produce(TOPIC, b"v%d" % i)
        assert p.flush(DEADLINE) == 0
        yield b


def confluent(b: BrokerProcess, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap(b), "group.id": group,
                     "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.username": USER, "sasl.password": PASSWORD,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})


def kafka_python(b: BrokerProcess, group: str):  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer

    return KafkaConsumer(TOPIC, bootstrap_servers=bootstrap(b), group_id=group,
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_plain_username=USER, sasl_plain_password=PASSWORD,
                         auto_offset_reset="earliest", enable_auto_commit=False)


def test_a_permitted_group_reads_and_commits(broker: BrokerProcess) -> None:
    c = confluent(broker, "app.readers")
    c.subscribe([TOPIC])
    got: list[bytes] = []
    end = time.monotonic() + DEADLINE
    try:
        while len(got) < 5 and time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == [b"v%d" % i for i in range(5)]
        c.commit(asynchronous=False)
    finally:
        c.close()
    from kafka import TopicPartition

    k = kafka_python(broker, "app.readers")
    try:  # kafka-python reads the group's committed offset back
        assert k.committed(TopicPartition(TOPIC, 0)) == 5
    finally:
        k.close()


def test_a_group_outside_the_read_permission_is_refused(broker: BrokerProcess) -> None:
    from kafka.errors import GroupAuthorizationFailedError

    k = kafka_python(broker, "billing")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:
                k.poll(timeout_ms=200)
    finally:
        k.close()
    c = confluent(broker, "billing")
    c.subscribe([TOPIC])
    error = None
    end = time.monotonic() + DEADLINE
    try:
        while error is None and time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                error = m.error()
            elif m is not None:
                raise AssertionError(f"read {m.value()!r} in a refused group")
    finally:
        c.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
