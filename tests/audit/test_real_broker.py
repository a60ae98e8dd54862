"""The audit job over a delivery log written by a real broker run with real clients."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
import pytest

from amqplite.audit.config import AuditConfig, sqlite_target
from amqplite.audit.job import run_audit
from tests.brokerproc import BrokerProcess

pytestmark = pytest.mark.spark


def test_counts_from_a_real_broker_run(spark: Any, tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    c = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = c.channel()
    ch.queue_declare("dlq", durable=True)
    ch.queue_declare("orders", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.confirm_delivery()
    for i in range(20):
        ch.basic_publish("", "orders", f"order {i}".encode(),
                         pika.BasicProperties(delivery_mode=2, message_id=f"order-{i}"))
    outcome: dict[str, list[str]] = {"acked": [], "rejected": [], "redelivered": []}
    for i in range(18):
        m, props, _ = ch.basic_get("orders")
        if i % 6 == 5:  # three poison messages
            ch.basic_reject(m.delivery_tag, requeue=False)
            outcome["rejected"].append(props.message_id)
        elif i == 0:  # one redelivery: requeue, then ack the second attempt
            ch.basic_nack(m.delivery_tag, requeue=True)
            m, props, _ = ch.basic_get("orders")
            outcome["redelivered"].append(props.message_id)
            ch.basic_ack(m.delivery_tag)
            outcome["acked"].append(props.message_id)
        else:
            ch.basic_ack(m.delivery_tag)
            outcome["acked"].append(props.message_id)
    c.close()
    assert b.stop() == 0  # flushes the store: every event is in the log

    cfg = AuditConfig(db=sqlite_target(tmp_path / "data" / "amqplite.db"), out=tmp_path / "out")
    res = run_audit(cfg, spark=spark)
    assert res.rows > 0 and not res.resumed
    rep = json.loads((res.report_dir / "report.json").read_text())
    t = rep["totals"]
    assert t["published"] == 20
    assert t["acked"] == len(outcome["acked"]) == 15
    assert t["dead_lettered"] == 3 and t["requeued"] == 1
    q = {d["queue"]: d for d in rep["queues"]}
    assert q["orders"]["routed"] == 20 and q["dlq"]["routed"] == 3
    assert q["orders"]["acked"] == 15 and q["orders"]["dead_lettered"] == 3
    assert q["orders"]["redelivered_messages"] == 1
    lat = {d["queue"]: d for d in rep["latency"]}
    assert lat["orders"]["count"] == 15 and lat["orders"]["p50_ms"] >= 0
    assert rep["dead_letter_reasons"] == [
        {"vhost": "/", "queue": "orders", "reason": "rejected", "count": 3}]
    un = {d["queue"]: d for d in rep["unacked"]["by_queue"]}
    assert un["orders"]["in_flight"] == 2  # published, never consumed
    assert un["dlq"]["in_flight"] == 3     # the dead letters wait in the DLQ
    # a second run finds nothing new and duplicates nothing
    again = run_audit(cfg, spark=spark)
    assert again.rows == 0 and again.hi == res.hi
