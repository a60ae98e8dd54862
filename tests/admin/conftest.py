"""Fixtures: one real broker process with the admin API for the whole admin suite."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from tests.brokerproc import BrokerProcess, free_port, wait_for

MONITOR = ("monitor", "monitor-secret")

CONFIG = """
[amqplite.users.monitor]
password = "monitor-secret"
tags = "monitoring"
"""


class AdminBroker:
    """A broker subprocess plus what tests need to reach it."""

    def __init__(self, proc: BrokerProcess, admin_url: str) -> None:
        self.proc = proc
        self.admin_url = admin_url

    @property
    def amqp_url(self) -> str:
        return self.proc.url

    def api(self, auth: tuple[str, str] | None = ("guest", "guest")) -> httpx.Client:
        return httpx.Client(base_url=self.admin_url, auth=auth, timeout=30)

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.amqp_url))

    def cli(self, *args: str, env: dict[str, str] | None = None,
            input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        """Run the real ``amqplite`` command against this broker."""
        e = dict(os.environ, AMQPLITE_ADMIN_URL=self.admin_url, COLUMNS="250")
        for k in ("AMQPLITE_USER", "AMQPLITE_PASSWORD", "AMQPLITE_VHOST"):
            e.pop(k, None)
        e.update(env or {})
        return subprocess.run([sys.executable, "-m", "amqplite", *args], env=e,
                              capture_output=True, text=input is None, input=input,
                              timeout=60)


def start_admin_broker(data_dir: Path, *extra: str,
                       env: dict[str, str] | None = None) -> AdminBroker:
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "amqplite.toml"
    cfg.write_text(CONFIG)
    port = free_port()
    proc = BrokerProcess(data_dir, None, "--admin-port", str(port), "--config", str(cfg),
                         *extra, env=env).start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/api/openapi.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, what="admin API to answer")
    except BaseException:
        proc.kill()  # no fixture will stop a broker whose start failed
        raise
    return AdminBroker(proc, url)


def start_mqtt_admin_broker(data_dir: Path) -> AdminBroker:
    """An admin broker with an MQTT listener too (``b.mqtt_port``)."""
    from tests.server.mqttclient import listening

    port = free_port()
    b = start_admin_broker(data_dir, "--mqtt-port", str(port))
    b.mqtt_port = port  # type: ignore[attr-defined]
    wait_for(lambda: listening(port), 30, what="the MQTT listener")
    return b


@pytest.fixture(scope="session")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path_factory.mktemp("admin-broker"))
    yield b
    b.proc.stop()


@pytest.fixture
def api(admin_broker: AdminBroker) -> Iterator[httpx.Client]:
    with admin_broker.api() as c:
        yield c


@pytest.fixture
def conn(admin_broker: AdminBroker) -> Iterator[pika.BlockingConnection]:
    c = admin_broker.connect()
    yield c
    if c.is_open:
        c.close()


@pytest.fixture
def channel(conn: pika.BlockingConnection) -> Any:
    """A channel in confirm mode: a publish returns once the broker has the message."""
    ch = conn.channel()
    ch.confirm_delivery()
    return ch


def qname(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def death_headers(queue: str, reason: str = "rejected", count: int = 1,
                  when: dt.datetime | None = None, exchange: str = "",
                  routing_keys: list[str] | None = None) -> dict[str, Any]:
    """The headers RabbitMQ writes on a message dead-lettered once from ``queue``."""
    when = when or dt.datetime(2024, 5, 1, 12, 0, 0)
    return {
        "x-death": [{
            "count": count, "reason": reason, "queue": queue, "time": when,
            "exchange": exchange, "routing-keys": routing_keys or [queue],
        }],
        "x-first-death-reason": reason,
        "x-first-death-queue": queue,
        "x-first-death-exchange": exchange,
        "x-last-death-reason": reason,
        "x-last-death-queue": queue,
        "x-last-death-exchange": exchange,
    }


def publish(channel: Any, queue: str, body: bytes, headers: dict[str, Any] | None = None,
            **props: Any) -> None:
    channel.basic_publish("", queue, body, pika.BasicProperties(
        delivery_mode=2, headers=headers, **props))


def counts(api: httpx.Client, queue: str) -> tuple[int, int]:
    q = api.get(f"/api/queues/%2F/{queue}").json()
    return q["messages_ready"], q["messages_unacknowledged"]
