"""Thousands of idle connections: handshakes complete, the broker stays idle and small."""

from __future__ import annotations

import resource
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

from conformance._raw import RawConnection
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

TARGET = 3000
THREADS = 4
HANDSHAKE_DEADLINE = 45.0  # seconds for all of them
# fraction of one core: measured 0.3 %, 15-19 % while idle connections still ticked
IDLE_CPU_BOUND = 0.05
RSS_PER_CONN_BOUND = 100 * 1024  # bytes

def _raise_nofile() -> int:
    """Raise the soft fd limit as far as the hard limit allows; the broker inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want

def _connection_budget() -> int:
    """The number of connections this process and the broker can both hold."""
    limit = _raise_nofile()
    # both processes hold one fd per connection, plus files, pipes and listeners
    count = min(TARGET, limit - 200)
    if count < TARGET:
        warnings.warn(f"RLIMIT_NOFILE hard limit {limit}: testing {count} connections, "
                      f"not {TARGET}", stacklevel=2)
    return count

def _connection_count(admin: httpx.Client) -> int:
    return int(admin.get("/api/overview").json()["object_totals"]["connections"])

def test_three_thousand_idle_connections(tmp_path: Path) -> None:
    count = _connection_budget()  # before the broker starts: it inherits the limit
    b = BrokerProcess(tmp_path / "d").start()
    assert b.proc is not None and b.admin_url is not None
    broker = psutil.Process(b.proc.pid)
    admin = httpx.Client(base_url=b.admin_url, auth=("guest", "guest"), timeout=30)
    conns: list[RawConnection] = []
    try:
        wait_for(lambda: admin.get("/api/overview").status_code == 200, 30, what="admin API")
        baseline_conns = _connection_count(admin)
        # warm up: one full client round trip so lazily built state is in the baseline
        warm = connect(b)
        warm.channel().queue_declare("many-warm")
        warm.close()
        wait_for(lambda: _connection_count(admin) == baseline_conns, 10, what="warm-up close")
        rss0 = broker.memory_info().rss

        def open_one(_i: int) -> RawConnection:
            c = RawConnection(b.url, timeout=HANDSHAKE_DEADLINE)
            return c.open(channel=False)

        t0 = time.monotonic()
        with ThreadPoolExecutor(THREADS) as pool:
            for c in pool.map(open_one, range(count)):
                conns.append(c)
        took = time.monotonic() - t0
        assert len(conns) == count
        assert took < HANDSHAKE_DEADLINE, f"{count} handshakes took {took:.1f}s"
        wait_for(lambda: _connection_count(admin) == baseline_conns + count, 20,
                 what="the broker to list every connection")

        # idle CPU over a fixed measurement window (a measurement, not a synchronisation)
        cpu0, w0 = broker.cpu_times(), time.monotonic()
        time.sleep(3.0)
        cpu1, w1 = broker.cpu_times(), time.monotonic()
        idle_cpu = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (w1 - w0)
        rss1 = broker.memory_info().rss
        per_conn = (rss1 - rss0) / count

        # a real client still works next to them
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("many-live", auto_delete=True)
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", "many-live", str(i).encode())
        got: list[bytes] = []
        for _m, _p, body in ch.consume("many-live", auto_ack=True, inactivity_timeout=10):
            assert body is not None, "a pika consumer starved next to idle connections"
            got.append(body)
            if len(got) == 50:
                break
        ch.cancel()
        assert got == [str(i).encode() for i in range(50)]
        c.close()

        print(f"\n{count} connections: handshakes {took:.1f}s, broker RSS "
              f"{rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB "
              f"({per_conn / 1024:.1f} KiB/connection), idle CPU {idle_cpu * 100:.1f}% of a core")
        assert idle_cpu < IDLE_CPU_BOUND, f"idle broker used {idle_cpu:.0%} of a core"
        assert per_conn < RSS_PER_CONN_BOUND, f"{per_conn / 1024:.0f} KiB per connection"

        def close_one(c: RawConnection) -> None:
            c.close()

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(close_one, conns))
        conns.clear()
        wait_for(lambda: _connection_count(admin) == baseline_conns, 30,
                 what="the connection count to return to baseline")
    finally:
        for c in conns:
            c.sock.close()
        admin.close()
        b.kill()

