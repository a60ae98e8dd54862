"""RabbitMQ's official RabbitMQ-Overview Grafana dashboard has data for every panel.

A real Prometheus scrapes a real broker every second; after publish, consume,
get, redelivery and queue/channel/connection churn, every panel's PromQL (kept
as facts in data/rabbitmq_overview_panels.json, with their source) goes through
``promtool query instant``. An empty result is a panel Grafana would leave blank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, qname, start_admin_broker
from tests.brokerproc import free_port, wait_for

PANELS = json.loads((Path(__file__).parent / "data" / "rabbitmq_overview_panels.json")
                    .read_text())
SCRAPE_INTERVAL = "1s"
#: Grafana's variables as one amqplite process fills them
VARIABLES = {
    "$__rate_interval": "15s",  # >= 4 scrape intervals, as Grafana computes it
    "$__interval": "1s",
    "$__range": "5m",
    "$rabbitmq_cluster": "",  # filled in from rabbitmq_identity_info
    "$namespace": "",  # no Kubernetes namespace label: the label is absent
    "$endpoint": "aggregated",
}


def _tools() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or tool is None:
        why = "prometheus/promtool not installed (Debian package prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(why + ": CI must run this test")
        pytest.skip(why)
    return prom, tool


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(Path(tmp_path_factory.mktemp("grafana-broker")))
    yield b
    b.proc.stop()


@pytest.fixture(scope="module")
def prometheus(broker: AdminBroker, tmp_path_factory: pytest.TempPathFactory,
               ) -> Iterator[str]:
    """A real Prometheus scraping ``broker``'s /metrics every second; yields its URL."""
    prom, _ = _tools()
    d = tmp_path_factory.mktemp("prometheus")
    target = urlsplit(broker.admin_url).netloc
    (d / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: amqplite\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    log = (d / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prom, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, (d / "prometheus.log").read_text()
            try:
                return httpx.get(url + "/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, 60, what="Prometheus to be ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=30)
    assert r.status_code == 200, r.text
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def traffic(broker: AdminBroker) -> None:
    """Everything the dashboard counts: publishes (confirmed, routed, returned, dropped),
    consumes and gets in both ack modes, an empty get, a redelivery, queue declare and
    delete, channel and connection open and close."""
    q, gone = qname("graf"), qname("graf-gone")
    with broker.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare(q, durable=True)
        ch.queue_declare(q, durable=True)  # declared twice, created once
        ch.queue_declare(gone)
        ch.queue_delete(gone)
        for i in range(8):
            ch.basic_publish("", q, b"x" * (50 + 500 * i))
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish("", qname("nowhere"), b"r", mandatory=True)
        ch.basic_publish("", qname("nowhere"), b"d")
        assert ch.basic_get(q, auto_ack=True)[0] is not None
        method, _, _ = ch.basic_get(q, auto_ack=False)
        assert method is not None
        ch.basic_nack(method.delivery_tag, requeue=True)
        got: list[int] = []
        manual = c.channel()
        manual.basic_qos(prefetch_count=1)
        manual.basic_consume(q, lambda chan, m, p, b: (got.append(1),
                                                      chan.basic_ack(m.delivery_tag)))
        wait_for(lambda: (c.process_data_events(0), len(got) >= 3)[1], 10,
                 what="manual-ack deliveries")
        manual.close()
        auto = c.channel()
        auto.basic_consume(q, lambda *a: got.append(2), auto_ack=True)
        wait_for(lambda: (c.process_data_events(0), got.count(2) >= 1)[1], 10,
                 what="auto-ack deliveries")
        ch.basic_publish("", q, b"last")
        empty = qname("graf-empty")
        ch.queue_declare(empty)
        assert ch.basic_get(empty, auto_ack=True)[0] is None  # get-empty
        with broker.connect() as other:  # a connection and a channel opened and closed
            other.channel().close()


def test_every_overview_panel_has_data(broker: AdminBroker, prometheus: str) -> None:
    _, promtool = _tools()
    traffic(broker)
    with broker.connect() as c:
        ch = c.channel()  # a publisher and a consumer stay for the gauge panels
        held = qname("graf-held")
        ch.queue_declare(held)
        ch.basic_publish("", held, b"held")
        ch.basic_consume(held, lambda *a: None)
        # everything above is in a scrape, with enough samples for rate() and irate()
        after = time.time() + 1
        wait_for(lambda: (c.process_data_events(0), query(
            prometheus, "count_over_time(rabbitmq_connections[15s]) >= 5 and "
            f"timestamp(rabbitmq_connections) > {after}"))[1],
            60, interval=0.2, what="Prometheus samples after the traffic")
        info = query(prometheus, "rabbitmq_identity_info")
        assert len(info) == 1, info
        variables = dict(VARIABLES, **{"$rabbitmq_cluster":
                                       info[0]["metric"]["rabbitmq_cluster"]})
        skipped = PANELS["not_applicable"]
        empty: list[str] = []
        checked = 0
        for panel in PANELS["panels"]:
            if panel["title"] in skipped:
                continue
            for expr in panel["exprs"]:
                for k in sorted(variables, key=len, reverse=True):
                    expr = expr.replace(k, variables[k])
                assert "$" not in expr, expr
                r = subprocess.run([promtool, "query", "instant", "-o", "json", prometheus,
                                    expr], capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, f"{panel['title']}: {r.stderr}"
                if not json.loads(r.stdout or "[]"):
                    empty.append(f"{panel['title']}: {expr}")
                checked += 1
        ch.close()
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert checked >= 40
