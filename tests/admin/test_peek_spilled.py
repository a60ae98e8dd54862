"""Peek sees the whole queue in order, entries spilled to the store included.

A small ``body_window`` makes a durable queue spill its committed persistent
messages after the first ``WINDOW`` (as tests/server/test_spill_live.py forces
it); transient messages published after them wait in RAM behind the spilled
run. A peek must show head, spilled run and tail, in order, within its count
and byte caps.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from tests.brokerproc import BrokerProcess, wait_for
from tests.server.conftest import connect

N = 1000  # persistent: all but the first WINDOW spill
TAIL = 50  # transient, after them: they stay in RAM, behind the spilled run
WINDOW = 200
CAP = 64 * 1024


def body(i: int) -> bytes:
    return b"%06d" % i + b"x" * 1000


@pytest.fixture(scope="module")
def spilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("peek-spill"), None,
                      env={"AMQPLITE_BODY_WINDOW": str(WINDOW),
                           "AMQPLITE_ADMIN_PEEK_MAX_BYTES": str(CAP)}).start()
    try:
        c = connect(b)
        ch = c.channel()
        ch.queue_declare("deep", durable=True)
        ch.confirm_delivery()
        for i in range(N):
            ch.basic_publish("", "deep", body(i), pika.BasicProperties(delivery_mode=2))
        for i in range(N, N + TAIL):
            ch.basic_publish("", "deep", body(i), pika.BasicProperties(delivery_mode=1))
        c.close()
        wait_for(lambda: queue(b)["messages_paged_out"] >= N - WINDOW, 20,
                 what="the persistent messages behind the window to spill")
        yield b
    finally:
        b.stop()


def queue(b: BrokerProcess) -> dict[str, Any]:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/deep", auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def peek(b: BrokerProcess, **params: Any) -> httpx.Response:
    r = httpx.get(f"{b.admin_url}/api/queues/%2F/deep/messages", params=params,
                  auth=("guest", "guest"), timeout=30)
    assert r.status_code == 200, r.text
    return r


def numbers(r: httpx.Response) -> list[int]:
    return [int(m["payload"][:6]) for m in r.json()]


def test_peek_shows_head_spilled_run_and_tail_in_order(spilled: BrokerProcess) -> None:
    info = queue(spilled)
    assert info["messages_ready"] == N + TAIL and info["messages_ram"] <= WINDOW + TAIL
    r = peek(spilled, limit=N + TAIL, truncate=6)  # small answers: all of them fit the cap
    assert r.headers["x-total-count"] == str(N + TAIL)
    got = r.json()
    assert numbers(r) == list(range(N + TAIL))
    assert [m["index"] for m in got] == list(range(N + TAIL))
    assert all(m["payload_bytes"] == 1006 and m["truncated"] for m in got)
    # a page inside the spilled run, one across its end into the tail, one in the tail
    assert numbers(peek(spilled, offset=500, limit=20, truncate=6)) == list(range(500, 520))
    assert numbers(peek(spilled, offset=N - 5, limit=10, truncate=6)) == list(
        range(N - 5, N + 5))
    assert numbers(peek(spilled, offset=N + 40, limit=100, truncate=6)) == list(
        range(N + 40, N + TAIL))
    # a filter sees spilled bodies and headers alike
    (m,) = peek(spilled, filter="body=000777*").json()
    assert m["index"] == 777 and m["payload"].encode() == body(777)
    # nothing was consumed or loaded back by looking
    after = queue(spilled)
    assert after["messages_ready"] == N + TAIL
    assert after["messages_paged_out"] == info["messages_paged_out"]


def test_peek_of_spilled_entries_stops_at_the_byte_cap(spilled: BrokerProcess) -> None:
    r = peek(spilled, offset=300, limit=500)
    assert r.headers["x-max-bytes-reached"] == "true" and r.headers["x-max-bytes"] == str(CAP)
    got = numbers(r)
    assert 1 <= len(got) < 500 and got == list(range(300, 300 + len(got)))
    assert sum(len(m["payload"]) for m in r.json()) <= CAP
    assert all(m["payload"].encode() == body(i) for i, m in zip(got, r.json(), strict=True))
