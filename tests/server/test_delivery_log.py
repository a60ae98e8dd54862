"""The delivery log as the broker writes it: events, levels, and retention."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pika

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect


def _rows(db: Path, sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as c:
        return c.execute(sql, args).fetchall()


def test_lifecycle_events_in_order(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d").start()
    c = connect(b)
    ch = c.channel()
    ch.queue_declare("work", durable=True)
    ch.queue_declare("dlq", durable=True)
    ch.queue_declare("flaky", durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    ch.confirm_delivery()
    ch.basic_publish("", "work", b"ok", pika.BasicProperties(delivery_mode=2, message_id="m-ok"))
    ch.basic_publish("", "flaky", b"bad", pika.BasicProperties(delivery_mode=2, message_id="m-bad"))
    m, _, _ = ch.basic_get("work")
    ch.basic_ack(m.delivery_tag)
    m, _, _ = ch.basic_get("flaky")
    ch.basic_nack(m.delivery_tag, requeue=True)
    m, _, _ = ch.basic_get("flaky")
    ch.basic_reject(m.delivery_tag, requeue=False)
    ch.basic_publish("", "dlq", b"marker", pika.BasicProperties(delivery_mode=2))  # commit barrier
    db = tmp_path / "d" / "amqplite.db"
    ok = _rows(db, "select event, queue, attempt from delivery_log where message_id='m-ok' order by id")
    assert ok == [("published", None, None), ("routed", "work", None), ("acked", "work", 1)]
    bad = _rows(db, "select event, queue, reason from delivery_log where message_id='m-bad' order by id")
    assert [r[0] for r in bad] == ["published", "routed", "requeued", "rejected", "dead_lettered",
                                   "routed"]
    assert bad[4] == ("dead_lettered", "flaky", "rejected") and bad[5][1] == "dlq"
    ids = [r[0] for r in _rows(db, "select id from delivery_log order by id")]
    assert ids == sorted(set(ids))
    # amqplite trace reads the same history
    out = subprocess.run([sys.executable, "-m", "amqplite", "trace", "m-bad", "--data-dir",
                          str(tmp_path / "d"), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "dead_lettered" in out.stdout
    c.close()
    b.stop()


def test_retention_prunes_only_exported_rows(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "d", env={"AMQPLITE_LOG_RETENTION_DAYS": "0",
                                           "AMQPLITE_LOG_PRUNE_INTERVAL": "0.2"}).start()
    c = connect(b)
    ch = c.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", q, str(i).encode(), pika.BasicProperties(delivery_mode=2))
    db = tmp_path / "d" / "amqplite.db"
    wait_for(lambda: _rows(db, "select count(*) from delivery_log")[0][0] >= 100, 10,
             what="log rows")
    (total,), = _rows(db, "select count(*) from delivery_log")
    # a watermark at the end of a batch row: retention drops whole batches
    (mark,), = _rows(db, "select min(last_id) from log_batches where last_id >= "
                         "(select min(first_id) + 40 from log_batches)")
    (upto,), = _rows(db, "select count(*) from delivery_log where id <= ?", mark)
    with sqlite3.connect(db, timeout=10) as w:  # what the audit job records after an export
        w.execute("insert into meta(key, value) values ('audit_exported_id', ?)", (str(mark),))
    wait_for(lambda: _rows(db, "select count(*) from delivery_log where id <= ?", mark)[0][0] == 0,
             15, interval=0.1, what="exported rows to be pruned")
    (left,), = _rows(db, "select count(*) from delivery_log")
    assert left >= total - upto, "rows above the watermark were pruned"
    c.close()
    b.stop()
