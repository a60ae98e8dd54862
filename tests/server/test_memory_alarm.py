"""The memory alarm against a real broker process and real pika clients."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pika

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect, watch_blocked


def _set_watermark(b: BrokerProcess, value: str) -> str:
    """The operator's way: ``amqplite set-memory-high-watermark`` against the admin API."""
    out = subprocess.run([sys.executable, "-m", "amqplite", "set-memory-high-watermark", value,
                          "--admin-url", str(b.admin_url)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_memory_alarm_blocks_publishers_and_raising_the_watermark_unblocks(
        tmp_path: Path) -> None:
    # 1 MB is far below any Python process's idle RSS: the alarm is on from the start
    b = BrokerProcess(tmp_path / "data", None, "--memory-high-watermark", "1MB").start()
    api = httpx.Client(base_url=str(b.admin_url), auth=("guest", "guest"), timeout=10)
    try:
        r = api.get("/api/health/checks/alarms")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "failed"
        assert body["reason"] == "There are alarms in effect in the node"
        assert [a["resource"] for a in body["alarms"]] == ["memory"]
        ov = api.get("/api/overview").json()
        assert ov["mem_alarm"] is True and ov["mem_limit"] == 1_000_000
        assert ov["mem_used"] > ov["mem_limit"]
        assert "memory resource limit alarm set" in b.log()

        cons = connect(b)
        cch = cons.channel()
        cch.queue_declare("mem")  # declaring is not publishing: no block
        got: list[bytes] = []
        cch.basic_consume("mem", lambda ch, m, p, body: (got.append(body),
                                                         ch.basic_ack(m.delivery_tag)))

        pub = connect(b, blocked_connection_timeout=60)
        events = watch_blocked(pub)
        pch = pub.channel()
        # the publish that finds the alarm is taken; then the connection is blocked
        pch.basic_publish("", "mem", b"m0")
        wait_for(lambda: pub.process_data_events(time_limit=0.05) or events, 10,
                 what="connection.blocked")
        assert events == ["blocked:low on memory"]
        # a connection that only consumes keeps receiving what is queued
        wait_for(lambda: cons.process_data_events(time_limit=0.05) or got, 10,
                 what="the consumer to receive m0")
        assert got == [b"m0"]

        pch.basic_publish("", "mem", b"m1")  # not read by the broker while blocked
        cons.process_data_events(time_limit=0.3)
        assert got == [b"m0"], "a publish went through during the memory alarm"

        said = _set_watermark(b, "0.95")
        assert "Memory high watermark set to 0.95" in said and "alarm off" in said
        wait_for(lambda: pub.process_data_events(time_limit=0.05) or "unblocked" in events,
                 10, what="connection.unblocked")
        assert events == ["blocked:low on memory", "unblocked"]
        wait_for(lambda: cons.process_data_events(time_limit=0.05) or len(got) == 2, 10,
                 what="the held publish to arrive")
        assert got == [b"m0", b"m1"]
        pch.basic_publish("", "mem", b"m2", pika.BasicProperties(delivery_mode=1))
        wait_for(lambda: cons.process_data_events(time_limit=0.05) or len(got) == 3, 10,
                 what="a publish after the alarm")
        assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
        mem = api.get("/api/node/memory").json()
        assert mem["mem_alarm"] is False and mem["memory_high_watermark"] == "0.95"
        assert "memory resource limit alarm cleared" in b.log()
        pub.close()
        cons.close()
        assert "Traceback" not in b.log()
    finally:
        api.close()
        b.stop()


def test_set_memory_high_watermark_rejects_a_bad_value(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        out = subprocess.run([sys.executable, "-m", "amqplite", "set-memory-high-watermark",
                              "plenty", "--admin-url", str(b.admin_url)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert "memory_high_watermark: not a memory watermark: 'plenty'" in out.stderr
    finally:
        b.stop()
