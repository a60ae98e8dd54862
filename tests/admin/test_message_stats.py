"""message_stats of channels, queues, vhosts and the overview, counted from real pika traffic.

Counts, not rates: a rate needs two samples five seconds apart, a count is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, qname, start_mqtt_admin_broker
from tests.admin.test_metrics import scrape, value
from tests.brokerproc import wait_for
from tests.server.mqttclient import Client, new_id

CHANNEL = ("publish", "confirm", "return_unroutable", "drop_unroutable", "deliver",
           "deliver_no_ack", "get", "get_no_ack", "get_empty", "deliver_get", "ack",
           "redeliver")
#: rabbitmq_prometheus's per-channel counters and the message_stats field feeding each
METRICS = {
    "rabbitmq_channel_messages_confirmed_total": "confirm",
    "rabbitmq_channel_messages_unroutable_returned_total": "return_unroutable",
    "rabbitmq_channel_messages_unroutable_dropped_total": "drop_unroutable",
    "rabbitmq_channel_messages_delivered_ack_total": "deliver",
    "rabbitmq_channel_messages_delivered_total": "deliver_no_ack",
    "rabbitmq_channel_get_ack_total": "get",
    "rabbitmq_channel_get_total": "get_no_ack",
    "rabbitmq_channel_get_empty_total": "get_empty",
    "rabbitmq_channel_messages_acked_total": "ack",
    "rabbitmq_channel_messages_redelivered_total": "redeliver",
}
QUEUE = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
         "deliver_get", "ack", "redeliver")


@pytest.fixture
def vhost(api: httpx.Client) -> Iterator[str]:
    """A vhost of this test's own, so its totals are this test's traffic alone."""
    vh = qname("ms-vh")
    assert api.put(f"/api/vhosts/{vh}", json={}).status_code in (201, 204)
    assert api.put(f"/api/permissions/{vh}/guest",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    yield vh
    api.delete(f"/api/vhosts/{vh}")


def counts(stats: dict[str, Any], names: tuple[str, ...]) -> dict[str, int]:
    assert all(isinstance(stats[f"{k}_details"]["rate"], float | int) for k in names)
    return {k: stats[k] for k in names}


def test_counts_per_channel_queue_and_vhost(admin_broker: AdminBroker, api: httpx.Client,
                                            vhost: str) -> None:
    params = pika.URLParameters(admin_broker.amqp_url)
    params.virtual_host = vhost
    conn = pika.BlockingConnection(params)
    try:
        pub = conn.channel()
        pub.confirm_delivery()
        q = qname("ms")
        pub.queue_declare(q, durable=True)
        for i in range(4):
            pub.basic_publish("", q, b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        with pytest.raises(pika.exceptions.UnroutableError):
            pub.basic_publish("", qname("nowhere"), b"r", mandatory=True)  # returned
        pub.basic_publish("", qname("nowhere"), b"d")  # dropped

        con = conn.channel()
        method, _, _ = con.basic_get(q)  # m0, manual ack
        con.basic_ack(method.delivery_tag)
        assert con.basic_get(q, auto_ack=True)[2] == b"m1"
        con.basic_qos(prefetch_count=1)
        seen: list[tuple[bytes, bool]] = []
        for method, _, body in con.consume(q, inactivity_timeout=20):
            assert method is not None, f"deliveries stopped after {seen}"
            seen.append((body, method.redelivered))
            if len(seen) == 1:  # nack with requeue: m2 comes back, flagged redelivered
                con.basic_nack(method.delivery_tag, requeue=True)
            else:
                con.basic_ack(method.delivery_tag)
            if len(seen) == 3:
                break
        con.cancel()
        assert seen == [(b"m2", False), (b"m2", True), (b"m3", False)]
        pub.basic_publish("", q, b"m4")
        for _m, _, body in con.consume(q, auto_ack=True, inactivity_timeout=20):
            assert body == b"m4"
            break
        con.cancel()
        assert con.basic_get(q) == (None, None, None)  # get_empty

        def channel_stats() -> dict[int, dict[str, int]]:
            return {c["number"]: counts(c["message_stats"], CHANNEL)
                    for c in api.get("/api/channels").json() if c["vhost"] == vhost}

        zero = dict.fromkeys(CHANNEL, 0)
        want = {
            pub.channel_number: zero | {"publish": 7, "confirm": 7, "return_unroutable": 1,
                                        "drop_unroutable": 1},
            con.channel_number: zero | {"get": 1, "get_no_ack": 1, "get_empty": 1,
                                        "deliver": 3, "deliver_no_ack": 1, "deliver_get": 6,
                                        "ack": 3, "redeliver": 1},
        }
        wait_for(lambda: (conn.process_data_events(0), channel_stats())[1] == want, 20,
                 what=f"channel counts {want}, have {channel_stats()}")
        name = next(c["name"] for c in api.get("/api/channels").json()
                    if c["vhost"] == vhost and c["number"] == con.channel_number)
        one = api.get(f"/api/channels/{quote(name, safe='')}").json()
        assert counts(one["message_stats"], CHANNEL) == want[con.channel_number]

        qstats = api.get(f"/api/queues/{vhost}/{q}").json()["message_stats"]
        assert counts(qstats, QUEUE) == {
            "publish": 5, "deliver": 3, "deliver_no_ack": 1, "get": 1, "get_no_ack": 1,
            "get_empty": 1, "deliver_get": 6, "ack": 3, "redeliver": 1}
        (listed,) = [x for x in api.get(f"/api/queues/{vhost}").json() if x["name"] == q]
        assert counts(listed["message_stats"], QUEUE) == counts(qstats, QUEUE)
        # /metrics sums the same counters over the open channels (these two among them)
        _, samples = scrape(admin_broker.admin_url)
        mine = {k: want[pub.channel_number][k] + want[con.channel_number][k] for k in CHANNEL}
        for metric, field in METRICS.items():
            assert value(samples, metric) >= mine[field] > 0, metric
    finally:
        conn.close()

    # the channels are gone; their vhost keeps what they counted
    both = {k: want[pub.channel_number][k] + want[con.channel_number][k] for k in CHANNEL}
    wait_for(lambda: counts(api.get(f"/api/vhosts/{vhost}").json()["message_stats"], CHANNEL)
             == both, 20, what=f"vhost counts {both}")
    (vh,) = [v for v in api.get("/api/vhosts").json() if v["name"] == vhost]
    assert counts(vh["message_stats"], CHANNEL) == both
    node = api.get("/api/overview").json()["message_stats"]
    for k in CHANNEL:
        assert node[k] >= both[k], k
    for k in ("disk_reads", "disk_writes"):
        assert isinstance(node[k], int) and "rate" in node[f"{k}_details"]
    assert node["disk_writes"] >= 4  # the four persistent messages in a durable queue


@pytest.fixture(scope="module")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_mqtt_admin_broker(tmp_path_factory.mktemp("ms-mqtt"))
    yield b
    b.proc.stop()


def test_mqtt_deliveries_and_pubacks_count_on_the_subscription_queue(
        mqtt_broker: AdminBroker) -> None:
    """An MQTT client's channels are internal (not in /api/channels): its QoS 1
    deliveries and PUBACKs show on its subscription queue and its vhost."""
    sub_id = new_id()
    sub, pub = Client(mqtt_broker.mqtt_port, sub_id), Client(  # type: ignore[attr-defined]
        mqtt_broker.mqtt_port, new_id())  # type: ignore[attr-defined]
    try:
        sub.connect()
        pub.connect()
        assert sub.subscribe("ms/t", 1) == [1]
        for i in range(3):
            pub.publish("ms/t", b"%d" % i, 1)
        assert [sub.get().payload for _ in range(3)] == [b"0", b"1", b"2"]  # paho PUBACKs

        with mqtt_broker.api() as api:
            def queue() -> dict[str, Any] | None:
                for x in api.get("/api/queues/%2F").json():
                    if sub_id in x["name"] and x["message_stats"]["ack"] == 3:
                        return x  # type: ignore[no-any-return]
                return None
            q = wait_for(queue, 20, what="three PUBACKs on the subscription queue")
            assert counts(q["message_stats"], QUEUE) == dict.fromkeys(
                QUEUE, 0) | {"publish": 3, "deliver": 3, "deliver_get": 3, "ack": 3}
            vh = api.get("/api/vhosts/%2F").json()["message_stats"]
            assert vh["publish"] >= 3 and vh["deliver"] >= 3 and vh["ack"] >= 3
    finally:
        sub.close()
        pub.close()
