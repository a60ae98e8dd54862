"""STOMP as RabbitMQ 3.10.8's rabbitmq_stomp serves it, where a client can see it:
the handshake, destinations, MESSAGE headers, acks, receipts, transactions,
header mapping, the ERROR texts (docs/dev/stomp-reference.md) and which ERRORs
close the connection."""

from __future__ import annotations

import re

from conformance.stomp._raw import RawStomp
from conformance.stomp.conftest import Factory, login_headers, needs_stomp

pytestmark = needs_stomp
MESSAGE_ID = re.compile(r"^T_(?P<sub>.+)@@session-[A-Za-z0-9_-]+@@(?P<tag>\d+)$")


def _sync(c: RawStomp, rid: str) -> None:
    """A RECEIPT round trip: everything the broker sent before it has arrived."""
    c.send("SEND", {"destination": "/queue/conf-stomp-sync", "receipt": rid}, b"")
    c.expect("RECEIPT")


def test_connected_headers_and_heart_beat_negotiation(stomp: Factory) -> None:
    c = stomp(connect=False)
    c.send("CONNECT", {**login_headers("1.0,1.1,1.2"), "heart-beat": "10000,5000"})
    f = c.expect("CONNECTED")
    assert f.headers["version"] == "1.2"
    assert f.headers["heart-beat"] == "5000,10000"
    assert f.headers["session"].startswith("session-")
    assert [k for k, _ in f.header_list][-3:] == ["session", "heart-beat", "version"]


def test_version_mismatch(stomp: Factory) -> None:
    c = stomp(connect=False)
    c.send("CONNECT", {**login_headers("2.0")})
    f = c.expect("ERROR")
    assert f.headers["message"] == "Version mismatch"
    assert f.body == b"Supported versions are 1.0,1.1,1.2\n"


def test_bad_password_is_refused(stomp: Factory) -> None:
    c = stomp(connect=False)
    c.send("CONNECT", {**login_headers(), "passcode": "wrong"})
    f = c.expect("ERROR")
    assert f.headers["message"] == "Bad CONNECT"
    assert f.body == b"Access refused for user 'guest'\n"


def test_frame_before_connect(stomp: Factory) -> None:
    c = stomp(connect=False)
    c.send("SEND", {"destination": "/queue/x"}, b"early")
    f = c.expect("ERROR")
    assert (f.headers["message"], f.body) == ("Illegal command",
                                              b"You must log in using CONNECT first")


def test_queue_message_headers(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SEND", {"destination": f"/queue/{name}", "content-type": "text/plain",
                    "x-custom": "a\\cb", "correlation-id": "c1", "reply-to": "foo",
                    "persistent": "true"}, b"hello")
    c.send("SUBSCRIBE", {"id": "sub-1", "destination": f"/queue/{name}",
                         "ack": "client-individual"})
    m = c.expect("MESSAGE")
    keys = [k for k, _ in m.header_list]
    assert keys[:5] == ["subscription", "destination", "message-id", "redelivered", "ack"]
    h = m.headers
    assert h["subscription"] == "sub-1" and h["destination"] == f"/queue/{name}"
    match = MESSAGE_ID.match(h["message-id"])
    assert match is not None and match["sub"] == "sub-1", h["message-id"]
    assert h["ack"] == h["message-id"] and h["redelivered"] == "false"
    assert h["x-custom"] == "a:b" and h["correlation-id"] == "c1"
    assert h["reply-to"] == "/reply-queue/foo" and h["persistent"] == "true"
    assert h["content-type"] == "text/plain" and h["content-length"] == "5"
    assert m.body == b"hello"
    c.send("ACK", {"id": h["ack"]})


def test_topic_fan_out_and_destination(stomp: Factory, name: str) -> None:
    a, b = stomp(), stomp()
    a.send("SUBSCRIBE", {"id": "t", "destination": f"/topic/{name}.*", "receipt": "s"})
    a.expect("RECEIPT")
    b.send("SUBSCRIBE", {"id": "t", "destination": f"/topic/{name}.x", "receipt": "s"})
    b.expect("RECEIPT")
    a.send("SEND", {"destination": f"/topic/{name}.x"}, b"fan")
    for c in (a, b):
        m = c.expect("MESSAGE")
        assert m.body == b"fan" and m.headers["destination"] == f"/topic/{name}.x"


def test_exchange_destination_is_rebuilt(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SUBSCRIBE", {"id": "x", "destination": f"/exchange/amq.direct/{name}",
                         "receipt": "s"})
    c.expect("RECEIPT")
    c.send("SEND", {"destination": f"/exchange/amq.direct/{name}"}, b"direct")
    m = c.expect("MESSAGE")
    assert m.headers["destination"] == f"/exchange/amq.direct/{name}"


def test_nack_requeues_with_redelivered(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SEND", {"destination": f"/queue/{name}"}, b"again")
    c.send("SUBSCRIBE", {"id": "s", "destination": f"/queue/{name}",
                         "ack": "client-individual"})
    m = c.expect("MESSAGE")
    c.send("NACK", {"id": m.headers["ack"]})
    m2 = c.expect("MESSAGE")
    assert m2.body == b"again" and m2.headers["redelivered"] == "true"
    c.send("ACK", {"id": m2.headers["ack"]})


def test_receipt_for_a_persistent_send(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SEND", {"destination": f"/queue/{name}", "persistent": "true", "receipt": "r-1"},
           b"kept")
    r = c.expect("RECEIPT")
    assert r.headers["receipt-id"] == "r-1"


def test_transaction_delivers_on_commit_only(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SUBSCRIBE", {"id": "s", "destination": f"/queue/{name}", "receipt": "s"})
    c.expect("RECEIPT")
    c.send("BEGIN", {"transaction": "t1"})
    c.send("SEND", {"destination": f"/queue/{name}", "transaction": "t1"}, b"in tx")
    c.send("ABORT", {"transaction": "t1"})
    c.send("BEGIN", {"transaction": "t2"})
    c.send("SEND", {"destination": f"/queue/{name}", "transaction": "t2"}, b"committed")
    c.send("COMMIT", {"transaction": "t2", "receipt": "c"})
    frames = [c.frame(), c.frame()]
    assert sorted(f.command for f in frames) == ["MESSAGE", "RECEIPT"]
    assert next(f for f in frames if f.command == "MESSAGE").body == b"committed"


def test_temp_queue_reply(stomp: Factory, name: str) -> None:
    client, server = stomp(), stomp()
    server.send("SUBSCRIBE", {"id": "rpc", "destination": f"/queue/{name}", "receipt": "s"})
    server.expect("RECEIPT")
    client.send("SEND", {"destination": f"/queue/{name}", "reply-to": "/temp-queue/r"},
                b"ping")
    req = server.expect("MESSAGE")
    reply_to = req.headers["reply-to"]
    assert reply_to.startswith("/reply-queue/amq.gen-")
    server.send("SEND", {"destination": reply_to}, b"pong")
    rep = client.expect("MESSAGE")
    assert rep.body == b"pong" and rep.headers["subscription"] == "/temp-queue/r"


def test_destination_errors(stomp: Factory) -> None:
    for dest, message, body in (
            ("/foo/bar", "Unknown destination",
             b"'/foo/bar' is not a valid destination.\nValid destination types are: "
             b"/temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n"),
            ("/queue/a/b", "Invalid destination", b"'/a/b' is not a valid queue destination\n"),
            ("/temp-queue/x", "Invalid destination",
             b"'/temp-queue/x' is not a valid destination for 'SEND'\n")):
        c = stomp()
        c.send("SEND", {"destination": dest}, b"")
        f = c.expect("ERROR")
        assert (f.headers["message"], f.body) == (message, body), dest


def test_frame_errors(stomp: Factory) -> None:
    for command, headers, message in (
            ("SEND", {}, "Missing destination"),
            ("SEND", {"destination": "/queue/x", "message-id": "m"}, "Invalid header"),
            ("COMMIT", {"transaction": "nope"}, "Bad transaction"),
            ("UNSUBSCRIBE", {"id": "zz"}, "No subscription found"),
            ("FOO", {}, "Bad command")):
        c = stomp()
        c.send(command, headers, b"")
        f = c.expect("ERROR")
        assert f.headers["message"] == message, (command, f)


def test_duplicate_subscription_id(stomp: Factory, name: str) -> None:
    c = stomp()
    c.send("SUBSCRIBE", {"id": "dup", "destination": f"/queue/{name}"})
    c.send("SUBSCRIBE", {"id": "dup", "destination": f"/queue/{name}"})
    f = c.expect("ERROR")
    assert f.headers["message"] == "Duplicated subscription identifier"
    assert f.body == b"A subscription identified by 'T_dup' already exists."


def test_amqp_headers_reach_stomp(stomp: Factory, name: str) -> None:
    """An /exchange/ publish keeps its routing key in the destination, and custom
    headers travel both ways through AMQP's headers table."""
    c = stomp()
    c.send("SUBSCRIBE", {"id": "h", "destination": f"/exchange/amq.topic/{name}.#",
                         "receipt": "s"})
    c.expect("RECEIPT")
    c.send("SEND", {"destination": f"/exchange/amq.topic/{name}.a", "x-n": "7",
                    "amqp-message-id": "m-1", "priority": "3"}, b"")
    m = c.expect("MESSAGE")
    assert m.headers["destination"] == f"/topic/{name}.a"
    assert (m.headers["x-n"], m.headers["amqp-message-id"], m.headers["priority"]) == (
        "7", "m-1", "3")
    _sync(c, "end")


def _closes(c: RawStomp) -> bool:
    """Nothing more comes and the broker closes the socket."""
    try:
        f = c.frame(5)
    except AssertionError:
        return c.closed
    raise AssertionError(f"a frame after the ERROR: {f}")


def test_a_refused_frame_leaves_the_connection_open(stomp: Factory, name: str) -> None:
    """RabbitMQ answers a frame its STOMP rules refuse with ERROR and goes on."""
    for command, headers, message in (
            ("SEND", {"destination": "/foo/bar"}, "Unknown destination"),
            ("SEND", {}, "Missing destination"),
            ("SEND", {"destination": f"/queue/{name}", "message-id": "m"}, "Invalid header"),
            ("COMMIT", {"transaction": "nope"}, "Bad transaction"),
            ("ACK", {"id": "T_zz@@session-x@@1"}, "Subscription not found"),
            ("UNSUBSCRIBE", {"id": "zz"}, "No subscription found"),
            ("BEGIN", {}, "Missing transaction"),
            ("FOO", {}, "Bad command")):
        c = stomp()
        c.send(command, headers, b"")
        assert c.expect("ERROR").headers["message"] == message, command
        _sync(c, f"after-{command}")  # still served


def test_a_broker_refusal_closes_the_connection(stomp: Factory, name: str) -> None:
    """An AMQP-level refusal (the queue is missing) and a duplicated subscription id
    close it, in RabbitMQ as in the STOMP specification."""
    c = stomp()
    c.send("SUBSCRIBE", {"id": "s", "destination": f"/amq/queue/{name}-missing"})
    assert c.expect("ERROR").headers["message"] == "not_found"
    assert _closes(c)
    c = stomp()
    c.send("SUBSCRIBE", {"id": "dup", "destination": f"/queue/{name}"})
    c.send("SUBSCRIBE", {"id": "dup", "destination": f"/queue/{name}"})
    assert c.expect("ERROR").headers["message"] == "Duplicated subscription identifier"
    assert _closes(c)
