"""MQTT connections that go wrong: refused logins, malformed packets, dropped sockets
(wills), expired keep-alives, a taken port; and the mosquitto command-line clients."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Publish,
    Will,
)
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.mqttclient import V5, V311, Client, RawClient, mqtt_broker, new_id, running_broker


@pytest.fixture(scope="module")
def mb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from running_broker(tmp_path_factory.mktemp("mqtt-errors"))


def _port(b: BrokerProcess) -> int:
    return int(b.mqtt_port)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("version", "user", "password", "code"), [
    (V311, "guest", b"wrong", 4),  # bad user name or password
    (V311, "nobody", b"guest", 4),
    (V311, "no-such-vhost:guest", b"guest", 5),
    (V5, "guest", b"wrong", ReasonCode.BAD_USER_NAME_OR_PASSWORD),
])
def test_refused_login_gets_connack_code(mb: BrokerProcess, version: int, user: str | None,
                                         password: bytes | None, code: int) -> None:
    raw = RawClient(_port(mb), version)
    raw.send(Connect(new_id(), protocol_level=version, username=user, password=password))
    answer = raw.recv()
    assert isinstance(answer, ConnAck) and answer.reason_code == code
    assert raw.closed_by_broker()


def test_vhost_in_user_name(mb: BrokerProcess) -> None:
    raw = RawClient(_port(mb))
    raw.send(Connect(new_id(), username="/:guest", password=b"guest"))
    assert _accepted(raw.recv())
    raw.drop()


def _remote_host() -> str | None:
    """One of this machine's own addresses that is not loopback, if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet leaves: it only picks a route
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_anonymous_is_guest_from_loopback_by_default(tmp_path: Path) -> None:
    """RabbitMQ 3.x's mqtt.allow_anonymous (default user guest) and Mosquitto 2's
    local-only listener: no user name, or a zero-length one (gmqtt's), is guest from
    loopback; from another address guest's loopback rule refuses it (5 / 0x87), and
    --no-mqtt-allow-anonymous refuses it everywhere."""
    remote = _remote_host()
    b = mqtt_broker(tmp_path / "data", *(("--host", remote) if remote else ()))
    try:
        for version, user in ((V311, None), (V5, None), (V311, ""), (V5, "")):
            raw = RawClient(_port(b), version)
            raw.send(Connect(new_id(), protocol_level=version, username=user))
            assert _accepted(raw.recv())
            raw.drop()
        if remote is not None:
            for version, code, bad in ((V311, 5, 4), (V5, ReasonCode.NOT_AUTHORIZED,
                                                     ReasonCode.BAD_USER_NAME_OR_PASSWORD)):
                raw = RawClient(_port(b), version, host=remote)
                raw.send(Connect(new_id(), protocol_level=version))
                answer = raw.recv()
                assert isinstance(answer, ConnAck) and answer.reason_code == code
                raw = RawClient(_port(b), version, host=remote)  # a password login works
                raw.send(Connect(new_id(), protocol_level=version, username="guest",
                                 password=b"guest"))
                answer = raw.recv()
                assert isinstance(answer, ConnAck) and answer.reason_code == bad  # loopback-only
    finally:
        b.stop()
    b = mqtt_broker(tmp_path / "off", "--no-mqtt-allow-anonymous")
    try:
        for version, user, code in ((V311, None, 5), (V5, "", ReasonCode.NOT_AUTHORIZED)):
            raw = RawClient(_port(b), version)
            raw.send(Connect(new_id(), protocol_level=version, username=user))
            answer = raw.recv()
            assert isinstance(answer, ConnAck) and answer.reason_code == code
            assert raw.closed_by_broker()
    finally:
        b.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_malformed_packet_closes_only_that_client(mb: BrokerProcess, version: int) -> None:
    topic = f"healthy/{new_id()}"
    other = Client(_port(mb), new_id(), version)
    other.connect()
    other.subscribe(topic, 1)
    raw = RawClient(_port(mb), version)
    raw.send(Connect(new_id(), protocol_level=version, username="guest", password=b"guest"))
    assert _accepted(raw.recv())
    raw.sock.sendall(b"\x36\x03\x00\x01a")  # PUBLISH with QoS 3: malformed
    if version == V5:
        answer = raw.recv()
        assert isinstance(answer, Disconnect)
        assert answer.reason_code == ReasonCode.MALFORMED_PACKET
    assert raw.closed_by_broker()
    other.publish(topic, b"still here", 1)
    assert other.get().payload == b"still here"
    other.close()


@pytest.mark.parametrize("version", [V311, V5])
def test_will_published_on_socket_drop(mb: BrokerProcess, version: int) -> None:
    topic = f"wills/{new_id()}"
    watcher = Client(_port(mb), new_id())
    watcher.connect()
    watcher.subscribe(topic, 1)
    raw = RawClient(_port(mb), version)
    raw.send(Connect(new_id(), protocol_level=version, username="guest", password=b"guest",
                     will=Will(topic, b"gone", qos=1)))
    assert _accepted(raw.recv())
    raw.drop()
    m = watcher.get()
    assert (m.topic, m.payload, m.qos) == (topic, b"gone", 1)
    watcher.close()


def test_no_will_after_normal_disconnect(mb: BrokerProcess) -> None:
    topic = f"wills/{new_id()}"
    watcher = Client(_port(mb), new_id())
    watcher.connect()
    watcher.subscribe(topic, 1)
    leaving = Client(_port(mb), new_id(), will=(topic, b"should not appear", 1))
    leaving.connect()
    leaving.close()
    # a message published after the disconnect is the first the watcher sees
    marker = Client(_port(mb), new_id())
    marker.connect()
    marker.publish(topic, b"marker", 1)
    assert watcher.get().payload == b"marker"
    marker.close()
    watcher.close()


@pytest.mark.parametrize("version", [V311, V5])
def test_keepalive_expiry_closes_and_publishes_the_will(mb: BrokerProcess,
                                                        version: int) -> None:
    topic = f"wills/{new_id()}"
    watcher = Client(_port(mb), new_id())
    watcher.connect()
    watcher.subscribe(topic, 1)
    raw = RawClient(_port(mb), version)
    raw.send(Connect(new_id(), protocol_level=version, keep_alive=1, username="guest",
                     password=b"guest", will=Will(topic, b"silent", qos=1)))
    assert _accepted(raw.recv())
    # silence: the broker gives up 1.5 s later (the socket timeout is 15 s)
    if version == V5:
        answer = raw.recv()
        assert isinstance(answer, Disconnect)
        assert answer.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
    assert raw.closed_by_broker()
    assert watcher.get().payload == b"silent"
    watcher.close()


def test_max_keepalive_is_told_to_and_held_against_mqtt5(tmp_path: Path) -> None:
    """Mosquitto's max_keepalive (``--mqtt-max-keepalive``): an MQTT 5 client asking
    for 60 s is told 1 s (CONNACK Server Keep Alive) and dropped 1.5 s into silence
    (0x8D); a 3.1.1 client keeps its own (no packet can tell it otherwise)."""
    b = mqtt_broker(tmp_path / "data", "--mqtt-max-keepalive", "1")
    try:
        old = RawClient(_port(b), V311)
        old.send(Connect(new_id(), keep_alive=60, username="guest", password=b"guest"))
        assert _accepted(old.recv())
        raw = RawClient(_port(b), V5)
        raw.send(Connect(new_id(), protocol_level=V5, keep_alive=60, username="guest",
                         password=b"guest"))
        ack = raw.recv()
        assert _accepted(ack) and ack.properties.server_keep_alive == 1  # type: ignore[union-attr]
        answer = raw.recv()  # silence: the broker gives up
        assert isinstance(answer, Disconnect)
        assert answer.reason_code == ReasonCode.KEEP_ALIVE_TIMEOUT
        old.send(PingReq())  # the 3.1.1 client, as silent, is still there
        assert old.recv() == PingResp()
        old.drop()
    finally:
        b.stop()


def test_a_connect_that_never_comes_is_logged_as_that(mb: BrokerProcess) -> None:
    """A socket that sends nothing is closed after connect_timeout (10 s), and the
    log says so rather than "keep alive expired"."""
    raw = RawClient(_port(mb))
    port = raw.sock.getsockname()[1]
    assert raw.closed_by_broker()
    wait_for(lambda: f":{port}: no CONNECT within 10 s" in mb.log(), what="the log line")
    assert f":{port} (): keep alive expired" not in mb.log()


def test_pingreq_gets_pingresp(mb: BrokerProcess) -> None:
    raw = RawClient(_port(mb))
    raw.send(Connect(new_id(), keep_alive=30, username="guest", password=b"guest"))
    assert _accepted(raw.recv())
    raw.send(PingReq())
    assert raw.recv() == PingResp()
    raw.send(Disconnect())
    assert raw.closed_by_broker()


def _accepted(p: object) -> bool:
    return isinstance(p, ConnAck) and p.reason_code == 0 and not p.session_present


def test_mosquitto_clients(mb: BrokerProcess) -> None:
    port = str(_port(mb))
    cid, topic = new_id(), f"cli/{new_id()}"
    sub = subprocess.Popen(["mosquitto_sub", "-p", port, "-u", "guest", "-P", "guest",
                            "-i", cid, "-q", "1", "-t", topic, "-C", "1", "-W", "20"],
                           stdout=subprocess.PIPE, text=True)
    try:
        def subscribed() -> bool:
            r = httpx.get(f"{mb.admin_url}/api/queues", auth=("guest", "guest"))
            return any(q["name"] == f"mqtt-subscription-{cid}qos1" for q in r.json())

        wait_for(subscribed, what="mosquitto_sub's subscription")
        subprocess.run(["mosquitto_pub", "-p", port, "-u", "guest", "-P", "guest", "-q", "2",
                        "-V", "mqttv5", "-t", topic, "-m", "from mosquitto"],
                       check=True, timeout=20)
        out, _ = sub.communicate(timeout=20)
        assert out.strip() == "from mosquitto"
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()


def test_mqtt_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port", "0",
             "--admin-port", "0", "--mqtt-port", str(port), "--stomp-port", "0", "--kafka-port", "0",
             "--data-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"MQTT port {port} on 127.0.0.1 is already in use" in out.stderr
    assert "--mqtt-port, AMQPLITE_MQTT_PORT or `mqtt_port` in the config file" in out.stderr
    assert "Traceback" not in out.stderr


def test_packet_size_limits_and_the_anonymous_user(tmp_path: Path) -> None:
    """``mqtt_max_packet_size_unauthenticated``: a CONNECT over it is refused before
    any login; ``mqtt_max_packet_size``: an MQTT 5 client is told it in the CONNACK
    and a PUBLISH over it ends that connection (0x95), nobody else's; an anonymous
    client acts as ``mqtt_default_user``."""
    from tests.brokerproc import free_port
    from tests.server.mqttclient import listening

    port = free_port()
    b = BrokerProcess(tmp_path / "d", None, "--mqtt-port", str(port), "--mqtt-allow-anonymous",
                      env={"AMQPLITE_MQTT_MAX_PACKET_SIZE": "4KiB",
                           "AMQPLITE_MQTT_MAX_PACKET_SIZE_UNAUTHENTICATED": "1KiB",
                           "AMQPLITE_MQTT_DEFAULT_USER": "anon"})
    b.start()
    try:
        wait_for(lambda: listening(port), 30, what="the MQTT listener")
        with httpx.Client(base_url=b.admin_url or "", auth=("guest", "guest")) as api:
            assert api.put("/api/users/anon", json={"password": "x", "tags": ""}
                           ).status_code == 201
            assert api.put("/api/permissions/%2F/anon", json={
                "configure": ".*", "write": ".*", "read": ".*"}).status_code == 201
            big = RawClient(port, V5)
            big.send(Connect(new_id(), protocol_level=V5, username="guest",
                             password=b"g" * 2000))
            answer = big.recv()
            assert answer is None or (isinstance(answer, ConnAck) and answer.reason_code)
            assert big.closed_by_broker()
            other = Client(port, new_id(), V5)
            other.connect()
            raw = RawClient(port, V5)
            raw.send(Connect(new_id(), protocol_level=V5))
            ack = raw.recv()
            assert isinstance(ack, ConnAck) and ack.reason_code == 0
            assert ack.properties.maximum_packet_size == 4096
            users = {c.get("user") for c in api.get("/api/connections").json()
                     if c.get("protocol", "").startswith("MQTT")}
            assert "anon" in users, users
            raw.send(Publish(f"big/{new_id()}", b"x" * 5000, 0))
            gone = raw.recv()
            assert isinstance(gone, Disconnect) and gone.reason_code == ReasonCode.PACKET_TOO_LARGE
            assert raw.closed_by_broker()
            topic = f"fine/{new_id()}"
            other.subscribe(topic, 1)
            other.publish(topic, b"y" * 3000, 1)
            assert other.get().payload == b"y" * 3000
            other.close()
    finally:
        b.stop()
