"""Kafka over TLS (issue 37): confluent-kafka with security.protocol SSL and SASL_SSL
on ``--kafka-tls-port``, certificates made for the run by tests/tlscerts.py; the
admin API's overview lists the listener."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.brokerproc import free_port, wait_for
from tests.server.kafkaclient import kafka_broker
from tests.server.mqttclient import listening
from tests.server.test_kafka_wire import admin_get

pytest.importorskip("cryptography")
from tests.tlscerts import make_pki

DEADLINE = 30.0


def test_ssl_and_sasl_ssl(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    with kafka_broker(tmp_path / "data", "--kafka-tls-port", str(port), "--tls-cert",
                      str(pki.server.cert), "--tls-key", str(pki.server.key)) as b:
        wait_for(lambda: listening(port), DEADLINE, what="the Kafka TLS listener")
        common = {"bootstrap.servers": f"127.0.0.1:{port}", "ssl.ca.location": str(pki.ca.cert)}
        ssl_only = {**common, "security.protocol": "SSL"}
        sasl = {**common, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": "guest", "sasl.password": "guest"}
        for i, conf in enumerate((ssl_only, sasl)):
            p = Producer({**conf, "acks": "all"})
            p.produce("secure", b"over tls %d" % i)
            assert p.flush(DEADLINE) == 0
        c = Consumer({**sasl, "group.id": "unused"})
        c.assign([TopicPartition("secure", 0, 0)])
        got: list[bytes] = []
        end = time.monotonic() + DEADLINE
        while len(got) < 2 and time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [b"over tls 0", b"over tls 1"]
        listeners = admin_get(b, "/api/overview")["listeners"]
        assert {"kafka", "kafka/ssl"} <= {x["protocol"] for x in listeners}
