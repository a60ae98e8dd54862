"""/metrics: Prometheus text format, RabbitMQ's names, counters that move with traffic."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.admin.conftest import AdminBroker, publish, qname, start_admin_broker
from tests.brokerproc import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

REQUIRED = [
    "rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked",
    "rabbitmq_queue_messages", "rabbitmq_queue_consumers", "rabbitmq_connections",
    "rabbitmq_channels", "rabbitmq_consumers", "rabbitmq_queues",
    "rabbitmq_global_messages_received_total", "rabbitmq_global_messages_delivered_total",
    "rabbitmq_global_messages_acknowledged_total", "rabbitmq_global_messages_confirmed_total",
    "rabbitmq_global_messages_routed_total",
    "rabbitmq_global_messages_unroutable_returned_total",
    "rabbitmq_global_messages_unroutable_dropped_total",
    "rabbitmq_global_messages_dead_lettered_rejected_total",
    "rabbitmq_global_messages_dead_lettered_expired_total",
    "rabbitmq_global_messages_dead_lettered_maxlen_total",
    "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
    "rabbitmq_process_resident_memory_bytes", "rabbitmq_disk_space_available_bytes",
    "rabbitmq_identity_info",
    "amqplite_store_commit_seconds_bucket", "amqplite_store_commit_seconds_count",
    "amqplite_store_group_commit_size_bucket", "amqplite_store_writer_backlog_ops",
    "amqplite_store_page_ins_total", "amqplite_store_paged_in_messages_total",
]
AMQP091 = (("protocol", "amqp091"),)


def scrape(url: str, path: str = "/metrics") -> tuple[str, Samples]:
    r = httpx.get(url + path, timeout=30)  # no credentials: scrapers send none
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return r.text, out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_use_rabbitmq_names(admin_broker: AdminBroker) -> None:
    _, samples = scrape(admin_broker.admin_url)
    names = {n for n, _ in samples}
    missing = [n for n in REQUIRED if n not in names]
    assert not missing
    assert value(samples, "rabbitmq_process_resident_memory_bytes") > 1_000_000
    assert value(samples, "rabbitmq_disk_space_available_bytes") > 0
    # aggregated, as RabbitMQ serves /metrics by default: no per-queue labels
    assert all(not lb for n, lb in samples if n.startswith("rabbitmq_queue_"))


def test_global_counters_follow_traffic(admin_broker: AdminBroker, channel: Any) -> None:
    _, before = scrape(admin_broker.admin_url)
    q = qname("m")
    channel.queue_declare(q, durable=True)
    for i in range(3):
        publish(channel, q, f"m{i}".encode())
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", qname("nowhere"), b"x", mandatory=True)  # returned
    channel.basic_publish("", qname("nowhere"), b"y")  # dropped
    for _ in range(3):
        method, _props, _body = channel.basic_get(q)
        channel.basic_ack(method.delivery_tag)
    expect = {
        "rabbitmq_global_messages_received_total": 5,
        "rabbitmq_global_messages_routed_total": 3,
        "rabbitmq_global_messages_unroutable_returned_total": 1,
        "rabbitmq_global_messages_unroutable_dropped_total": 1,
        "rabbitmq_global_messages_confirmed_total": 5,
        "rabbitmq_global_messages_received_confirm_total": 5,
        "rabbitmq_global_messages_delivered_total": 3,
        "rabbitmq_global_messages_acknowledged_total": 3,
    }

    def deltas() -> dict[str, float]:
        _, now = scrape(admin_broker.admin_url)
        return {k: value(now, k, protocol="amqp091") - value(before, k, protocol="amqp091")
                for k in expect}

    wait_for(lambda: deltas() == expect, 10, what=f"counters {expect}, have {deltas()}")
    _, now = scrape(admin_broker.admin_url)
    commits = "amqplite_store_commit_seconds_count"
    assert value(now, commits) > value(before, commits)
    assert value(now, "amqplite_store_group_commit_size_count") >= 1


def test_dead_lettering_is_counted_by_reason(admin_broker: AdminBroker, channel: Any) -> None:
    _, before = scrape(admin_broker.admin_url)
    dlq, rejecting, expiring, capped = qname("dlq"), qname("rej"), qname("exp"), qname("cap")
    channel.queue_declare(dlq, durable=True)
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    channel.queue_declare(rejecting, durable=True, arguments=dlx)
    channel.queue_declare(expiring, durable=True, arguments={"x-message-ttl": 0})  # no DLX
    channel.queue_declare(capped, durable=True, arguments={**dlx, "x-max-length": 1})
    publish(channel, rejecting, b"r")
    publish(channel, expiring, b"e")
    publish(channel, capped, b"c1")
    publish(channel, capped, b"c2")  # pushes c1 out: maxlen
    method, _p, _b = channel.basic_get(rejecting)
    channel.basic_reject(method.delivery_tag, requeue=False)
    name = "rabbitmq_global_messages_dead_lettered_{}_total"
    expect = {("rejected", "at_most_once"): 1, ("expired", "disabled"): 1,
              ("maxlen", "at_most_once"): 1}

    def deltas() -> dict[tuple[str, str], float]:
        _, now = scrape(admin_broker.admin_url)
        return {k: value(now, name.format(k[0]), queue_type="rabbit_classic_queue",
                         dead_letter_strategy=k[1])
                - value(before, name.format(k[0]), queue_type="rabbit_classic_queue",
                        dead_letter_strategy=k[1]) for k in expect}

    wait_for(lambda: deltas() == expect, 10, what=f"dead-letter counters {expect}")


def test_per_object_metrics_label_queues(admin_broker: AdminBroker, channel: Any,
                                         conn: pika.BlockingConnection) -> None:
    q = qname("po")
    channel.queue_declare(q, durable=True)
    for i in range(4):
        publish(channel, q, f"{i}".encode())
    consumer_ch = conn.channel()
    consumer_ch.basic_qos(prefetch_count=1)
    consumer_ch.basic_consume(q, lambda *a: None)

    def check() -> bool:
        _, s = scrape(admin_broker.admin_url, "/metrics/per-object")
        lb = {"vhost": "/", "queue": q}
        return (value(s, "rabbitmq_queue_messages_ready", **lb) == 3
                and value(s, "rabbitmq_queue_messages_unacked", **lb) == 1
                and value(s, "rabbitmq_queue_messages", **lb) == 4
                and value(s, "rabbitmq_queue_consumers", **lb) == 1)

    wait_for(lambda: (conn.process_data_events(0), check())[1], 10,
             what="per-queue gauges for one consumer with prefetch 1")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(Debian package prometheus)")
@pytest.mark.parametrize("path", ["/metrics", "/metrics/per-object"])
def test_promtool_accepts_a_real_scrape(admin_broker: AdminBroker, channel: Any,
                                        path: str) -> None:
    channel.queue_declare(qname("pt"), durable=True)
    text, _ = scrape(admin_broker.admin_url, path)
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def paging_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    """A broker with a tiny body window: deep queues page bodies from the store."""
    b = start_admin_broker(Path(tmp_path_factory.mktemp("metrics-broker")),
                           env={"AMQPLITE_BODY_WINDOW": "10"})
    yield b
    b.proc.stop()


def test_page_ins_are_counted(paging_broker: AdminBroker) -> None:
    _, before = scrape(paging_broker.admin_url)
    with paging_broker.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        q = qname("deep")
        ch.queue_declare(q, durable=True)
        for i in range(200):
            publish(ch, q, b"x" * 100 + str(i).encode())
        seen = 0
        while ch.basic_get(q, auto_ack=True)[0] is not None:
            seen += 1
        assert seen == 200
    _, now = scrape(paging_broker.admin_url)
    assert value(now, "amqplite_store_page_ins_total") > value(before,
                                                               "amqplite_store_page_ins_total")
    assert value(now, "amqplite_store_paged_in_messages_total") >= 150


def test_scrape_stays_bounded_with_10000_queues(paging_broker: AdminBroker) -> None:
    n = 10_000
    with paging_broker.connect() as c:
        ch = c.channel()
        for i in range(n):
            ch.queue_declare(f"many-{i}", durable=False, arguments={})
        # completes within scrape()'s HTTP timeout; its speed is scripts/' business
        text, samples = scrape(paging_broker.admin_url, "/metrics/per-object")
        assert value(samples, "rabbitmq_queues") >= n
        assert sum(1 for name, _ in samples if name == "rabbitmq_queue_messages_ready") >= n
        # the broker keeps answering AMQP while scrapes run
        ch.queue_declare("many-after", durable=False)
        _, agg = scrape(paging_broker.admin_url)
        assert value(agg, "rabbitmq_queues") >= n + 1
        assert len(text) > 100 * n


def test_delivery_split_and_churn_counters(admin_broker: AdminBroker) -> None:
    """The counters behind the Overview dashboard move by exactly what the traffic did."""
    _, before = scrape(admin_broker.admin_url)
    q = qname("split")
    with admin_broker.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(q)
        ch.queue_declare(q)  # declared again: not created again
        for size in (100, 101, 1000, 1001, 0):  # either side of the 100 and 1000 bounds
            ch.basic_publish("", q, b"x" * size)
        assert ch.basic_get(q, auto_ack=True)[0] is not None
        method, _, _ = ch.basic_get(q)
        ch.basic_nack(method.delivery_tag, requeue=True)
        method, _, _ = ch.basic_get(q)  # the redelivery
        assert method.redelivered
        ch.basic_ack(method.delivery_tag)
        got: list[bool] = []
        ch.basic_consume(q, lambda chan, m, p, b: got.append(m.redelivered), auto_ack=True)
        wait_for(lambda: (c.process_data_events(0), len(got) == 3)[1], 10, what="consume")
        assert ch.basic_get(q)[0] is None
        ch.queue_delete(q)
        c.channel().close()
    closed = "rabbitmq_connections_closed_total"
    now = wait_for(lambda: (lambda s: s if value(s, closed) > value(before, closed) else None)(
        scrape(admin_broker.admin_url)[1]), 10, what="the connection close counted")

    def delta(name: str, **labels: str) -> float:
        return value(now, name, **labels) - value(before, name, **labels)

    g = "rabbitmq_global_messages_"
    assert delta(g + "delivered_get_auto_ack_total", protocol="amqp091") == 1
    assert delta(g + "delivered_get_manual_ack_total", protocol="amqp091") == 2
    assert delta(g + "delivered_consume_auto_ack_total", protocol="amqp091") == 3
    assert delta(g + "delivered_consume_manual_ack_total", protocol="amqp091") == 0
    assert delta(g + "get_empty_total", protocol="amqp091") == 1
    assert delta(g + "redelivered_total", protocol="amqp091") == 1
    assert delta("rabbitmq_queues_declared_total") == 2
    assert delta("rabbitmq_queues_created_total") == 1
    assert delta("rabbitmq_queues_deleted_total") == 1
    assert delta("rabbitmq_channels_opened_total") == 2
    assert delta("rabbitmq_channels_closed_total") == 2
    assert delta("rabbitmq_connections_opened_total") == 1
    assert delta("rabbitmq_connections_closed_total") == 1
    assert delta("rabbitmq_auth_attempts_succeeded_total", protocol="amqp091") == 1
    assert delta("rabbitmq_auth_attempts_total", protocol="amqp091") == 1
    size = "rabbitmq_message_size_bytes_bucket"
    assert delta(size, protocol="amqp091", le="100.0") == 2  # 0 and 100
    assert delta(size, protocol="amqp091", le="1000.0") == 4
    assert delta(size, protocol="amqp091", le="+Inf") == 5
    assert delta("rabbitmq_message_size_bytes_sum", protocol="amqp091") == 2202
