"""MQTT in the node's figures (issue 23, operations): ``/metrics`` splits its
connections, publishes and deliveries by protocol, ``/api/overview`` and
``amqplite connections`` count MQTT clients, and ``max_connections`` is one
limit for AMQP and MQTT clients together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import V5, V311, Client, mqtt_broker, new_id


def samples(b: BrokerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one ``/metrics`` scrape: (name, sorted labels) -> value."""
    text = httpx.get(f"{b.admin_url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def proto(p: str) -> tuple[tuple[str, str], ...]:
    return (("protocol", p),)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = mqtt_broker(tmp_path / "data")
    yield b
    b.stop()


def test_metrics_split_connections_publishes_and_deliveries_by_protocol(
        fresh: BrokerProcess) -> None:
    port = fresh.mqtt_port  # type: ignore[attr-defined]
    sub, pub = Client(port, new_id(), V5), Client(port, new_id(), V311)
    assert sub.connect()[0] == 0 and pub.connect()[0] == 0
    topic = f"{new_id()}/t"
    sub.subscribe(topic, 1)
    for i in range(3):
        pub.publish(topic, f"m{i}".encode(), 1)
    assert [sub.get().payload for _ in range(3)] == [b"m0", b"m1", b"m2"]
    # and one AMQP publish the MQTT subscriber receives: amqp091 in, mqtt50 out
    with pika.BlockingConnection(pika.URLParameters(fresh.url)) as c:
        c.channel().basic_publish("amq.topic", topic.replace("/", "."), b"from-amqp")
        assert sub.get().payload == b"from-amqp"
        m = samples(fresh)
        assert m[("rabbitmq_connections", ())] == 3  # two MQTT clients and this one
    assert m[("amqplite_mqtt_connections", proto("mqtt50"))] == 1
    assert m[("amqplite_mqtt_connections", proto("mqtt311"))] == 1
    assert m[("amqplite_mqtt_connections", proto("mqtt310"))] == 0
    received = "rabbitmq_global_messages_received_total"
    assert m[(received, proto("mqtt311"))] == 3
    assert m[(received, proto("amqp091"))] == 1
    assert (received, proto("mqtt50")) not in m  # nothing published over MQTT 5
    delivered = "rabbitmq_global_messages_delivered_total"
    assert m[(delivered, proto("mqtt50"))] == 4
    assert m[(delivered, proto("amqp091"))] == 0
    assert m[("rabbitmq_connections_opened_total", ())] >= 3
    pub.close()
    wait_for(lambda: samples(fresh)[("amqplite_mqtt_connections", proto("mqtt311"))] == 0,
             what="the 3.1.1 client to leave the gauge")
    assert samples(fresh)[("rabbitmq_connections_closed_total", ())] >= 2  # pika's too
    sub.close()


def test_overview_and_cli_count_mqtt_clients(fresh: BrokerProcess) -> None:
    port = fresh.mqtt_port  # type: ignore[attr-defined]
    cid = new_id()
    c = Client(port, cid, V5)
    assert c.connect()[0] == 0
    ov = httpx.get(f"{fresh.admin_url}/api/overview", auth=("guest", "guest"), timeout=10).json()
    assert ov["object_totals"]["connections"] == 1
    assert {"protocol": "mqtt", "port": port} in [
        {"protocol": x["protocol"], "port": x["port"]} for x in ov["listeners"]]
    env = dict(os.environ, AMQPLITE_ADMIN_URL=str(fresh.admin_url), COLUMNS="200")
    out = subprocess.run([sys.executable, "-m", "amqplite", "connections", "--json"],
                         capture_output=True, text=True, timeout=60, env=env, check=True)
    rows = json.loads(out.stdout)
    assert [(r["protocol"], r["client_properties"]["client_id"]) for r in rows] == [
        ("MQTT 5.0", cid)]
    table = subprocess.run([sys.executable, "-m", "amqplite", "connections"],
                           capture_output=True, text=True, timeout=60, env=env, check=True)
    assert f"MQTT 5.0 {cid}" in table.stdout and "1 connection" in table.stdout
    c.close()


def test_max_connections_counts_amqp_and_mqtt_together(tmp_path: Path) -> None:
    """The node's limit is one: with one AMQP and one MQTT client in, a third MQTT
    client gets CONNACK 3 Server unavailable (3.1.1) / 0x97 Quota exceeded (5.0)
    and an AMQP one 530; once one leaves, an MQTT client gets in again."""
    b = mqtt_broker(tmp_path / "data", "--max-connections", "2")
    port = b.mqtt_port  # type: ignore[attr-defined]
    try:
        amqp = pika.BlockingConnection(pika.URLParameters(b.url))
        first = Client(port, new_id(), V311)
        assert first.connect()[0] == 0
        assert Client(port, new_id(), V311).connect()[0] == 0x88  # paho's name for 3
        assert Client(port, new_id(), V5).connect()[0] == 0x97
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
            pika.BlockingConnection(pika.URLParameters(b.url))
        assert "(530) 'NOT_ALLOWED - connection refused: node connection limit (2)" in str(
            exc.value)
        m = samples(b)
        assert m[("amqplite_mqtt_connections_refused_limit_total", ())] == 2
        amqp.close()
        wait_for(lambda: samples(b)[("rabbitmq_connections", ())] == 1,
                 what="the AMQP client to be gone")
        later = Client(port, new_id(), V5)
        assert later.connect()[0] == 0
        later.close()
        first.close()
    finally:
        b.stop()
