"""Dynamic shovels between two real amqplite brokers (A -> B), with real pika
clients: forwarding, at-least-once across a SIGKILL of the destination,
src-delete-after, status, restart, and survival of a restart of A."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import wait_for


def two_brokers(root: Path) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    """Brokers A and B under ``root``, stopped when the generator ends."""
    a = start_admin_broker(root / "a")
    try:
        b = start_admin_broker(root / "b")
    except BaseException:
        a.proc.stop()
        raise
    yield a, b
    for x in (a, b):
        x.proc.stop()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    """Two brokers for the module: four broker starts per test were most of its time."""
    yield from two_brokers(tmp_path_factory.mktemp("shovel"))


@pytest.fixture
def pair(brokers: tuple[AdminBroker, AdminBroker]) -> Iterator[tuple[AdminBroker, AdminBroker]]:
    """The module's brokers, both up and with no shovel: each test names its own queues,
    and what it leaves running (a shovel, a broker it killed) is undone here."""
    for x in brokers:
        restart_if_dead(x)
    yield brokers
    for x in brokers:
        restart_if_dead(x)
        with x.api() as api:
            for p in api.get("/api/parameters/shovel").json():
                vhost = quote(p["vhost"], safe="")
                assert api.delete(f"/api/parameters/shovel/{vhost}/{p['name']}").status_code \
                    == 204
            assert api.get("/api/shovels").json() == []


def restart_if_dead(x: AdminBroker) -> None:
    """Start ``x`` again if a test killed it and failed before starting it itself."""
    assert x.proc.proc is not None
    if x.proc.proc.poll() is not None:
        x.proc.start()
    wait_for(lambda: up(x), 30, what="the admin API")


def up(x: AdminBroker) -> bool:
    try:
        with x.api() as api:
            return api.get("/api/overview").status_code == 200
    except httpx.HTTPError:
        return False


def name(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def put_shovel(broker: AdminBroker, shovel: str, value: dict[str, Any],
               vhost: str = "%2F") -> None:
    with broker.api() as api:
        r = api.put(f"/api/parameters/shovel/{vhost}/{shovel}", json={"value": value})
        assert r.status_code in (201, 204), r.text


def status(broker: AdminBroker, shovel: str) -> dict[str, Any] | None:
    """The shovel's row in /api/shovels (None: none, or the API is not up yet)."""
    try:
        with broker.api() as api:
            rows = [s for s in api.get("/api/shovels").json() if s["name"] == shovel]
    except httpx.ConnectError:
        return None
    return rows[0] if rows else None


def publish(broker: AdminBroker, queue: str, bodies: list[bytes]) -> None:
    """Publish persistent messages with confirms (each confirmed before return)."""
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def drain(broker: AdminBroker, queue: str) -> list[bytes]:
    conn = broker.connect()
    try:
        ch = conn.channel()
        out = []
        while True:
            m, _, body = ch.basic_get(queue, auto_ack=True)
            if m is None:
                return out
            out.append(body)
    finally:
        conn.close()


def depth(broker: AdminBroker, queue: str) -> int:
    conn = broker.connect()
    try:
        ch = conn.channel()
        try:
            return int(ch.queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return -1
    finally:
        if conn.is_open:
            conn.close()


def test_forwards_queue_to_queue(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    publish(a, src, [b"before-%d" % i for i in range(50)])
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst, "dest-add-forward-headers": True})
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20,
             what="shovel running")
    publish(a, src, [b"after-%d" % i for i in range(50)])
    wait_for(lambda: depth(b, dst) == 100, 30, what="100 messages on B")
    assert depth(a, src) == 0
    conn = b.connect()
    try:
        _m, props, body = conn.channel().basic_get(dst, auto_ack=True)
        assert body == b"before-0"
        hdr = props.headers["x-shovelled"][0]
        assert hdr["shovel-name"] == sh and hdr["src-queue"] == src
        assert "guest:guest" not in hdr["dest-uri"]
    finally:
        conn.close()
    st = status(a, sh)
    assert st is not None and st["type"] == "dynamic" and st["vhost"] == "/"
    assert "guest:guest" not in st["dest_uri"] and st["forwarded"] == 100
    metrics = httpx.get(a.admin_url + "/metrics").text
    assert 'amqplite_shovels{state="running"} 1.0' in metrics
    assert f'amqplite_shovel_forwarded_messages_total{{shovel="{sh}",vhost="/"}} 100.0' \
        in metrics


def test_on_confirm_survives_destination_kill(pair: tuple[AdminBroker, AdminBroker]) -> None:
    """Every message confirmed by A reaches B at least once, though B is killed -9
    mid-stream and comes back on the same port."""
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    with b.api() as api:
        assert api.put(f"/api/queues/%2F/{dst}", json={"durable": True}).status_code == 201
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst, "reconnect-delay": 0.2, "src-prefetch-count": 50})
    bodies = [b"m-%d" % i for i in range(3000)]
    publish(a, src, bodies[:1500])
    wait_for(lambda: depth(b, dst) > 0, 30, what="forwarding to begin")
    b.proc.kill()
    wait_for(lambda: (status(a, sh) or {}).get("state") in ("terminated", "starting"), 20,
             what="shovel to notice")
    assert status(a, sh)["reason"]  # type: ignore[index]
    publish(a, src, bodies[1500:])
    b.proc.start()
    got: set[bytes] = set()

    def all_there() -> bool:
        got.update(drain(b, dst))
        return got >= set(bodies)

    wait_for(all_there, 60, what="every confirmed message on B")
    assert got == set(bodies)
    assert (status(a, sh) or {}).get("state") == "running"
    with a.api() as api:  # nothing left behind on A, unacked included
        wait_for(lambda: api.get(f"/api/queues/%2F/{src}").json()["messages"] == 0, 20,
                 what="A's queue to be empty")


def test_on_confirm_survives_kill_of_the_source_broker(
        pair: tuple[AdminBroker, AdminBroker]) -> None:
    """A runs the shovel and holds the source queue: killed -9 mid-stream, it comes
    back with its durable shovel, and every message it confirmed reaches B at least
    once (what B confirmed was acked on A; the rest is redelivered)."""
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    with b.api() as api:
        assert api.put(f"/api/queues/%2F/{dst}", json={"durable": True}).status_code == 201
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst, "reconnect-delay": 0.2, "src-prefetch-count": 50})
    bodies = [b"k-%d" % i for i in range(3000)]
    publish(a, src, bodies)
    wait_for(lambda: depth(b, dst) > 0, 30, what="forwarding to begin")
    a.proc.kill()
    a.proc.start()
    got: list[bytes] = []

    def all_there() -> bool:
        got.extend(drain(b, dst))
        return set(got) >= set(bodies)

    wait_for(all_there, 90, what="every message A confirmed on B")
    assert set(got) == set(bodies)  # duplicates allowed (at least once), nothing else
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20,
             what="the shovel running again on A")
    with a.api() as api:
        wait_for(lambda: api.get(f"/api/queues/%2F/{src}").json()["messages"] == 0, 20,
                 what="A's queue to be empty")


def test_delete_after_queue_length(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    publish(a, src, [b"x"] * 20)
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst, "src-delete-after": "queue-length"})
    with a.api() as api:
        wait_for(lambda: api.get(f"/api/parameters/shovel/%2F/{sh}").status_code == 404, 30,
                 what="the shovel to delete itself")
    assert status(a, sh) is None
    assert depth(b, dst) == 20
    publish(a, src, [b"later"])
    assert depth(a, src) == 1  # nothing consumes any more


def test_status_restart_and_bad_endpoint(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    bad = b.amqp_url.replace("guest:guest", "guest:wrong-pw")
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": bad,
                       "dest-queue": dst, "reconnect-delay": 0.2})
    # the row as it was when terminated (0.2 s later it is "starting" again)
    st = wait_for(lambda: (r := status(a, sh)) and r["state"] == "terminated" and r, 20,
                  what="the shovel to fail")
    assert st["reason"] and "wrong-pw" not in str(st)
    with a.api() as api:
        r = api.delete(f"/api/shovels/vhost/%2F/{sh}/restart")
        assert r.status_code == 204
        assert api.delete("/api/shovels/vhost/%2F/nonesuch/restart").status_code == 404
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst})
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20,
             what="the fixed shovel to run")
    with a.api() as api:
        assert [s["name"] for s in api.get("/api/shovels/%2F").json()] == [sh]
        assert api.delete(f"/api/parameters/shovel/%2F/{sh}").status_code == 204
    assert status(a, sh) is None


def test_shovel_survives_restart_of_its_broker(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst})
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20, what="running")
    a.proc.stop()
    a.proc.start()
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20,
             what="running after the restart")
    publish(a, src, [b"after-restart"])
    wait_for(lambda: depth(b, dst) == 1, 20, what="the message on B")


def test_src_exchange_to_dest_exchange(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    dst, sh = name("dst"), name()
    conn = b.connect()
    ch = conn.channel()
    ch.queue_declare(dst, durable=True)
    ch.queue_bind(dst, "amq.topic", "fwd.#")
    conn.close()
    put_shovel(a, sh, {"src-uri": "amqp://", "src-exchange": "amq.direct",
                       "src-exchange-key": "k", "dest-uri": b.amqp_url,
                       "dest-exchange": "amq.topic", "dest-exchange-key": "fwd.k",
                       "ack-mode": "on-publish"})
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20, what="running")
    conn = a.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("amq.direct", "k", b"e-%d" % i)
    conn.close()
    wait_for(lambda: depth(b, dst) == 10, 20, what="10 messages via amq.topic on B")


def test_api_shows_no_passwords(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    sh = name()
    secret = b.amqp_url.replace("guest:guest", "guest:hush-hush")
    put_shovel(a, sh, {"src-uri": secret, "src-queue": "q", "dest-uri": [secret],
                       "dest-queue": "d", "reconnect-delay": 5})
    with httpx.Client(base_url=a.admin_url, auth=("guest", "guest")) as api:
        for path in ("/api/shovels", "/api/parameters", f"/api/parameters/shovel/%2F/{sh}"):
            assert "hush-hush" not in api.get(path).text, path


def test_cli_add_list_restart_delete(pair: tuple[AdminBroker, AdminBroker]) -> None:
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    r = a.cli("shovels", "add", sh, "--src-uri", "amqp://", "--src-queue", src,
              "--dest-uri", b.amqp_url, "--dest-queue", dst, "--set", "src-prefetch-count=10")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: (status(a, sh) or {}).get("state") == "running", 20, what="running")
    r = a.cli("shovels")
    assert r.returncode == 0 and sh in r.stdout and "running" in r.stdout
    assert "guest:guest" not in r.stdout
    listed = a.cli("shovels", "list", "--json")
    assert [s["name"] for s in json.loads(listed.stdout)] == [sh]
    assert a.cli("shovels", "restart", sh).returncode == 0
    bad = a.cli("shovels", "add", name(), "--src-uri", "http://x", "--src-queue", "q",
                "--dest-uri", "amqp://", "--dest-queue", "d")
    assert bad.returncode != 0 and "src-uri" in bad.stderr + bad.stdout
    assert a.cli("shovels", "delete", sh).returncode == 0
    assert status(a, sh) is None


@pytest.mark.parametrize("mode", ["on-confirm", "on-publish"])
def test_delete_after_a_count(pair: tuple[AdminBroker, AdminBroker], mode: str) -> None:
    """Exactly N messages move; what the prefetch fetched beyond them goes back."""
    a, b = pair
    src, dst, sh = name("src"), name("dst"), name()
    publish(a, src, [b"n-%d" % i for i in range(20)])
    put_shovel(a, sh, {"src-uri": "amqp://", "src-queue": src, "dest-uri": b.amqp_url,
                       "dest-queue": dst, "src-delete-after": 5, "ack-mode": mode})
    with a.api() as api:
        wait_for(lambda: api.get(f"/api/parameters/shovel/%2F/{sh}").status_code == 404, 30,
                 what="the shovel to delete itself")
        wait_for(lambda: api.get(f"/api/queues/%2F/{src}").json()["messages_unacknowledged"]
                 == 0, 20, what="the extra deliveries to go back")
    assert drain(b, dst) == [b"n-%d" % i for i in range(5)]
    assert drain(a, src) == [b"n-%d" % i for i in range(5, 20)]
