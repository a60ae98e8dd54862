"""Kafka consumer groups for operators, against a real broker process with a Kafka
listener and a real confluent-kafka consumer: ``/api/kafka/groups``, the
``amqplite kafka`` commands, the Prometheus gauges and (in test_dashboard_kafka)
the dashboard page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.admin import browser
from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.admin.test_dashboard import by_css, driver  # noqa: F401 (the module's browser)
from tests.admin.test_openapi import check_response
from tests.brokerproc import free_port, wait_for
from tests.server.mqttclient import listening

pytestmark = pytest.mark.timeout(180)
DEADLINE = 60.0
TOPIC, GROUP = "ops-orders", "ops-readers"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    """An admin broker with a Kafka listener (``kb.kafka``: the bootstrap address)."""
    port = free_port()
    b = start_admin_broker(tmp_path_factory.mktemp("kafka-admin"), "--kafka-port", str(port))
    b.kafka = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    wait_for(lambda: listening(port), 30, what="the Kafka listener")
    yield b
    b.proc.stop()


@pytest.fixture(scope="module")
def topic(kb: AdminBroker) -> str:
    """TOPIC with 2 partitions: 6 records on 0, 4 on 1."""
    bs = kb.kafka  # type: ignore[attr-defined]
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)]
                        )[TOPIC].result(DEADLINE)
    p = Producer({"bootstrap.servers": bs, "acks": "all"})
    for part, n in ((0, 6), (1, 4)):
        for i in range(n):
            p.produce(TOPIC, value=b"v%d" % i, partition=part)
    assert p.flush(DEADLINE) == 0
    return TOPIC


def stable_group(bs: str) -> Consumer:
    """GROUP's one consumer of TOPIC, assigned both partitions, with offsets 2 and 4
    committed: lag 4 and 0."""
    c = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "client.id": "ops-app",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 30000, "heartbeat.interval.ms": 500})
    c.subscribe([TOPIC])
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end and len(c.assignment()) < 2:
        c.poll(0.2)
    assert len(c.assignment()) == 2
    c.commit(offsets=[TopicPartition(TOPIC, 0, 2), TopicPartition(TOPIC, 1, 4)],
             asynchronous=False)
    return c


def test_groups_in_the_api_cli_and_metrics(kb: AdminBroker, topic: str) -> None:
    c = stable_group(kb.kafka)  # type: ignore[attr-defined]
    try:
        with kb.api() as api:
            def stable() -> dict[str, Any] | None:
                r = api.get(f"/api/kafka/groups/%2F/{GROUP}")
                g = r.json() if r.status_code == 200 else None
                return g if g and g["state"] == "Stable" and g["partitions"] else None
            g = wait_for(stable, DEADLINE, what="the group to be Stable")
            check_response_ok(api, f"/api/kafka/groups/%2F/{GROUP}",
                              "/api/kafka/groups/{vhost}/{group}")
            assert g["protocol_type"] == "consumer" and g["lag"] == 4
            (m,) = g["members"]
            assert m["client_id"] == "ops-app" and m["client_host"] == "127.0.0.1"
            assert m["assignment"] == [{"topic": TOPIC, "partitions": [0, 1]}]
            rows = {p["partition"]: p for p in g["partitions"]}
            assert (rows[0]["committed_offset"], rows[0]["log_end_offset"], rows[0]["lag"]) \
                == (2, 6, 4)
            assert (rows[1]["committed_offset"], rows[1]["log_end_offset"], rows[1]["lag"]) \
                == (4, 4, 0)
            assert rows[0]["member_id"] == m["member_id"] and rows[0]["committed_at"] > 0
            for url, doc in (("/api/kafka/groups", "/api/kafka/groups"),
                             ("/api/kafka/groups/%2F", "/api/kafka/groups/{vhost}")):
                listed = check_response_ok(api, url, doc)
                assert GROUP in [x["name"] for x in listed]
            assert api.get("/api/kafka/groups/%2F/nope").status_code == 404
            assert api.get("/api/kafka/groups/no-such-vhost").status_code == 404

        tsv = cli_ok(kb, "kafka", "groups", "--format", "tsv").splitlines()
        header = tsv[0].split("\t")
        row = dict(zip(header, next(ln.split("\t") for ln in tsv[1:]
                                    if ln.startswith(GROUP + "\t")), strict=True))
        assert row["State"] == "Stable" and row["Lag"] == "4" and row["Members"] == "1"
        table = cli_ok(kb, "kafka", "group", GROUP)
        assert "Log end offset" in table and "total lag 4" in table
        parts = cli_ok(kb, "kafka", "group", GROUP, "--format", "tsv").splitlines()
        assert parts[1].split("\t")[:5] == [TOPIC, "0", "2", "6", "4"]
        members = cli_ok(kb, "kafka", "group", GROUP, "--members", "--format", "tsv")
        assert f"ops-app\t127.0.0.1\t{TOPIC}[0,1]" in members
        assert json.loads(cli_ok(kb, "kafka", "group", GROUP, "--json"))["lag"] == 4
        r = kb.cli("kafka", "group", "nope")
        assert r.returncode == 1 and "no Kafka consumer group 'nope'" in r.stderr

        with kb.api(None) as anon:
            text = anon.get("/metrics").text
            per = anon.get("/metrics/per-object").text
        g_labels = {"vhost": "/", "consumergroup": GROUP}
        assert sample(text, "kafka_consumergroup_lag_sum", **g_labels, topic=TOPIC) == 4
        assert sample(text, "kafka_consumergroup_members", **g_labels) == 1
        assert sample(text, "amqplite_kafka_consumer_groups", state="Stable") == 1
        assert "kafka_consumergroup_lag{" not in text  # per partition: the per-object page
        assert sample(per, "kafka_consumergroup_lag", **g_labels, topic=TOPIC,
                      partition="0") == 4
        assert sample(per, "kafka_consumergroup_current_offset", **g_labels, topic=TOPIC,
                      partition="1") == 4
    finally:
        c.close()
    # the consumer left: the group is Empty and keeps its offsets and lag
    with kb.api() as api:
        g = wait_for(lambda: (x := api.get(f"/api/kafka/groups/%2F/{GROUP}").json())["state"]
                     == "Empty" and x, DEADLINE, what="the group to empty")
        assert g["members"] == [] and g["lag"] == 4
        assert all(p["member_id"] is None for p in g["partitions"])


def check_response_ok(api: Any, url: str, doc_path: str) -> Any:
    """GET ``url``: 200 and a body of the OpenAPI document's schema for ``doc_path``."""
    doc = api.get("/api/openapi.json").json()
    resp = api.get(url)
    assert resp.status_code == 200, resp.text
    check_response(doc, "GET", doc_path, resp)
    return resp.json()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of ``name``'s sample with exactly ``labels`` in a scrape, or None."""
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == name and smp.labels == labels:
                return float(smp.value)
    return None


def cli_ok(kb: AdminBroker, *args: str) -> str:
    r = kb.cli(*args)
    assert r.returncode == 0, r.stderr
    return str(r.stdout)


def test_a_node_without_kafka_lists_no_groups(admin_broker: AdminBroker,
                                              tmp_path: Path) -> None:
    with admin_broker.api() as api:
        assert api.get("/api/kafka/groups").json() == []
        assert api.get("/api/kafka/groups/%2F/any").status_code == 404
    assert "0 groups" in cli_ok(admin_broker, "kafka", "groups")


def test_dashboard_lists_groups_and_shows_one(driver: Any, kb: AdminBroker,  # noqa: F811
                                              topic: str) -> None:
    c = stable_group(kb.kafka)  # type: ignore[attr-defined]
    try:
        browser.log_in(driver, kb.admin_url)
        browser.open_page(driver, "kafka", "kafka")
        row = f'tr[data-group="{GROUP}"]'
        browser.wait(driver, lambda d: d.find_element(*by_css(row)).get_attribute(
            "data-state") == "Stable", "the group's row, Stable", timeout=DEADLINE)
        assert browser.text_of(f"{row} td.lag")(driver) == "4"
        assert browser.text_of(f"{row} td.members")(driver) == "1"
        driver.find_element(*by_css(f"{row} td.name a")).click()
        browser.wait(driver, lambda d: d.find_element(*by_css("#main")).get_attribute(
            "data-loaded") == "kafka-group", "the group's page")
        assert browser.text_of("#group-lag")(driver) == "4"
        p0 = '#group-partitions tr[data-partition="0"]'
        assert browser.text_of(f"{p0} td.lag")(driver) == "4"
        assert "ops-app" in browser.text_of(p0)(driver)
        assert browser.text_of('#group-members tr[data-client="ops-app"] td.assignment')(
            driver) == f"{TOPIC}[0,1]"
        assert browser.console_errors(driver) == []
    finally:
        c.close()


def test_a_management_user_sees_the_groups_of_its_vhosts_only(kb: AdminBroker,
                                                              topic: str) -> None:
    c = stable_group(kb.kafka)  # type: ignore[attr-defined]
    c.close()
    with kb.api() as api:
        assert api.put("/api/vhosts/kafka-other", json={}).status_code in (201, 204)
        assert api.put("/api/users/kmgmt", json={"password": "pw", "tags": "management"}
                       ).status_code in (201, 204)
        assert api.put("/api/permissions/kafka-other/kmgmt", json={
            "configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
        assert GROUP in [g["name"] for g in api.get("/api/kafka/groups").json()]
    with kb.api(("kmgmt", "pw")) as mine:
        assert mine.get("/api/kafka/groups").json() == []
        assert mine.get("/api/kafka/groups/kafka-other").json() == []
        for url in ("/api/kafka/groups/%2F", f"/api/kafka/groups/%2F/{GROUP}"):
            assert mine.get(url).status_code == 401, url
