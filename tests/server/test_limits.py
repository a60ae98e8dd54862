"""Guardrails: the node-wide connection limit and the disk-free alarm."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest
from pika.exceptions import ProbableAccessDeniedError

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect, mounted_tmpfs, watch_blocked


def test_max_connections_refuses_the_one_too_many(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", None, "--max-connections", "3").start()
    try:
        conns = [connect(b) for _ in range(3)]
        # pika reports a close during connection.open as "probable access denied"
        with pytest.raises(ProbableAccessDeniedError) as info:
            connect(b)
        assert "(530) 'NOT_ALLOWED - connection refused: node connection limit (3) is reached'" \
            in str(info.value)
        # the connections already open are unaffected
        for c in conns:
            ch = c.channel()
            ch.queue_declare("", exclusive=True)
        conns.pop().close()
        extra = wait_for(lambda: _try_connect(b), 10, what="a freed slot")
        extra.channel().basic_publish("", "nowhere", b"x")
        extra.close()
        for c in conns:
            c.close()
        assert "Traceback" not in b.log()
    finally:
        b.stop()


def _try_connect(b: BrokerProcess) -> pika.BlockingConnection | None:
    try:
        return connect(b)
    except ProbableAccessDeniedError:
        return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs: free space we can take away and give back (needs root)."""
    with mounted_tmpfs(tmp_path / "disk", "64m") as mnt:
        yield mnt


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_disk_free_alarm_blocks_publishers_and_clears(tmp_path: Path, small_disk: Path) -> None:
    limit = 30_000_000
    b = BrokerProcess(small_disk / "d", None, "--disk-free-limit", "30MB")
    b.log_path = tmp_path / "broker.log"
    b.start()
    api = httpx.Client(base_url=str(b.admin_url), auth=("guest", "guest"), timeout=10)
    try:
        assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
        ov = api.get("/api/overview").json()
        assert ov["disk_free_alarm"] is False and ov["disk_free_limit"] == limit
        pub = connect(b, blocked_connection_timeout=60)
        events = watch_blocked(pub)
        ch = pub.channel()
        ch.queue_declare("disk", durable=True)
        ch.confirm_delivery()
        persistent = pika.BasicProperties(delivery_mode=2)
        for i in range(50):
            ch.basic_publish("", "disk", b"m%d" % i, persistent)
        cons = connect(b)
        cch = cons.channel()

        filler = small_disk / "filler"
        with open(filler, "wb") as f:  # leave ~15 MB: below the limit, far from full
            f.truncate(0)
            f.write(b"\0" * (_free(small_disk) - 15_000_000))
        r = wait_for(lambda: (x := api.get("/api/health/checks/alarms")).status_code == 503
                     and x, 10, what="the disk alarm")
        body = r.json()
        assert body["status"] == "failed" and body["alarms"][0]["resource"] == "disk"
        ov = api.get("/api/overview").json()
        assert ov["disk_free_alarm"] is True and ov["disk_free"] < limit
        assert "free disk space is insufficient" in b.log()

        # the publish that finds the alarm is taken; then the connection is blocked
        ch.basic_publish("", "disk", b"m50", persistent)
        wait_for(lambda: pub.process_data_events(time_limit=0.05) or events, 10,
                 what="connection.blocked")
        assert events == ["blocked:low on disk"]
        # a connection that does not publish keeps consuming
        got = cch.basic_get("disk")
        assert got[0] is not None and got[2] == b"m0"
        cch.basic_ack(got[0].delivery_tag)

        threading.Timer(1.0, filler.unlink).start()
        t0 = time.monotonic()
        ch.basic_publish("", "disk", b"m51", persistent)  # held until the alarm clears
        held = time.monotonic() - t0
        assert held > 0.8, f"a publish went through during the alarm ({held:.2f}s)"
        pub.process_data_events(time_limit=0.2)
        assert events == ["blocked:low on disk", "unblocked"]
        assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
        assert "disk free space alarm cleared" in b.log()
        pub.close()
        cons.close()
        b.kill()  # every confirmed message survives a crash
        b.start()
        c = connect(b)
        n = c.channel().queue_declare("disk", passive=True).method.message_count
        assert n == 51  # 52 confirmed, one consumed
        c.close()
        assert "Traceback" not in b.log()
    finally:
        api.close()
        b.kill()
