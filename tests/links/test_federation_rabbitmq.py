"""Exchange federation with a real RabbitMQ 3.10 node (scripts/rabbitmq.sh, with
rabbitmq_federation enabled): amqplite federating from RabbitMQ, and RabbitMQ
federating from amqplite (which then serves the x-federation-upstream exchange
RabbitMQ's plugin declares). Runs wherever rabbitmq-server is installed (CI
installs it); skipped only when it is absent outside CI."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for
from tests.links.test_federation import (
    collect,
    declare,
    federate,
    links,
    name,
    publish,
    running,
    upstream_keys,
)
from tests.links.test_shovel_rabbitmq import RABBIT, ROOT, _free

SCRIPT = str(ROOT / "scripts" / "rabbitmq.sh")


class Rabbit:
    """A throwaway RabbitMQ node: pika for messages, rabbitmqctl for the rest; it
    stands in for an AdminBroker in the helpers of test_federation."""

    def __init__(self, url: str, home: Path) -> None:
        self.amqp_url, self.home = url, home

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.amqp_url))

    def ctl(self, *args: str) -> str:
        r = subprocess.run(["bash", SCRIPT, "ctl", str(self.home), *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr + r.stdout
        return r.stdout


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rabbit]:
    if not RABBIT.exists() and not os.environ.get("CI"):
        pytest.skip("rabbitmq-server is not installed (CI installs it)")
    port = next(p for p in random.sample(range(25800, 26000), 40) if _free(p))
    d = tmp_path_factory.mktemp("rabbit-fed")
    env = dict(os.environ, RABBITMQ_EXTRA_PLUGINS="rabbitmq_federation")
    subprocess.run(["bash", SCRIPT, "start", str(d), str(port)], check=True, timeout=180,
                   env=env)
    try:
        yield Rabbit(f"amqp://guest:guest@127.0.0.1:{port}/%2F", d)
    finally:
        subprocess.run(["bash", SCRIPT, "stop", str(d)], timeout=120, check=False)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[AdminBroker]:
    b = start_admin_broker(tmp_path / "a", env={"AMQPLITE_CLUSTER_NAME": "edge-1"})
    yield b
    b.proc.stop()


def test_amqplite_federates_from_rabbitmq(rabbit: Rabbit, broker: AdminBroker) -> None:
    x, q = name(), name("q")
    declare(rabbit, x, {})  # type: ignore[arg-type]
    declare(broker, x, {q: "k"})
    federate(broker, rabbit)  # type: ignore[arg-type]
    wait_for(lambda: running(broker, x), 60, what="the link to run")
    bound = rabbit.ctl("list_bindings", "source_name", "destination_name", "routing_key")
    assert f"{x}\tfederation: {x} -> edge-1 A\tk" in bound, bound
    publish(rabbit, x, "other", [b"nope"])  # type: ignore[arg-type]
    publish(rabbit, x, "k", [b"r-%d" % i for i in range(10)] + [b"end"])  # type: ignore[arg-type]
    got = collect(broker, q, b"end")
    assert [b for b, _ in got] == [b"r-%d" % i for i in range(10)] + [b"end"]
    hop = got[0][1]["x-received-from"][0]
    assert hop["exchange"] == x and hop["cluster-name"].startswith("amqplite-conf-")
    assert "guest" not in hop["uri"]


def test_rabbitmq_federates_from_amqplite(rabbit: Rabbit, broker: AdminBroker) -> None:
    x, q = name(), name("q")
    declare(broker, x, {})
    declare(rabbit, x, {q: "k"})  # type: ignore[arg-type]
    up = f"up-{x}"
    rabbit.ctl("set_parameter", "federation-upstream", up,
               json.dumps({"uri": broker.amqp_url, "reconnect-delay": 1}))
    rabbit.ctl("set_policy", "--apply-to", "exchanges", f"fed-{x}", f"^{x}$",
               json.dumps({"federation-upstream": up}))
    try:
        # RabbitMQ's plugin declared its x-federation-upstream exchange here and bound it
        wait_for(lambda: upstream_keys(broker, x) == {"k"}, 60, what="k bound on amqplite")
        with broker.api() as api:
            ix = [e for e in api.get("/api/exchanges/%2F").json()
                  if e["name"].startswith(f"federation: {x} -> ")]
        assert [e["type"] for e in ix] == ["x-federation-upstream"]
        publish(broker, x, "other", [b"nope"])
        publish(broker, x, "k", [b"a-%d" % i for i in range(10)] + [b"end"])
        got = collect(rabbit, q, b"end")  # type: ignore[arg-type]
        assert [b for b, _ in got] == [b"a-%d" % i for i in range(10)] + [b"end"]
        assert got[0][1]["x-received-from"][0]["cluster-name"] == "edge-1"
        # a message that already made its hop is not offered to RabbitMQ again
        conn = broker.connect()
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(x, "k", b"hopped", pika.BasicProperties(
            headers={"x-received-from": [{"uri": "amqp://elsewhere", "exchange": x,
                                          "redelivered": False, "cluster-name": "far"}]}))
        ch.basic_publish(x, "k", b"end-2")
        conn.close()
        got = collect(rabbit, q, b"end-2")  # type: ignore[arg-type]
        assert [b for b, _ in got] == [b"end-2"]
    finally:
        rabbit.ctl("clear_policy", f"fed-{x}")
        rabbit.ctl("clear_parameter", "federation-upstream", up)
    assert links(broker) == []
