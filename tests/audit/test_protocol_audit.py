"""The delivery log records each publish, delivery and ack with the client's protocol
(issue 23), and the audit job reports by protocol: a real broker, MQTT 3.1.1 and 5.0
clients (paho) and an AMQP one (pika), then a real Spark session."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pytest
from sqlalchemy import create_engine

from amqplite.audit.config import AuditConfig, sqlite_target
from amqplite.audit.job import run_audit
from amqplite.store.logsql import iter_log_rows
from amqplite.storeops import LOG_FIELDS
from tests.server.mqttclient import V5, V311, Client, mqtt_broker, new_id

pytestmark = pytest.mark.spark

_EVENT, _QUEUE, _PROTO = (1 + LOG_FIELDS.index(f) for f in ("event", "queue", "protocol"))


def test_log_and_report_by_protocol(spark: Any, tmp_path: Path) -> None:
    b = mqtt_broker(tmp_path / "data", "--delivery-log", "full")
    port = b.mqtt_port  # type: ignore[attr-defined]
    topic = f"{new_id()}/reading"
    sub, pub = Client(port, new_id(), V5), Client(port, new_id(), V311)
    assert sub.connect()[0] == 0 and pub.connect()[0] == 0
    sub.subscribe(topic, 1)
    with pika.BlockingConnection(pika.URLParameters(b.url)) as c:
        ch = c.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", topic.replace("/", "."))
        for i in range(4):
            pub.publish(topic, f"mqtt {i}".encode(), 1)
        for i in range(2):
            ch.basic_publish("amq.topic", topic.replace("/", "."), f"amqp {i}".encode(),
                             pika.BasicProperties(delivery_mode=2))
        assert len([sub.get() for _ in range(6)]) == 6  # each PUBACKed by paho
        got = 0
        while got < 6:
            m, _props, _body = ch.basic_get(q)
            if m is not None:
                ch.basic_ack(m.delivery_tag)
                got += 1
        ch.queue_delete(q)
    sub.close()
    pub.close()
    assert b.stop() == 0  # flushes the store: every event is in the log

    eng = create_engine(f"sqlite:///{tmp_path / 'data' / 'amqplite.db'}")
    with eng.connect() as conn:
        rows = list(iter_log_rows(conn))
    eng.dispose()
    seen = Counter((r[_EVENT], r[_PROTO], "mqtt" if (r[_QUEUE] or "").startswith("mqtt-")
                    else "amqp") for r in rows if r[_EVENT] in ("published", "delivered", "acked"))
    assert seen == {
        ("published", "mqtt-3.1.1", "amqp"): 4,  # published: no queue yet
        ("published", "amqp-0-9-1", "amqp"): 2,
        ("delivered", "mqtt-5.0", "mqtt"): 6,    # to the MQTT 5 session's queue
        ("acked", "mqtt-5.0", "mqtt"): 6,        # by its PUBACKs
        ("delivered", "amqp-0-9-1", "amqp"): 6,  # basic.get
        ("acked", "amqp-0-9-1", "amqp"): 6,
    }
    # the broker's own events carry no protocol
    assert {r[_PROTO] for r in rows if r[_EVENT] == "routed"} == {None}

    cfg = AuditConfig(db=sqlite_target(tmp_path / "data" / "amqplite.db"), out=tmp_path / "out")
    res = run_audit(cfg, spark=spark)
    rep = json.loads((res.report_dir / "report.json").read_text())
    by = {(d["protocol"], d["event"]): d["count"] for d in rep["protocols"]}
    assert by == {("amqp-0-9-1", "published"): 2, ("amqp-0-9-1", "delivered"): 6,
                  ("amqp-0-9-1", "acked"): 6, ("mqtt-3.1.1", "published"): 4,
                  ("mqtt-5.0", "delivered"): 6, ("mqtt-5.0", "acked"): 6}
    html = (res.report_dir / "report.html").read_text()
    assert "By protocol" in html and "mqtt-3.1.1" in html
