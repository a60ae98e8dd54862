"""Shovels between amqplite and a real RabbitMQ node (scripts/rabbitmq.sh): from an
amqplite queue to a RabbitMQ queue, and back. Runs wherever rabbitmq-server is
installed (CI installs it); skipped only when it is absent outside CI."""

from __future__ import annotations

import os
import random
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for
from tests.links.test_shovel import depth, name, publish, put_shovel, status

ROOT = Path(__file__).resolve().parents[2]
RABBIT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def rabbit_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not RABBIT.exists() and not os.environ.get("CI"):
        pytest.skip("rabbitmq-server is not installed (CI installs it)")
    ports = [p for p in random.sample(range(25800, 26000), 20) if _free(p)]
    port = ports[0]
    d = tmp_path_factory.mktemp("rabbit")
    script = str(ROOT / "scripts" / "rabbitmq.sh")
    subprocess.run(["bash", script, "start", str(d), str(port)], check=True, timeout=180)
    try:
        yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    finally:
        subprocess.run(["bash", script, "stop", str(d)], timeout=120, check=False)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path / "a")
    yield b
    b.proc.stop()


class Rabbit:
    """pika against the RabbitMQ node, as the helpers of test_shovel take a broker."""

    def __init__(self, url: str) -> None:
        self.url = url

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.url))


def test_shovel_to_and_from_rabbitmq(rabbit_url: str, broker: AdminBroker) -> None:
    rabbit = Rabbit(rabbit_url)
    src, mid, back = name("src"), name("mid"), name("back")
    publish(broker, src, [b"r-%d" % i for i in range(100)])
    to_rabbit, from_rabbit = name("to"), name("from")
    put_shovel(broker, to_rabbit, {"src-uri": "amqp://", "src-queue": src,
                                   "dest-uri": rabbit_url, "dest-queue": mid,
                                   "dest-add-forward-headers": True})
    wait_for(lambda: depth(rabbit, mid) == 100, 30,  # type: ignore[arg-type]
             what="100 messages on RabbitMQ")
    put_shovel(broker, from_rabbit, {"src-uri": rabbit_url, "src-queue": mid,
                                     "dest-uri": "amqp://", "dest-queue": back})
    wait_for(lambda: depth(broker, back) == 100, 30, what="100 messages back on amqplite")
    assert depth(rabbit, mid) == 0  # type: ignore[arg-type]
    for sh in (to_rabbit, from_rabbit):
        assert (status(broker, sh) or {}).get("state") == "running"
    conn = broker.connect()
    try:
        _, props, body = conn.channel().basic_get(back, auto_ack=True)
        assert body == b"r-0" and props.headers["x-shovelled"][0]["shovel-name"] == to_rabbit
    finally:
        conn.close()
