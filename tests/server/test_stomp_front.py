"""The STOMP front end to end: stomp.py 9.0 (and raw sockets) against a real broker
started with --stomp-port."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import urllib.parse
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import stomp

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.server.stompclient import (
    DEADLINE,
    Recorder,
    connect,
    raw_frames,
    stomp_broker,
    stomp_port,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with stomp_broker(tmp_path_factory.mktemp("stomp")) as b:
        yield b


def _raw(b: BrokerProcess, data: bytes) -> tuple[list[bytes], bool]:
    with socket.create_connection(("127.0.0.1", stomp_port(b)), timeout=DEADLINE) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)
        return raw_frames(s)


def test_login_and_its_refusals(broker: BrokerProcess) -> None:
    c, _ = connect(broker)
    c.disconnect()
    frames, closed = _raw(broker, b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:bad\n\n\0")
    assert closed and len(frames) == 1
    assert frames[0].startswith(b"ERROR\n") and b"message:Bad CONNECT" in frames[0]
    assert b"Access refused for user 'guest'" in frames[0]
    frames, closed = _raw(broker, b"CONNECT\naccept-version:1.2\nhost:nosuch\nlogin:guest\n"
                                  b"passcode:guest\n\n\0")
    assert closed and b"Virtual host 'nosuch' access denied" in frames[0]
    frames, closed = _raw(broker, b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n"
                                  b"\n\0DISCONNECT\nreceipt:bye\n\n\0")
    assert closed and frames[0].startswith(b"CONNECTED\n") and b"version:1.2" in frames[0]
    assert b"server:amqplite/" in frames[0] and b"session:session-" in frames[0]
    assert frames[1].startswith(b"RECEIPT\n") and b"receipt-id:bye" in frames[1]
    frames, closed = _raw(broker, b"STOMP\naccept-version:1.1\n\n\0DISCONNECT\n\n\0")
    assert closed and frames[0].startswith(b"CONNECTED\n")  # as stomp_default_user, guest


def test_send_and_subscribe_on_queues_and_topics(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    c.send("/queue/e2e-q", "to the queue", headers={"x-custom": "v"})
    c.subscribe("/queue/e2e-q", id="q")
    c.subscribe("/topic/e2e.*", id="t")
    c.send("/topic/e2e.news", "to the topic", receipt="r")
    rec.wait_receipt("r")
    ms = rec.wait_messages(2)
    by_sub = {m.headers["subscription"]: m for m in ms}
    assert by_sub["q"].body == "to the queue" and by_sub["q"].headers["x-custom"] == "v"
    assert by_sub["q"].headers["destination"] == "/queue/e2e-q"
    assert by_sub["t"].body == "to the topic"
    assert by_sub["t"].headers["destination"] == "/topic/e2e.news"
    assert by_sub["t"].headers["content-length"] == str(len("to the topic"))
    c.disconnect()


def test_client_individual_ack_and_nack(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    c.send("/queue/e2e-dead", "")  # declares the dead-letter target
    c.send("/queue/e2e-work", "one", headers={"x-dead-letter-exchange": "",
                                              "x-dead-letter-routing-key": "e2e-dead"})
    c.send("/queue/e2e-work", "two")
    c.subscribe("/queue/e2e-work", id="w", ack="client-individual")
    one, two = rec.wait_messages(2)
    c.ack(one.headers["ack"], receipt="a")
    c.nack(two.headers["ack"], requeue="false", receipt="n")
    rec.wait_receipt("n")
    c.subscribe("/queue/e2e-dead", id="d")
    dead = rec.wait_messages(4)[2:]
    assert sorted(m.body for m in dead) == ["", "two"]
    c.unsubscribe("w")
    c.disconnect()


def test_nack_requeues_and_a_closed_connection_returns_unacked(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    c.send("/queue/e2e-requeue", "again")
    c.subscribe("/queue/e2e-requeue", id="s", ack="client")
    (m,) = rec.wait_messages(1)
    c.nack(m.headers["ack"])
    m2 = rec.wait_messages(2)[1]
    assert m2.body == "again" and m2.headers["redelivered"] == "true"
    c.disconnect()
    d, rec2 = connect(broker)
    d.subscribe("/queue/e2e-requeue", id="s")
    (m3,) = rec2.wait_messages(1)
    assert m3.headers["redelivered"] == "true"
    d.disconnect()


def test_amqp_to_stomp_and_back(broker: BrokerProcess) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare("e2e-from-stomp", durable=True)
    c, rec = connect(broker)
    c.subscribe("/queue/e2e-from-amqp", id="s", receipt="sub")
    rec.wait_receipt("sub")
    ch.basic_publish("", "e2e-from-amqp", b"hello stomp", pika.BasicProperties(
        content_type="text/plain", headers={"n": 7}, correlation_id="c1", delivery_mode=2))
    (m,) = rec.wait_messages(1)
    assert m.body == "hello stomp" and m.headers["n"] == "7"
    assert m.headers["correlation-id"] == "c1" and m.headers["persistent"] == "true"
    c.send("/queue/e2e-from-stomp", "hello amqp", content_type="text/plain",
           headers={"x-k": "v", "persistent": "true"}, receipt="s")
    rec.wait_receipt("s")
    _method, props, body = ch.basic_get("e2e-from-stomp", auto_ack=True)
    assert body == b"hello amqp" and props.headers == {"x-k": "v"}
    assert props.delivery_mode == 2 and props.content_type == "text/plain"
    c.disconnect()
    conn.close()


def test_hostile_input_closes_only_that_client(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    c.subscribe("/queue/e2e-hostile", id="s")
    frames, closed = _raw(broker, b"\x16\x03\x01garbage\xff\xfe\n\n\0")
    assert closed and frames and frames[0].startswith(b"ERROR\n")
    frames, closed = _raw(broker, b"CONNECT\n" + b"x-flood:" + b"a" * 200_000)
    assert closed and frames and frames[0].startswith(b"ERROR\n")
    # junk ended by a NUL, no LF: an ERROR and a close, not silence until the login timeout
    frames, closed = _raw(broker, b"junk\0")
    assert closed and frames and frames[0].startswith(b"ERROR\n"), frames
    assert b"inside its command line" in frames[0]
    frames, closed = _raw(broker, b"SEND\ndestination:/queue/e2e-hostile\n\nsneaky\0")
    assert closed and b"message:Illegal command" in frames[0]
    c.send("/queue/e2e-hostile", "still here")
    (m,) = rec.wait_messages(1)
    assert m.body == "still here"
    c.disconnect()


def test_connections_are_listed_with_their_protocol(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    name = f"127.0.0.1:{c.transport.socket.getsockname()[1]}"
    req = urllib.request.Request(f"{broker.admin_url}/api/connections", headers={
        "Authorization": "Basic " + b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=DEADLINE) as r:
        rows = json.load(r)
    (row,) = [row for row in rows if row["name"] == name]
    assert row["protocol"] == "STOMP 1.2" and row["user"] == "guest" and row["vhost"] == "/"
    req = urllib.request.Request(f"{broker.admin_url}/api/overview", headers=req.headers)
    with urllib.request.urlopen(req, timeout=DEADLINE) as r:
        listeners = json.load(r)["listeners"]
    assert {"protocol": "stomp", "port": stomp_port(broker)}.items() <= next(
        ln for ln in listeners if ln["protocol"] == "stomp").items()
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=DEADLINE) as r:
        metrics = r.read().decode()
    assert 'amqplite_stomp_connections{protocol="STOMP 1.2"}' in metrics
    req = urllib.request.Request(
        f"{broker.admin_url}/api/connections/{urllib.parse.quote(name, safe='')}",
        headers=req.headers, method="DELETE")
    with urllib.request.urlopen(req, timeout=DEADLINE) as r:
        assert r.status == 204
    (e,) = rec.wait(lambda: rec.errors or None, "the ERROR of a closed connection")
    assert e.headers["message"] == "Connection closed"
    rec.wait(lambda: rec.disconnected, "the close")


def test_kill_9_keeps_receipted_sends_and_redelivers_unacked(tmp_path: Path) -> None:
    port = free_port()
    b = BrokerProcess(tmp_path, None, "--stomp-port", str(port)).start()
    try:
        c, rec = connect(b)
        c.send("/queue/e2e-durable", "kept", headers={"persistent": "true"}, receipt="p")
        c.send("/queue/e2e-unacked", "in flight", headers={"persistent": "true"}, receipt="u")
        rec.wait_receipt("u")
        c.subscribe("/queue/e2e-unacked", id="u", ack="client")
        rec.wait_messages(1)  # delivered, never acked
        rec.wait_receipt("p")
        b.kill()
        b.start()
        d, rec2 = connect(b)
        d.subscribe("/queue/e2e-durable", id="s")
        d.subscribe("/queue/e2e-unacked", id="u")
        got = {m.headers["subscription"]: m for m in rec2.wait_messages(2)}
        assert got["s"].body == "kept" and got["s"].headers["persistent"] == "true"
        assert got["u"].body == "in flight"
        assert b.stop() == 0  # a clean shutdown with a STOMP client connected
        (e,) = rec2.wait(lambda: rec2.errors or None, "the shutdown's ERROR")
        assert "shutdown" in e.body.lower()
        assert "Traceback" not in b.log()
    finally:
        b.stop()


def test_an_ack_alone_still_reaches_the_store_and_is_not_redelivered(tmp_path: Path) -> None:
    """An ACK with no receipt keeps the store batch open a moment, to ride the
    next commit someone waits for; with no other traffic at all its delete
    still reaches the database, and after a kill -9 the message stays gone."""
    b = BrokerProcess(tmp_path, None, "--stomp-port", str(free_port())).start()
    db = b.data_dir / "amqplite.db"

    def entries() -> int:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
            return int(conn.execute("select count(*) from queue_entries").fetchone()[0])

    try:
        c, rec = connect(b)
        c.send("/queue/e2e-acked", "done", headers={"persistent": "true"}, receipt="p")
        rec.wait_receipt("p")
        assert entries() == 1  # the RECEIPT came after the commit
        c.subscribe("/queue/e2e-acked", id="a", ack="client-individual")
        (m,) = rec.wait_messages(1)
        c.ack(m.headers["ack"])
        wait_for(lambda: entries() == 0, DEADLINE, what="the ACK's delete in the store")
        b.kill()
        b.start()
        d, rec2 = connect(b)
        d.send("/queue/e2e-acked", "after", headers={"persistent": "true"}, receipt="q")
        rec2.wait_receipt("q")
        d.subscribe("/queue/e2e-acked", id="a", ack="client-individual")
        (first,) = rec2.wait_messages(1)
        assert first.body == "after"  # an acked message redelivered would come first
        d.disconnect()
    finally:
        b.stop()


def test_stomp_clients_count_against_max_connections(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path, None, "--stomp-port", str(free_port()),
                      "--max-connections", "1").start()
    try:
        c, _ = connect(b)
        frames, closed = _raw(b, b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n"
                                 b"\n\0")
        assert closed and b"node connection limit (1) is reached" in frames[0]
        c.disconnect()
    finally:
        b.stop()


def test_heart_beats_both_ways(broker: BrokerProcess) -> None:
    c, rec = connect(broker, heartbeats=(1000, 1000))
    rec.wait(lambda: rec.heartbeats >= 2, "two heart-beats from the server")
    assert c.is_connected()  # ours reached it: the connection stays
    c.disconnect()
    frames, closed = _raw(broker, b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:guest\n"
                                  b"heart-beat:1000,0\n\n\0")  # then silence
    assert closed and b"heart-beat:0,1000" in frames[0]


@pytest.mark.parametrize("binary", [False, True])
def test_web_stomp_on_the_admin_port(broker: BrokerProcess, binary: bool) -> None:
    """stomp.py over a WebSocket at /ws, text frames (as stompjs sends them) or binary."""
    c = stomp.WSStompConnection([("127.0.0.1", broker.admin_port)], ws_path="/ws",
                                vhost="/", header=["Sec-WebSocket-Protocol: v12.stomp"],
                                binary_mode=binary, reconnect_attempts_max=1)
    rec = Recorder()
    c.set_listener("rec", rec)
    c.connect("guest", "guest", wait=True)
    queue = f"/queue/e2e-ws-{binary}"
    c.subscribe(queue, id="s")
    c.send(queue, "über websockets", headers={"persistent": "true"}, receipt="r")
    rec.wait_receipt("r")
    (m,) = rec.wait_messages(1)
    assert m.body == "über websockets" and m.headers["destination"] == queue
    c.disconnect()


def test_stream_subscription_from_an_offset(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    for i in range(3):
        c.send("/queue/e2e-stream", f"m{i}", headers={"x-queue-type": "stream",
                                                    "persistent": "true"}, receipt=f"r{i}")
    rec.wait_receipt("r2")
    c.subscribe("/queue/e2e-stream", id="s", ack="client-individual",
                headers={"prefetch-count": "10", "x-stream-offset": "offset=1"})
    ms = rec.wait_messages(2)
    assert [(m.body, m.headers["x-stream-offset"]) for m in ms] == [("m1", "1"), ("m2", "2")]
    for m in ms:
        c.ack(m.headers["ack"])
    c.send("/queue/e2e-stream", "m3", headers={"x-queue-type": "stream"})
    assert rec.wait_messages(3)[2].headers["x-stream-offset"] == "3"
    c.disconnect()


def test_the_delivery_log_names_stomp(broker: BrokerProcess) -> None:
    c, rec = connect(broker)
    c.send("/queue/e2e-logged", "x", headers={"persistent": "true"})
    c.subscribe("/queue/e2e-logged", id="s", ack="client-individual")
    (m,) = rec.wait_messages(1)
    c.ack(m.headers["ack"], receipt="a")
    rec.wait_receipt("a")  # the ack is stored, its log row with it
    c.disconnect()
    with sqlite3.connect(broker.data_dir / "amqplite.db") as db:
        rows = db.execute("SELECT event, protocol FROM delivery_log WHERE queue = ?",
                          ("e2e-logged",)).fetchall()
    assert ("acked", "stomp-1.2") in rows, rows


def test_selectors_filter_topic_and_queue_subscriptions(
        broker: BrokerProcess) -> None:
    red, rrec = connect(broker)
    heavy, hrec = connect(broker)
    red.subscribe("/topic/sel.t", id="red", headers={"selector": "color = 'red'"},
                  receipt="red-ready")
    heavy.subscribe("/topic/sel.t", id="heavy",
                    headers={"selector": "convert_string_expressions:weight > 10"},
                    receipt="heavy-ready")
    rrec.wait_receipt("red-ready")
    hrec.wait_receipt("heavy-ready")
    pub, prec = connect(broker)
    sent = [("red light", {"color": "red", "weight": "2"}),
            ("blue heavy", {"color": "blue", "weight": "20"}),
            ("plain", {}),
            ("green light", {"color": "green", "weight": "5"}),
            ("red heavy", {"color": "red", "weight": "11"}),
            ("last", {"color": "red", "weight": "99"})]  # both match: nothing else after it
    for body, headers in sent:
        pub.send("/topic/sel.t", body, headers=headers)
    pub.send("/topic/sel.t", "unmatched", receipt="sent")
    prec.wait_receipt("sent")
    assert [m.body for m in rrec.wait_messages(3)] == ["red light", "red heavy", "last"]
    assert [m.body for m in hrec.wait_messages(3)] == ["blue heavy", "red heavy", "last"]
    # a shared queue: the red subscriber gets the red ones, in order; the rest stay
    # in the queue (parked) for the plain subscriber that comes later
    for body, headers in sent:
        pub.send("/queue/sel-q", body, headers={**headers, "persistent": "true"})
    pub.send("/queue/sel-q", "unmatched", receipt="queued")
    prec.wait_receipt("queued")
    q, qrec = connect(broker)
    q.subscribe("/queue/sel-q", id="q", ack="client-individual",
                headers={"selector": "color = 'red'"})
    assert [m.body for m in qrec.wait_messages(3)] == ["red light", "red heavy", "last"]
    plain, plrec = connect(broker)
    plain.subscribe("/queue/sel-q", id="p")
    assert [m.body for m in plrec.wait_messages(4)] == ["blue heavy", "plain", "green light",
                                                        "unmatched"]
    for m in qrec.messages:
        q.ack(m.headers["ack"])
    q.disconnect()
    plain.disconnect()
    bad, brec = connect(broker)
    bad.subscribe("/topic/sel.t", id="b", headers={"selector": "color = "})
    (e,) = brec.wait(lambda: brec.errors or None, "an ERROR")
    assert e.headers["message"] == "Invalid selector" and e.body.startswith("selector: ")
    for c in (red, heavy, pub):
        c.disconnect()
    assert len(rrec.messages) == 3 and len(hrec.messages) == 3
