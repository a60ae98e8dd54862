"""StompConnection: handshake, heart-beats, per-command validation with RabbitMQ's texts, timers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from amqplite.protocol.stomp import events as evt
from amqplite.protocol.stomp.connection import (
    ServerLimits,
    State,
    StompConnection,
    negotiate_heart_beat,
    negotiate_version,
)
from amqplite.protocol.stomp.destinations import Destination, Kind
from amqplite.protocol.stomp.errors import FrameError, access_refused
from amqplite.protocol.stomp.frames import V10, V11, V12, Frame, FrameParser, ParserLimits, serialize

CONNECT = b"CONNECT\naccept-version:1.0,1.1,1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00"


def frame(
    command: str, headers: dict[str, str] | None = None, body: bytes = b"", version: str = V12
) -> bytes:
    return serialize(command, headers or {}, body, version, trailing_lf=False)


def events(conn: StompConnection, data: bytes = b"", now: float = 0.0) -> list[evt.StompEvent]:
    if data:
        conn.receive_data(data, now)
    return list(conn.events())


def output(conn: StompConnection) -> list[Frame]:
    """What the connection wrote, parsed back as a client would (CONNECTED/ERROR unescaped alike)."""
    parser = FrameParser(ParserLimits(), conn.version)
    frames = parser.feed(conn.data_to_send(0.0))
    assert not parser.in_frame
    return frames


def connected(version: str = V12, heart_beat: str | None = None, now: float = 0.0) -> StompConnection:
    conn = StompConnection(now=now)
    extra = f"heart-beat:{heart_beat}\n".encode() if heart_beat else b""
    data = CONNECT.replace(b"1.0,1.1,1.2", version.encode()).replace(b"\n\n\x00", b"\n" + extra + b"\n\x00")
    [ev] = events(conn, data, now)
    assert isinstance(ev, evt.ConnectRequested)
    conn.accept("session-1", now, server="amqplite/test")
    [ok] = output(conn)
    assert ok.command == "CONNECTED"
    return conn


def error_of(conn: StompConnection) -> Frame:
    frames = output(conn)
    assert frames[-1].command == "ERROR"
    assert conn.closed
    return frames[-1]


# ------------------------------------------------------------------ handshake


def test_connect_asks_the_shell_then_connected_as_rabbitmq_shapes_it() -> None:
    conn = StompConnection()
    [ev] = events(conn, CONNECT.replace(b"\n\n\x00", b"\nheart-beat:10000,5000\n\n\x00"))
    assert ev == evt.ConnectRequested(
        V12, "/", "guest", "guest", (10000, 5000),
        {"accept-version": "1.0,1.1,1.2", "host": "/", "login": "guest", "passcode": "guest",
         "heart-beat": "10000,5000"},
    )
    assert conn.state is State.CONNECTING
    conn.accept("session-abc", 0.0, server="amqplite/1.0")
    # RabbitMQ 3.10.8: server, session, heart-beat (cy, cx as whole seconds), version; an EOL after NUL
    assert conn.data_to_send(0.0) == (
        b"CONNECTED\nserver:amqplite/1.0\nsession:session-abc\nheart-beat:5000,10000\nversion:1.2\n\n\x00\n"
    )
    assert conn.state is State.CONNECTED


def test_stomp_command_connects_and_absent_fields_are_none() -> None:
    conn = StompConnection()
    [ev] = events(conn, b"STOMP\naccept-version:1.1\n\n\x00")
    assert isinstance(ev, evt.ConnectRequested)
    assert (ev.command, ev.version, ev.host, ev.login, ev.passcode, ev.heart_beat) == (
        "STOMP", V11, None, None, None, (0, 0)
    )
    conn.accept("s", 0.0)  # server=None hides it (RabbitMQ's hide_server_info)
    assert output(conn)[0].headers == {"session": "s", "heart-beat": "0,0", "version": "1.1"}


@pytest.mark.parametrize(
    ("header", "version"),
    [(None, V10), ("1.0", V10), ("1.1,1.0", V11), ("1.0,1.1,1.2", V12), ("1.2,1.0", V12),
     ("1.0, 1.1", V11), ("1.1,2.0", V11), ("2.0", None), ("", None)],
)
def test_version_negotiation_picks_the_highest_common(header: str | None, version: str | None) -> None:
    assert negotiate_version(header) == version


def test_version_mismatch_error() -> None:
    conn = StompConnection()
    [ev] = events(conn, b"CONNECT\naccept-version:2.0\n\n\x00")
    assert ev == evt.ProtocolError("Version mismatch", "Supported versions are 1.0,1.1,1.2\n")
    err = error_of(conn)
    assert err.headers == {"message": "Version mismatch", "content-type": "text/plain",
                           "version": "1.0,1.1,1.2", "content-length": "35"}
    assert err.body == b"Supported versions are 1.0,1.1,1.2\n"


@pytest.mark.parametrize(
    ("cx_cy", "answer"),
    # as RabbitMQ 3.10.8 answered: (cy, cx) rounded down to whole seconds, at least 1 s when asked
    [((10000, 5000), (5000, 10000)), ((500, 1500), (1000, 1000)), ((0, 0), (0, 0)),
     ((0, 2500), (2000, 0)), ((1, 0), (0, 1000))],
)
def test_heart_beat_negotiation(cx_cy: tuple[int, int], answer: tuple[int, int]) -> None:
    assert negotiate_heart_beat(*cx_cy) == answer


@pytest.mark.parametrize("value", ["abc", "100", "1,2,3", "-1,0", " , "])
def test_malformed_heart_beat_is_a_bad_connect(value: str) -> None:
    conn = StompConnection()
    [ev] = events(conn, CONNECT.replace(b"\n\n\x00", f"\nheart-beat:{value}\n\n\x00".encode()))
    assert isinstance(ev, evt.ProtocolError)
    assert ev.message == "Bad CONNECT"
    assert error_of(conn).headers["message"] == "Bad CONNECT"


def test_reject_sends_error_and_closes() -> None:
    conn = StompConnection()
    events(conn, CONNECT)
    conn.reject(access_refused("guest"))
    err = error_of(conn)
    assert err.headers["message"] == "Bad CONNECT"
    assert err.body == b"Access refused for user 'guest'\n"
    assert events(conn, frame("SEND", {"destination": "/queue/a"})) == []


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE", "FOO", "DISCONNECT"])
def test_frames_before_connect_are_refused(command: str) -> None:
    conn = StompConnection()
    [ev] = events(conn, frame(command, {"destination": "/queue/a"}))
    assert ev == evt.ProtocolError("Illegal command", "You must log in using CONNECT first")
    assert error_of(conn).body == b"You must log in using CONNECT first"


def test_pipelined_frames_wait_for_accept_and_use_the_negotiated_escaping() -> None:
    conn = StompConnection()
    data = CONNECT + frame("SEND", {"destination": "/queue/a", "k": "a:b\nc"}, b"x")
    [ev] = events(conn, data)
    assert isinstance(ev, evt.ConnectRequested)
    assert events(conn) == []
    conn.accept("s", 0.0)
    [send] = events(conn)
    assert isinstance(send, evt.SendReceived)
    assert send.headers["k"] == "a:b\nc"


def test_smaller_frame_limit_until_login() -> None:
    limits = ServerLimits(max_frame_size_unauthenticated=200, parser=ParserLimits(max_frame_size=10_000))
    conn = StompConnection(limits)
    [ev] = events(conn, CONNECT.replace(b"\n\n\x00", b"\nx:" + b"y" * 300 + b"\n\n\x00"))
    assert ev == evt.ProtocolError("Frame too large", "frame larger than 200 bytes")
    conn = StompConnection(limits)
    events(conn, CONNECT)
    # bytes pipelined behind the CONNECT count against the same limit
    [ev] = events(conn, b"SEND\n\n" + b"z" * 300)
    assert isinstance(ev, evt.ProtocolError)
    assert ev.message == "Frame too large"
    conn = StompConnection(limits)
    events(conn, CONNECT)
    conn.accept("s", 0.0)
    [send] = events(conn, frame("SEND", {"destination": "/queue/a"}, b"z" * 5000))
    assert isinstance(send, evt.SendReceived)
    assert len(send.body) == 5000


def test_second_connect_is_refused() -> None:
    conn = connected()
    [ev] = events(conn, CONNECT)
    assert ev == evt.ProtocolError("Illegal command", "Already connected")


# ------------------------------------------------------------------ events per command


def test_send_event() -> None:
    conn = connected()
    data = frame("SEND", {"destination": "/topic/a.b", "receipt": "r1", "transaction": "tx",
                          "persistent": "true"}, b"\x00hi")
    [ev] = events(conn, data)
    assert ev == evt.SendReceived(
        Destination(Kind.TOPIC, "a.b"),
        {"destination": "/topic/a.b", "receipt": "r1", "transaction": "tx", "persistent": "true",
         "content-length": "3"},
        b"\x00hi", "tx", "r1",
    )


@pytest.mark.parametrize(("raw", "mode"), [(None, evt.AckMode.AUTO), ("auto", evt.AckMode.AUTO),
                                           ("client", evt.AckMode.CLIENT),
                                           ("client-individual", evt.AckMode.CLIENT_INDIVIDUAL)])
def test_subscribe_event(raw: str | None, mode: evt.AckMode) -> None:
    conn = connected()
    headers = {"destination": "/queue/q", "id": "7", "prefetch-count": "10"}
    if raw:
        headers["ack"] = raw
    [ev] = events(conn, frame("SUBSCRIBE", headers))
    assert ev == evt.SubscribeReceived("7", Destination(Kind.QUEUE, "q"), mode, headers)


def test_subscribe_without_id_is_accepted_only_in_1_0() -> None:
    conn = connected(V10)
    [ev] = events(conn, frame("SUBSCRIBE", {"destination": "/queue/q"}, version=V10))
    assert isinstance(ev, evt.SubscribeReceived)
    assert ev.subscription_id is None
    conn = connected(V11)
    assert events(conn, frame("SUBSCRIBE", {"destination": "/queue/q"}, version=V11)) == []
    (err,) = output(conn)
    assert (err.command, err.headers["message"], err.body) == (
        "ERROR", "Missing header", b'"SUBSCRIBE" must include the "id" header\n')
    assert not conn.closed  # a refused frame: RabbitMQ goes on too


def test_unsubscribe_event() -> None:
    conn = connected()
    [ev] = events(conn, frame("UNSUBSCRIBE", {"id": "7", "receipt": "r"}))
    assert ev == evt.UnsubscribeReceived("7", None, {"id": "7", "receipt": "r"}, "r")
    conn = connected(V10)
    [ev] = events(conn, frame("UNSUBSCRIBE", {"destination": "/queue/q"}, version=V10))
    assert ev == evt.UnsubscribeReceived(None, "/queue/q", {"destination": "/queue/q"})


def test_ack_and_nack_by_version() -> None:
    conn = connected(V12)
    data = frame("ACK", {"id": "m1", "transaction": "t"}) + frame("NACK", {"id": "m2", "requeue": "false"})
    assert events(conn, data) == [
        evt.AckReceived("m1", None, "t"), evt.NackReceived("m2", None, requeue=False)
    ]
    for version in (V10, V11):
        conn = connected(version)
        data = frame("ACK", {"message-id": "m1", "subscription": "s"}, version=version) + frame(
            "NACK", {"message-id": "m2", "receipt": "r", "requeue": "True"}, version=version
        )
        assert events(conn, data) == [
            evt.AckReceived("m1", "s"), evt.NackReceived("m2", None, receipt="r", requeue=True)
        ]


def test_transactions_and_disconnect() -> None:
    conn = connected()
    data = (frame("BEGIN", {"transaction": "t"}) + frame("COMMIT", {"transaction": "t", "receipt": "c"})
            + frame("ABORT", {"transaction": "u"}) + frame("DISCONNECT", {"receipt": "bye"})
            + frame("SEND", {"destination": "/queue/ignored"}))
    assert events(conn, data) == [
        evt.BeginReceived("t"), evt.CommitReceived("t", "c"), evt.AbortReceived("u"),
        evt.DisconnectReceived("bye"),
    ]
    assert conn.state is State.DISCONNECTING
    conn.send_receipt("bye")
    assert output(conn) == [Frame("RECEIPT", {"receipt-id": "bye"})]
    conn.close()
    assert conn.closed


def test_1_0_header_values_lose_leading_whitespace_like_rabbitmq() -> None:
    conn = connected(V10)
    [ev] = events(conn, b"SEND\ndestination: /queue/a\nreceipt:  r\n\n\x00")
    assert isinstance(ev, evt.SendReceived)
    assert ev.destination == Destination(Kind.QUEUE, "a")
    assert ev.receipt == "r"


# ------------------------------------------------------------ validation errors (RabbitMQ 3.10.8's texts)


@pytest.mark.parametrize(
    ("version", "command", "headers", "message", "detail"),
    [
        (V12, "SEND", {}, "Missing destination", "\"SEND\" must include a 'destination' header\n"),
        (V12, "SEND", {"destination": "/queue/a", "message-id": "5"}, "Invalid header",
         "'message-id' is not allowed on 'SEND'.\n"),
        (V12, "SEND", {"destination": "/foo/bar"}, "Unknown destination",
         "'/foo/bar' is not a valid destination.\nValid destination types are: /temp-queue, /exchange, "
         "/topic, /queue, /amq/queue, /reply-queue/.\n"),
        (V12, "SEND", {"destination": "/queue/a/b"}, "Invalid destination",
         "'/a/b' is not a valid queue destination\n"),
        (V12, "SEND", {"destination": "/temp-queue/x"}, "Invalid destination",
         "'/temp-queue/x' is not a valid destination for 'SEND'\n"),
        (V12, "SUBSCRIBE", {"id": "s1"}, "Missing destination",
         "\"SUBSCRIBE\" must include a 'destination' header\n"),
        (V12, "SUBSCRIBE", {"destination": "/temp-queue/x", "id": "s1"}, "Invalid destination",
         "'/temp-queue/x' is not a valid destination for 'SUBSCRIBE'\n"),
        (V12, "SUBSCRIBE", {"destination": "/topic/t", "durable": "true"}, "Missing Header",
         "Header 'id' is required for durable subscriptions"),
        (V10, "SUBSCRIBE", {"destination": "/topic/t", "persistent": "true"}, "Missing Header",
         "Header 'id' is required for durable subscriptions"),
        (V12, "SUBSCRIBE", {"destination": "/queue/q", "id": "s", "ack": "bogus"}, "Invalid header",
         "'bogus' is not a valid ack mode: auto, client or client-individual\n"),
        (V12, "SUBSCRIBE", {"destination": "/queue/q", "id": "/temp-queue/x"}, "Invalid id",
         "SUBSCRIBE 'id' may not start with /temp-queue/\n"),
        (V12, "UNSUBSCRIBE", {}, "Missing destination or id",
         "UNSUBSCRIBE must include a 'destination' or 'id' header"),
        (V12, "UNSUBSCRIBE", {"id": "/temp-queue/x"}, "Invalid id",
         "UNSUBSCRIBE 'id' may not start with /temp-queue/\n"),
        (V12, "ACK", {"message-id": "m"}, "Missing header", '"ACK" must include the "id" header\n'),
        (V12, "NACK", {}, "Missing header", '"NACK" must include the "id" header\n'),
        (V11, "ACK", {"id": "m"}, "Missing header", '"ACK" must include the "message-id" header\n'),
        (V10, "NACK", {}, "Missing header", '"NACK" must include the "message-id" header\n'),
        (V12, "BEGIN", {}, "Missing transaction", "\"BEGIN\" must include a 'transaction' header\n"),
        (V12, "COMMIT", {}, "Missing transaction", "\"COMMIT\" must include a 'transaction' header\n"),
        (V12, "ABORT", {}, "Missing transaction", "\"ABORT\" must include a 'transaction' header\n"),
        (V12, "FOO", {}, "Bad command", 'Could not interpret command "FOO"\n'),
        (V12, "MESSAGE", {}, "Bad command", 'Could not interpret command "MESSAGE"\n'),
    ],
)
def test_invalid_frames_get_rabbitmq_error_texts(
    version: str, command: str, headers: dict[str, str], message: str, detail: str
) -> None:
    """...and the connection goes on, as in RabbitMQ: the refused frame makes no
    event, the next one does."""
    conn = connected(version)
    evs = events(conn, frame(command, {**headers, "receipt": "r9"}, version=version)
                 + frame("BEGIN", {"transaction": "t"}, version=version))
    assert [type(e) for e in evs] == [evt.BeginReceived]
    (err,) = output(conn)
    assert err.command == "ERROR" and not conn.closed
    assert err.headers["message"] == message
    assert err.headers["receipt-id"] == "r9"  # the spec's SHOULD; RabbitMQ leaves it out
    assert err.body == detail.encode()


def test_junk_ended_by_a_nul_before_connect_is_an_error_and_close() -> None:
    """No LF follows the NUL: the frame ended inside its command line. An ERROR at once,
    not silence until the login timeout."""
    conn = StompConnection()
    [ev] = events(conn, b"\x16\x03junk\x00")
    assert isinstance(ev, evt.ProtocolError) and ev.message == "Malformed frame"
    assert b"inside its command line" in error_of(conn).body


def test_malformed_frame_after_connect_is_an_error_and_close() -> None:
    conn = connected()
    [ev] = events(conn, b"SEND\nx:a\\tb\n\n\x00")
    assert isinstance(ev, evt.ProtocolError)
    assert ev.message == "Malformed frame"
    assert error_of(conn).headers["message"] == "Malformed frame"


# ------------------------------------------------------------------ outbound frames


def test_send_message_header_order_and_ack_only_in_1_2() -> None:
    conn = connected(V12)
    conn.send_message(destination="/queue/q", message_id="T_s@@session-1@@1", subscription="s",
                      ack="T_s@@session-1@@1", headers={"x-custom": "a:b\nc", "destination": "no"},
                      body=b"hello")
    # RabbitMQ 3.10.8: subscription, destination, message-id, redelivered, ack, properties
    assert conn.data_to_send(0.0) == (
        b"MESSAGE\nsubscription:s\ndestination:/queue/q\nmessage-id:T_s@@session-1@@1\n"
        b"redelivered:false\nack:T_s@@session-1@@1\nx-custom:a\\cb\\nc\ncontent-length:5\n\nhello\x00\n"
    )
    conn = connected(V11)
    conn.send_message(destination="/queue/q", message_id="m", subscription="s", ack="m", redelivered=True)
    [msg] = output(conn)
    assert msg.headers == {"subscription": "s", "destination": "/queue/q", "message-id": "m",
                           "redelivered": "true", "content-length": "0"}


def test_send_error_without_close_for_notices() -> None:
    conn = connected()
    conn.send_error("Server cancelled subscription", "gone\n", headers={"subscription": "s"}, close=False)
    [err] = output(conn)
    assert err.headers["subscription"] == "s"
    assert not conn.closed


def test_accept_and_reject_only_while_connecting() -> None:
    conn = StompConnection()
    with pytest.raises(RuntimeError):
        conn.accept("s", 0.0)
    with pytest.raises(RuntimeError):
        conn.reject(FrameError("x"))


# ------------------------------------------------------------------ timers


def test_login_timeout() -> None:
    conn = StompConnection(ServerLimits(login_timeout=10.0), now=100.0)
    assert conn.deadline == 110.0
    assert not conn.check_timers(109.9)
    events(conn, CONNECT, 105.0)  # a CONNECT alone does not stop the clock: the login must finish
    assert conn.check_timers(110.0)
    assert conn.closed
    assert conn.data_to_send(110.0) == b""  # closed silently, as RabbitMQ


def test_heart_beats_sent_at_half_the_interval_when_quiet() -> None:
    conn = connected(heart_beat="0,4000", now=0.0)  # the client wants one from us every 4 s
    assert (conn.send_interval, conn.receive_interval) == (4.0, 0.0)
    assert conn.deadline == 2.0
    assert not conn.check_timers(1.9)
    assert conn.data_to_send(1.9) == b""
    assert not conn.check_timers(2.0)
    assert conn.data_to_send(2.0) == b"\n"
    assert conn.deadline == 4.0
    conn.send_receipt("r")
    conn.data_to_send(3.5)  # real traffic counts as a heart-beat
    assert conn.deadline == 5.5
    assert not conn.check_timers(5.0)
    assert conn.data_to_send(5.0) == b""


def test_missed_client_heart_beats_close_after_two_intervals() -> None:
    conn = connected(heart_beat="3000,0", now=0.0)  # the client promises one every 3 s
    assert (conn.send_interval, conn.receive_interval) == (0.0, 3.0)
    assert conn.deadline == 6.0
    conn.receive_data(b"\n", 5.0)  # an EOL is a heart-beat
    assert events(conn) == []
    assert conn.deadline == 11.0
    assert not conn.check_timers(10.9)
    assert conn.check_timers(11.0)
    assert conn.closed
    assert conn.deadline is None


def test_no_heart_beats_no_deadline() -> None:
    assert connected().deadline is None


# ------------------------------------------------------------------ state machine

_client_frames = st.sampled_from([
    frame("SEND", {"destination": "/queue/a"}, b"x"),
    frame("SEND", {"destination": "/queue/a", "receipt": "r"}),
    frame("SEND", {}),
    frame("SUBSCRIBE", {"destination": "/topic/t", "id": "1", "ack": "client"}),
    frame("UNSUBSCRIBE", {"id": "1"}),
    frame("ACK", {"id": "x"}),
    frame("NACK", {"message-id": "x"}),
    frame("BEGIN", {"transaction": "t"}),
    frame("COMMIT", {}),
    frame("DISCONNECT", {"receipt": "d"}),
    frame("FOO"),
    CONNECT,
    b"SEND\nbad header\n\n\x00",
    b"\n",
])


class ConnectionMachine(RuleBasedStateMachine):
    """Any interleaving of client bytes, shell answers and time: the machine never
    raises, writes only well-formed frames, and stops after an ERROR that closes
    (a refused frame after login gets an ERROR and the connection goes on)."""

    @initialize()
    def start(self) -> None:
        self.now = 0.0
        self.conn = StompConnection(ServerLimits(login_timeout=30.0), now=0.0)
        self.parser = FrameParser()
        self.written: list[Frame] = []
        self.ended = False

    def _drain(self) -> None:
        self.parser.version = self.conn.version
        frames = self.parser.feed(self.conn.data_to_send(self.now))
        if self.ended:
            assert frames == [], "nothing after the ERROR"
        for f in frames:
            assert f.command in ("CONNECTED", "MESSAGE", "RECEIPT", "ERROR")
            if f.command == "ERROR" and self.conn.closed:
                self.ended = True
        self.written += frames

    @rule(data=_client_frames, cut=st.integers(0, 60))
    def client_sends(self, data: bytes, cut: int) -> None:
        cut = min(cut, len(data))
        for part in (data[:cut], data[cut:]):
            self.conn.receive_data(part, self.now)
            for ev in self.conn.events():
                if isinstance(ev, evt.ProtocolError):
                    assert self.conn.closed
                if isinstance(ev, evt.DisconnectReceived) and ev.receipt:
                    self.conn.send_receipt(ev.receipt)
        self._drain()

    @precondition(lambda self: self.conn.state is State.CONNECTING)
    @rule(ok=st.booleans())
    def shell_answers_login(self, ok: bool) -> None:
        if ok:
            self.conn.accept("session-x", self.now)
        else:
            self.conn.reject(access_refused("guest"))
        self._drain()

    @precondition(lambda self: self.conn.state is State.CONNECTED)
    @rule(body=st.binary(max_size=20), key=st.text(max_size=5))
    def shell_delivers(self, body: bytes, key: str) -> None:
        self.conn.send_message(destination="/queue/a", message_id="m", headers={key or "k": key}, body=body)
        self._drain()

    @rule(dt=st.floats(0, 20))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.conn.check_timers(self.now)
        self._drain()

    @invariant()
    def closed_means_silent(self) -> None:
        if self.conn.closed:
            assert self.conn.next_event() is None
            assert self.conn.deadline is None


ConnectionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
test_connection_state_machine = ConnectionMachine.TestCase


def test_stomp_1_2_spec_session() -> None:
    """The frames of the STOMP 1.2 specification's examples, in one session."""
    conn = StompConnection()
    [req] = events(conn, b"CONNECT\naccept-version:1.2\nhost:stomp.github.org\n\n\x00")
    assert isinstance(req, evt.ConnectRequested)
    assert (req.version, req.host) == (V12, "stomp.github.org")
    conn.accept("s", 0.0)
    assert output(conn)[0].headers["version"] == "1.2"
    data = (
        b"SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client\n\n\x00"
        b"BEGIN\ntransaction:tx1\n\n\x00"
        b"SEND\ndestination:/queue/a\ncontent-type:text/plain\ntransaction:tx1\n\nhello queue a\x00"
        b"ACK\nid:12345\ntransaction:tx1\n\n\x00"
        b"NACK\nid:12346\ntransaction:tx1\n\n\x00"
        b"COMMIT\ntransaction:tx1\n\n\x00"
        b"UNSUBSCRIBE\nid:0\n\n\x00"
        b"DISCONNECT\nreceipt:77\n\n\x00"
    )
    got = events(conn, data)
    assert [type(e).__name__ for e in got] == [
        "SubscribeReceived", "BeginReceived", "SendReceived", "AckReceived", "NackReceived",
        "CommitReceived", "UnsubscribeReceived", "DisconnectReceived",
    ]
    sub, _, send, ack, nack, *_ = got
    assert isinstance(sub, evt.SubscribeReceived)
    assert (sub.subscription_id, sub.destination, sub.ack) == ("0", Destination(Kind.QUEUE, "foo"),
                                                              evt.AckMode.CLIENT)
    assert isinstance(send, evt.SendReceived)
    assert (send.transaction, send.body) == ("tx1", b"hello queue a")
    assert ack == evt.AckReceived("12345", None, "tx1")
    assert nack == evt.NackReceived("12346", None, "tx1")
    conn.send_receipt("77")
    assert conn.data_to_send(0.0) == b"RECEIPT\nreceipt-id:77\n\n\x00\n"


@settings(max_examples=300)
@given(
    data=st.binary(max_size=300),
    prefix=st.sampled_from([b"", CONNECT]),
    accept=st.booleans(),
    cuts=st.lists(st.integers(0, 400), max_size=5),
)
def test_fuzz_connection_never_raises(data: bytes, prefix: bytes, accept: bool, cuts: list[int]) -> None:
    """Random bytes, before or after a login: only events come out, an ERROR
    is the last frame written, and the limits bound what is held."""
    limits = ServerLimits(max_frame_size_unauthenticated=128, parser=ParserLimits(max_frame_size=256))
    conn = StompConnection(limits)
    stream = prefix + data
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for a, b in itertools.pairwise(points):
        conn.receive_data(stream[a:b], 0.0)
        for event in conn.events():
            if isinstance(event, evt.ConnectRequested) and accept:
                conn.accept("s", 0.0)
            elif isinstance(event, evt.ProtocolError):
                assert conn.closed
        assert conn._parser.buffered <= 256 + 400
    written = output(conn)
    assert all(f.command in ("CONNECTED", "ERROR") for f in written)
    assert "ERROR" not in [f.command for f in written[:-1]]


@pytest.mark.parametrize("version", [V10, V11, V12])
def test_a_receipt_is_what_serialize_makes(version: str) -> None:
    """send_receipt builds its frame inline: the same bytes as serialize()."""
    conn = connected(version)
    for rid in ("r-1", "a:b\nc\\d"):
        conn.send_receipt(rid)
        assert conn.data_to_send(0.0) == serialize("RECEIPT", {"receipt-id": rid}, b"", version)
