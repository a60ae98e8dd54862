"""MQTT's other listeners against a real broker: MQTT over TLS (paho, mosquitto_pub),
certificate login, MQTT over WebSockets at /ws on the admin port (paho and a
raw wsproto client), and the refusal of enhanced authentication."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pika
import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    RejectConnection,
    Request,
    TextMessage,
)

from amqplite.protocol.mqtt.decoder import Decoder
from amqplite.protocol.mqtt.errors import ReasonCode
from amqplite.protocol.mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    Will,
    encode,
)
from amqplite.protocol.mqtt.properties import Properties
from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.mqttclient import TIMEOUT, V5, V311, Client, RawClient, listening, new_id
from tests.tlscerts import PKI, CertFiles, client_context, make_pki

pytest.importorskip("cryptography")


@attrs.frozen
class Broker:
    proc: BrokerProcess
    pki: PKI
    mqtt: int
    mqtts: int

    @property
    def admin(self) -> int:
        return self.proc.admin_port


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("mqtt-pki"))


@pytest.fixture(scope="module")
def broker(pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Plain MQTT, MQTT over TLS (client certificates optional but verified, and a
    certificate with no user name logs in as its CN) and /ws on the admin port.
    No AMQPS listener: MQTT's TLS stands on its own. User "app" exists."""
    data = tmp_path_factory.mktemp("mqtt-listeners")
    cfg = data / "amqplite.toml"
    cfg.write_text('[users.app]\npassword = "app-secret"\n')
    mqtt, mqtts = free_port(), free_port()
    b = BrokerProcess(data, None, "--config", str(cfg), "--mqtt-port", str(mqtt),
                      "--mqtt-tls-port", str(mqtts), "--tls-cert", str(pki.server.cert),
                      "--tls-key", str(pki.server.key), "--tls-ca", str(pki.ca.cert),
                      "--tls-verify-peer", "--mqtt-ssl-cert-login")
    b.start()
    wait_for(lambda: listening(mqtt) and listening(mqtts), 30, what="the MQTT listeners")
    yield Broker(b, pki, mqtt, mqtts)
    assert b.stop() == 0
    assert "Traceback" not in b.log(), b.log()


def tls_client(b: Broker, version: int = V311, cert: CertFiles | None = None,
               **kw: object) -> Client:
    c = Client(b.mqtts, new_id(), version, **kw)  # type: ignore[arg-type]
    c.c.tls_set_context(client_context(b.pki, cert))
    return c


def ws_client(port: int, version: int = V311, **kw: object) -> Client:
    """paho over WebSockets at /ws of the admin port ``port``."""
    c = Client(port, new_id(), version, **kw)  # type: ignore[arg-type]
    c.c.transport = "websockets"
    c.c.ws_set_options(path="/ws")
    return c


def _connected(c: Client) -> Client:
    assert c.connect() == (0, False)
    return c


def _round_trip(c: Client, topic: str, payload: bytes, qos: int) -> None:
    """``c`` subscribes to ``topic``, publishes there and gets its message back."""
    assert c.subscribe(topic, qos) == [qos]
    c.publish(topic, payload, qos)
    m = c.get()
    assert (m.topic, m.payload, m.qos) == (topic, payload, qos)


def _connections(b: Broker) -> list[dict[str, object]]:
    r = httpx.get(f"http://127.0.0.1:{b.admin}/api/connections", auth=("guest", "guest"),
                  timeout=TIMEOUT)
    r.raise_for_status()
    return list(r.json())


def _connection_of(b: Broker, client_id: str) -> dict[str, object]:
    def find() -> dict[str, object] | None:
        for c in _connections(b):
            props = c.get("client_properties")
            if isinstance(props, dict) and props.get("client_id") == client_id:
                return c
        return None

    return wait_for(find, TIMEOUT, what=f"connection {client_id}")  # type: ignore[no-any-return]


# ---------------------------------------------------------------- TLS
@pytest.mark.parametrize("version", [V311, V5])
def test_tls_publish_and_subscribe_beside_tcp(broker: Broker, version: int) -> None:
    """A TLS subscriber gets a TCP client's publish and the other way round, at QoS 1;
    the admin API marks the TLS connection ssl."""
    topic = f"tls/{new_id()}"
    secure = _connected(tls_client(broker, version))
    plain = _connected(Client(broker.mqtt, new_id(), version))
    try:
        assert secure.subscribe(f"{topic}/in", 1) == [1]
        assert plain.subscribe(f"{topic}/out", 1) == [1]
        plain.publish(f"{topic}/in", b"to tls", 1)
        secure.publish(f"{topic}/out", b"from tls", 1)
        m = secure.get()
        assert (m.topic, m.payload, m.qos) == (f"{topic}/in", b"to tls", 1)
        m = plain.get()
        assert (m.topic, m.payload, m.qos) == (f"{topic}/out", b"from tls", 1)
        info = _connection_of(broker, str(secure.c._client_id.decode()))
        assert info["ssl"] is True and info["user"] == "guest"
        assert _connection_of(broker, str(plain.c._client_id.decode()))["ssl"] is False
    finally:
        secure.close()
        plain.close()


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients absent")
def test_mosquitto_pub_over_tls(broker: Broker) -> None:
    topic = f"tls/mosquitto/{new_id()}"
    sub = _connected(Client(broker.mqtt, new_id()))
    try:
        assert sub.subscribe(topic, 1) == [1]
        out = subprocess.run(
            ["mosquitto_pub", "-h", "localhost", "-p", str(broker.mqtts), "--cafile",
             str(broker.pki.ca.cert), "-u", "guest", "-P", "guest", "-q", "1", "-t", topic,
             "-m", "over tls", "-V", "mqttv311"],
            capture_output=True, text=True, timeout=TIMEOUT)
        assert out.returncode == 0, out.stderr
        m = sub.get()
        assert (m.topic, m.payload) == (topic, b"over tls")
    finally:
        sub.close()


def test_plain_mqtt_on_the_tls_port_is_closed_and_harms_nobody(broker: Broker) -> None:
    """A client speaking plain MQTT to the TLS port fails its handshake alone."""
    bystander = _connected(tls_client(broker))
    try:
        raw = RawClient(broker.mqtts)
        raw.send(Connect(new_id(), username="guest", password=b"guest"))
        assert raw.recv() is None  # no CONNACK: the socket is closed
        raw.drop()
        _round_trip(bystander, f"tls/bystander/{new_id()}", b"still here", 0)
    finally:
        bystander.close()


def test_mqtt_tls_port_taken_names_its_setting(pki: PKI, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port",
             str(free_port()), "--admin-port", "0", "--data-dir", str(tmp_path),
             "--stomp-port", "0", "--kafka-port", "0", "--mqtt-tls-port", str(port), "--tls-cert",
             str(pki.server.cert),
             "--tls-key", str(pki.server.key)],
            capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"MQTT over TLS port {port} on 127.0.0.1 is already in use" in out.stderr
    assert "--mqtt-tls-port, AMQPLITE_MQTT_TLS_PORT or `mqtt_tls_port`" in out.stderr
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- certificate login
@pytest.mark.parametrize("version", [V311, V5])
def test_certificate_login_as_its_cn(broker: Broker, version: int) -> None:
    """A verified certificate for CN "app" and no user name logs in as app."""
    c = _connected(tls_client(broker, version, broker.pki.issue("app"), user=None))
    try:
        _round_trip(c, f"cert/{new_id()}", b"as app", 1)
        info = _connection_of(broker, str(c.c._client_id.decode()))
        assert (info["user"], info["vhost"], info["ssl"]) == ("app", "/", True)
    finally:
        c.close()


def tls_raw(b: Broker, version: int = V311, cert: CertFiles | None = None) -> RawClient:
    """Our own packets over TLS: for the exact CONNACK codes of refusals."""
    raw = RawClient(b.mqtts, version)
    raw.sock = client_context(b.pki, cert).wrap_socket(raw.sock, server_hostname="127.0.0.1")
    return raw


def _connack(raw: RawClient, connect: Connect) -> int:
    raw.send(connect)
    ack = raw.recv()
    assert isinstance(ack, ConnAck), ack
    if ack.reason_code:
        assert raw.closed_by_broker()
    raw.drop()
    return ack.reason_code


@pytest.mark.parametrize(("version", "code"), [(V311, 5), (V5, ReasonCode.NOT_AUTHORIZED)])
def test_certificate_of_an_unknown_user_is_not_authorized(broker: Broker, version: int,
                                                          code: int) -> None:
    raw = tls_raw(broker, version, broker.pki.issue("stranger"))
    assert _connack(raw, Connect(new_id(), protocol_level=version)) == code
    wait_for(lambda: "login refused for user 'stranger' (client certificate)"
             in broker.proc.log(), TIMEOUT, what="the refusal in the log")


def test_user_name_beside_a_certificate_is_a_password_login(broker: Broker) -> None:
    """The certificate names the user only when the CONNECT names none."""
    cert = broker.pki.issue("app")
    assert _connack(tls_raw(broker, V311, cert),
                    Connect(new_id(), username="app", password=b"wrong")) == 4
    c = _connected(tls_client(broker, V311, cert, user="guest", password="guest"))
    try:
        assert _connection_of(broker, str(c.c._client_id.decode()))["user"] == "guest"
    finally:
        c.close()


def test_no_certificate_and_no_user_name_is_anonymous(broker: Broker) -> None:
    """Without a certificate login, no user name is the anonymous login: guest from
    loopback (RabbitMQ's mqtt.allow_anonymous, on by default)."""
    assert _connack(tls_raw(broker), Connect(new_id())) == 0


# ---------------------------------------------------------------- enhanced auth
def test_enhanced_authentication_gets_bad_authentication_method(broker: Broker) -> None:
    raw = RawClient(broker.mqtt, V5)
    raw.send(Connect(new_id(), protocol_level=V5, username="guest", password=b"guest",
                     properties=Properties(authentication_method="SCRAM-SHA-1",
                                           authentication_data=b"n,,n=guest,r=abc")))
    ack = raw.recv()
    assert isinstance(ack, ConnAck) and ack.reason_code == ReasonCode.BAD_AUTHENTICATION_METHOD
    assert raw.closed_by_broker()


def test_auth_packet_after_a_plain_connect_is_a_protocol_error(broker: Broker) -> None:
    """Re-authentication needs a method from the CONNECT (section 4.12.1); there is
    none, so an AUTH is a protocol error (DISCONNECT 0x82), and only its sender goes."""
    raw = RawClient(broker.mqtt, V5)
    raw.send(Connect(new_id(), protocol_level=V5, username="guest", password=b"guest"))
    assert isinstance(raw.recv(), ConnAck)
    raw.send(Auth(ReasonCode.REAUTHENTICATE,
                  Properties(authentication_method="SCRAM-SHA-1")))
    bye = raw.recv()
    assert isinstance(bye, Disconnect) and bye.reason_code == ReasonCode.PROTOCOL_ERROR
    assert raw.closed_by_broker()


# ---------------------------------------------------------------- WebSockets
class WSRaw:
    """A WebSocket client by hand (wsproto over a socket): for frames paho will not
    make, and for vanishing without a close."""

    def __init__(self, port: int, path: str = "/ws",
                 subprotocols: tuple[str, ...] = ("mqtt",), version: int = V311) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.version = version
        self.decoder = Decoder(version)
        self.events: deque[Event] = deque()
        self.sock.sendall(self.ws.send(Request(host="127.0.0.1", target=path,
                                               subprotocols=list(subprotocols))))
        self.answer = self.event()

    def event(self) -> Event | None:
        """The next WebSocket event; None once the broker closed the socket."""
        while not self.events:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return self.events.popleft()

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def packet(self) -> Packet | None:
        while True:
            p = self.decoder.next_packet()
            if p is not None:
                return p
            ev = self.event()
            if not isinstance(ev, BytesMessage):
                return None
            self.decoder.receive(bytes(ev.data))


def _refused(ws: WSRaw) -> int:
    assert isinstance(ws.answer, RejectConnection), ws.answer
    ws.sock.close()
    return ws.answer.status_code


@pytest.mark.parametrize("version", [V311, V5])
def test_websocket_publish_and_subscribe_with_tcp_and_amqp(broker: Broker,
                                                           version: int) -> None:
    """paho over WebSockets at /ws: gets a TCP client's publish; its own QoS 1 publish
    reaches a TCP subscriber and an AMQP queue bound to amq.topic."""
    topic = f"ws/{new_id()}"
    web = _connected(ws_client(broker.admin, version))
    plain = _connected(Client(broker.mqtt, new_id(), version))
    conn = pika.BlockingConnection(pika.URLParameters(broker.proc.url))
    try:
        ch = conn.channel()
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "amq.topic", topic.replace("/", ".") + ".*")
        assert web.subscribe(f"{topic}/+", 1) == [1]
        assert plain.subscribe(f"{topic}/out", 1) == [1]
        plain.publish(f"{topic}/in", b"to the browser", 1)
        m = web.get()
        assert (m.topic, m.payload, m.qos) == (f"{topic}/in", b"to the browser", 1)
        web.publish(f"{topic}/out", b"from the browser", 1)
        m = plain.get()
        assert (m.topic, m.payload) == (f"{topic}/out", b"from the browser")
        got = wait_for(lambda: [b for b in iter(lambda: ch.basic_get(q, auto_ack=True)[2],
                                                None)], TIMEOUT, what="the AMQP copies")
        assert sorted(got) == [b"from the browser", b"to the browser"]
        info = _connection_of(broker, str(web.c._client_id.decode()))
        assert info["user"] == "guest" and info["peer_host"] == "127.0.0.1"
    finally:
        conn.close()
        web.close()
        plain.close()


def test_websocket_messages_are_one_byte_stream(broker: Broker) -> None:
    """A CONNECT split over three messages, then SUBSCRIBE and PUBLISH in one message:
    the broker decodes packets, not messages."""
    ws = WSRaw(broker.admin)
    assert isinstance(ws.answer, AcceptConnection) and ws.answer.subprotocol == "mqtt"
    connect = encode(Connect(new_id(), username="guest", password=b"guest"), V311)
    for piece in (connect[:1], connect[1:7], connect[7:]):
        ws.send(piece)
    ack = ws.packet()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0
    topic = f"ws/stream/{new_id()}"
    ws.send(encode(Subscribe(1, (Subscription(topic, 0),)), V311)
            + encode(Publish(topic, b"one"), V311)[:5])
    suback = ws.packet()
    assert isinstance(suback, SubAck) and list(suback.reason_codes) == [0]
    ws.send(encode(Publish(topic, b"one"), V311)[5:] + encode(Publish(topic, b"two"), V311))
    got = [ws.packet(), ws.packet()]
    assert [p.payload for p in got if isinstance(p, Publish)] == [b"one", b"two"]
    ws.sock.close()


@pytest.mark.parametrize(("path", "protocols"), [
    ("/ws", ("chat",)),          # not MQTT
    ("/ws", ()),                 # no subprotocol ([MQTT-6.0.0-3]: "mqtt" is required)
    ("/mqtt", ("mqtt",)),        # not our path
    ("/api/overview", ("mqtt",)),
])
def test_websocket_refused_without_mqtt_at_ws(broker: Broker, path: str,
                                              protocols: tuple[str, ...]) -> None:
    assert _refused(WSRaw(broker.admin, path, protocols)) == 403


def test_websocket_mqttv31_subprotocol(broker: Broker) -> None:
    """MQTT.js offers "mqttv3.1" at protocol level 3: accepted, and answered as such."""
    ws = WSRaw(broker.admin, subprotocols=("mqttv3.1",), version=3)
    assert isinstance(ws.answer, AcceptConnection) and ws.answer.subprotocol == "mqttv3.1"
    ws.send(encode(Connect(new_id(), protocol_level=3, username="guest", password=b"guest"),
                   3))
    ack = ws.packet()
    assert isinstance(ack, ConnAck) and ack.reason_code == 0
    ws.sock.close()


@pytest.mark.parametrize("end", ["vanish", "text", "disconnect"])
def test_websocket_client_end_and_its_will(broker: Broker, end: str) -> None:
    """How a WebSocket client ends decides its will. Vanishing (the tab closed: no
    DISCONNECT, no close frame) publishes it; a text message breaks [MQTT-6.0.0-1]:
    the broker closes with 1003 and publishes it; a DISCONNECT is a normal end: no
    will, and the broker closes with 1000 (not hypercorn's 1011)."""
    topic = f"ws/will/{new_id()}"
    watcher = _connected(Client(broker.mqtt, new_id()))
    try:
        assert watcher.subscribe(topic, 1) == [1]
        ws = WSRaw(broker.admin)
        ws.send(encode(Connect(new_id(), username="guest", password=b"guest",
                               will=Will(topic, b"browser gone", 1)), V311))
        assert isinstance(ws.packet(), ConnAck)
        if end != "vanish":
            if end == "text":
                ws.sock.sendall(ws.ws.send(TextMessage(data="hello")))
            else:
                ws.send(bytes([0xE0, 0]))  # DISCONNECT
            close = ws.event()
            assert isinstance(close, CloseConnection)
            assert close.code == (1003 if end == "text" else 1000)
        ws.sock.close()
        if end == "disconnect":
            watcher.publish(topic, b"marker", 0)  # what arrives next is not a will
        m = watcher.get()
        assert (m.topic, m.payload) == (topic, b"marker" if end == "disconnect"
                                        else b"browser gone")
    finally:
        watcher.close()


NODE_DIR = Path(__file__).resolve().parent.parent / "node"


@pytest.mark.parametrize("transport", ["ws", "tcp"])
@pytest.mark.parametrize("version", [3, 4, 5])
def test_mqttjs_over_websocket(broker: Broker, version: int, transport: str) -> None:
    """MQTT.js from Node, as a browser page uses it (ws://host:admin/ws) and as a
    Node service does (mqtt://host:1883). It gets its own QoS 1 publish back; a
    paho subscriber gets it too."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "mqtt").is_dir():
        pytest.skip("node or MQTT.js not installed (scripts/test.sh installs them)")
    topic = f"mqttjs/{new_id()}"
    plain = _connected(Client(broker.mqtt, new_id()))
    try:
        assert plain.subscribe(f"{topic}/node", 1) == [1]
        url = (f"ws://127.0.0.1:{broker.admin}/ws" if transport == "ws"
               else f"mqtt://127.0.0.1:{broker.mqtt}")
        out = subprocess.run([node, str(NODE_DIR / "mqtt_ws.js"), url, topic, str(version)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got == {"topic": f"{topic}/node", "payload": "from mqtt.js", "qos": 1,
                       "granted": [1]}
        m = plain.get()
        assert (m.topic, m.payload, m.qos) == (f"{topic}/node", b"from mqtt.js", 1)
    finally:
        plain.close()


def test_websocket_turned_off(tmp_path: Path) -> None:
    """--no-mqtt-websocket: /ws is refused like any other path; TCP MQTT still works."""
    mqtt = free_port()
    b = BrokerProcess(tmp_path, None, "--mqtt-port", str(mqtt), "--no-mqtt-websocket")
    b.start()
    try:
        wait_for(lambda: listening(mqtt), 30, what="the MQTT listener")
        assert _refused(WSRaw(b.admin_port)) == 403
        c = _connected(Client(mqtt, new_id()))
        c.close()
        assert "WebSocket from 127.0.0.1" in b.log() and "MQTT over WebSockets is off" in b.log()
    finally:
        assert b.stop() == 0


def test_websocket_over_admin_https(pki: PKI, tmp_path: Path) -> None:
    """With admin_tls the same /ws is wss://."""
    mqtt = free_port()
    b = BrokerProcess(tmp_path, None, "--mqtt-port", str(mqtt), "--admin-tls",
                      "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    b.start()
    try:
        wait_for(lambda: listening(mqtt), 30, what="the MQTT listener")
        c = ws_client(b.admin_port)
        c.c.tls_set_context(client_context(pki))
        _connected(c)
        try:
            _round_trip(c, f"wss/{new_id()}", b"secure browser", 1)
        finally:
            c.close()
    finally:
        assert b.stop() == 0


def test_shutdown_with_websocket_and_tls_clients_open(pki: PKI, tmp_path: Path) -> None:
    """SIGTERM with MQTT 5 clients on /ws, TLS and TCP: each hears DISCONNECT 0x8B
    (server shutting down) before the broker exits 0; the WebSocket is closed with
    1000. The shutdown waits for MQTT connections to end as for AMQP ones."""
    mqtt, mqtts = free_port(), free_port()
    b = BrokerProcess(tmp_path, None, "--mqtt-port", str(mqtt), "--mqtt-tls-port", str(mqtts),
                      "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    b.start()
    try:
        wait_for(lambda: listening(mqtts) and listening(mqtt), 30, what="the MQTT listeners")
        plain = RawClient(mqtt, V5)
        plain.send(Connect(new_id(), protocol_level=V5, username="guest", password=b"guest"))
        assert isinstance(plain.recv(), ConnAck)
        ws = WSRaw(b.admin_port, version=V5)
        ws.send(encode(Connect(new_id(), protocol_level=V5, username="guest",
                               password=b"guest"), V5))
        assert isinstance(ws.packet(), ConnAck)
        secure = RawClient(mqtts, V5)
        secure.sock = client_context(pki).wrap_socket(secure.sock,
                                                      server_hostname="127.0.0.1")
        secure.send(Connect(new_id(), protocol_level=V5, username="guest", password=b"guest"))
        assert isinstance(secure.recv(), ConnAck)
    finally:
        assert b.stop() == 0
    for bye in (ws.packet(), secure.recv(), plain.recv()):
        assert isinstance(bye, Disconnect)
        assert bye.reason_code == ReasonCode.SERVER_SHUTTING_DOWN
    close = ws.event()
    assert isinstance(close, CloseConnection) and close.code == 1000
    assert "Traceback" not in b.log(), b.log()
