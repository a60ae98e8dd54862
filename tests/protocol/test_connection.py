"""ServerConnection driven with real client bytes (pamqp-built, as pika sends them)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands as pc
from pamqp import header as pheader

from amqplite.protocol.codec import encode_table
from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.errors import ChannelError, ConnectionError_
from amqplite.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionClosing,
    ConnectionOpened,
    ConnectionState,
    ContentReceived,
    MethodReceived,
)
from amqplite.protocol.frames import encode_frame
from amqplite.protocol.methods import BasicPublish, QueueDeclare, QueueDeclareOk
from amqplite.protocol.properties import delivery_mode_of
from amqplite.protocol.spec import PROTOCOL_HEADER
from tests.protocol.client import (
    heartbeat,
    make_connection,
    marshal,
    open_connection,
    parse_frames,
    publish,
    start_ok,
)
from tests.protocol.strategies import FAST


def drain(conn: ServerConnection) -> tuple[list[Any], list[tuple[int, Any]]]:
    """All events, then everything written (released in event order)."""
    events = list(conn.events())
    return events, parse_frames(conn.data_to_send())


def open_channel(conn: ServerConnection, channel: int = 1) -> None:
    conn.receive_data(marshal(pc.Channel.Open(), channel))
    events, frames = drain(conn)
    assert events == [ChannelOpened(channel)]
    assert [(c, f.name) for c, f in frames] == [(channel, "Channel.OpenOk")]


def assert_closed_with(frames: list[tuple[int, Any]], code: int, text: str,
                       class_id: int = 0, method_id: int = 0) -> None:
    channel, close = frames[-1]
    assert channel == 0 and close.name == "Connection.Close"
    assert (close.reply_code, close.reply_text) == (code, text)
    assert (close.class_id, close.method_id) == (class_id, method_id)


# ------------------------------------------------------------------ handshake


def test_full_handshake_like_pika() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    [(ch, start)] = parse_frames(conn.data_to_send())
    assert ch == 0 and start.name == "Connection.Start"
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "PLAIN AMQPLAIN" and start.locales == "en_US"
    # exactly what is implemented: nothing announced as false, nothing unimplemented
    assert start.server_properties["capabilities"] == {
        "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
        "consumer_cancel_notify": True, "connection.blocked": True, "per_consumer_qos": True,
        "authentication_failure_close": True, "consumer_priorities": True,
        "direct_reply_to": True,
    }
    assert start.server_properties["product"] == "amqplite"
    assert conn.state is ConnectionState.STARTING

    conn.receive_data(start_ok())
    [(_, tune)] = parse_frames(conn.data_to_send())
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert conn.username == "guest"

    conn.receive_data(marshal(pc.Connection.TuneOk(2047, 131072, 30)))
    assert conn.data_to_send() == b""
    conn.receive_data(marshal(pc.Connection.Open("/")))
    events, frames = drain(conn)
    assert [f.name for _, f in frames] == ["Connection.OpenOk"]
    assert len(events) == 1 and isinstance(events[0], ConnectionOpened)
    assert events[0].vhost == "/" and events[0].username == "guest"
    assert events[0].client_properties["product"] == "pika"
    assert conn.state is ConnectionState.OPEN
    assert (conn.heartbeat, conn.frame_max, conn.channel_max) == (30, 131072, 2047)
    assert conn.client_capabilities["authentication_failure_close"] is True


def test_handshake_fed_one_byte_at_a_time() -> None:
    conn = make_connection()
    data = (PROTOCOL_HEADER + start_ok() + marshal(pc.Connection.TuneOk(10, 8192, 0))
            + marshal(pc.Connection.Open("/")) + marshal(pc.Channel.Open(), 1)
            + publish(1, b"x" * 10000, frame_max=8192))
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1])
    events = list(conn.events())
    assert [type(e) for e in events] == [ConnectionOpened, ChannelOpened, ContentReceived]
    assert events[-1].body == b"x" * 10000
    assert conn.heartbeat == 0


def test_amqplain_login_as_py_amqp_sends_it() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.data_to_send()
    response = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]  # no length prefix
    conn.receive_data(start_ok(mechanism="AMQPLAIN", response=response))
    [(_, tune)] = parse_frames(conn.data_to_send())
    assert tune.name == "Connection.Tune"
    assert conn.username == "guest"


def test_wrong_protocol_header() -> None:
    conn = make_connection()
    conn.receive_data(b"GET / HTTP/1.1\r\n")
    assert conn.data_to_send() == PROTOCOL_HEADER
    [event] = list(conn.events())
    assert isinstance(event, ConnectionClosed)
    assert conn.state is ConnectionState.CLOSED
    conn.receive_data(b"more")  # ignored
    assert conn.data_to_send() == b""


def test_wrong_password_with_authentication_failure_close() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.data_to_send()
    conn.receive_data(start_ok(password="nope"))
    events, frames = drain(conn)
    text = ("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
            "For details see the broker logfile.")
    assert_closed_with(frames, 403, text)
    assert events == [ConnectionClosed(403, text)]


def test_wrong_password_without_capability_just_drops() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.data_to_send()
    conn.receive_data(start_ok(password="nope", capabilities={}))
    events, frames = drain(conn)
    assert frames == []
    assert isinstance(events[0], ConnectionClosed) and events[0].reply_code == 403


def test_unknown_mechanism_and_bad_plain_response_drop_the_socket() -> None:
    for kwargs in ({"mechanism": "EXTERNAL"}, {"response": b"guest:guest"}):
        conn = make_connection()
        conn.receive_data(PROTOCOL_HEADER)
        conn.data_to_send()
        conn.receive_data(start_ok(**kwargs))
        events, frames = drain(conn)
        assert frames == []
        assert isinstance(events[0], ConnectionClosed)
        assert events[0].reply_code in (502, 503)


def test_unknown_vhost() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER + start_ok() + marshal(pc.Connection.TuneOk(0 + 2047,
                                                                                131072, 60)))
    conn.data_to_send()
    conn.receive_data(marshal(pc.Connection.Open("nope")))
    events, frames = drain(conn)
    assert_closed_with(frames, 530, "NOT_ALLOWED - vhost nope not found", 10, 40)
    assert events == [ConnectionClosing(530, "NOT_ALLOWED - vhost nope not found")]
    assert conn.state is ConnectionState.CLOSING
    conn.receive_data(marshal(pc.Connection.CloseOk()))
    assert list(conn.events()) == [ConnectionClosed(530, "NOT_ALLOWED - vhost nope not found")]


def test_check_vhost_may_raise_its_own_error() -> None:
    def refuse(user: str, vhost: str) -> bool:
        raise ConnectionError_.make(530, f"access to vhost '{vhost}' refused for user '{user}'")

    conn = make_connection(check_vhost=refuse)
    conn.receive_data(PROTOCOL_HEADER + start_ok() + marshal(pc.Connection.TuneOk(2047,
                                                                                131072, 60)))
    conn.data_to_send()
    conn.receive_data(marshal(pc.Connection.Open("/")))
    _, frames = drain(conn)
    assert frames[-1][1].reply_text == "NOT_ALLOWED - access to vhost '/' refused for user 'guest'"


@pytest.mark.parametrize(
    ("tune", "text"),
    [
        ((2047, 200000, 60),
         "NOT_ALLOWED - negotiated frame_max = 200000 is higher than the maximum allowed "
         "value (131072)"),
        ((2047, 0, 60),
         "NOT_ALLOWED - negotiated frame_max = 0 is higher than the maximum allowed value "
         "(131072)"),
        ((2047, 1000, 60),
         "NOT_ALLOWED - negotiated frame_max = 1000 is lower than the minimum allowed value "
         "(4096)"),
        ((0, 131072, 60),
         "NOT_ALLOWED - negotiated channel_max = 0 (no limit) is higher than the maximum "
         "allowed value (2047)"),
    ],
)
def test_tune_ok_outside_limits(tune: tuple[int, int, int], text: str) -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER + start_ok())
    conn.data_to_send()
    conn.receive_data(marshal(pc.Connection.TuneOk(*tune)))
    events, frames = drain(conn)
    assert_closed_with(frames, 530, text, 10, 30)
    assert events == [ConnectionClosing(530, text)]


def test_lower_limits_from_client_are_accepted() -> None:
    conn = open_connection(channel_max=10, frame_max=4096, heartbeat=0)
    assert (conn.channel_max, conn.frame_max, conn.heartbeat) == (10, 4096, 0)


def test_method_before_handshake_completes_drops_silently() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.data_to_send()
    conn.receive_data(marshal(pc.Channel.Open(), 1))
    events, frames = drain(conn)
    assert frames == [] and isinstance(events[0], ConnectionClosed)
    assert events[0].reply_code == 505


# ------------------------------------------------------------------- channels


def test_channel_open_close_and_reply_ordering() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    # queue.declare and channel.close in one packet: close-ok must not overtake declare-ok
    conn.receive_data(marshal(pc.Queue.Declare(queue="q"), 1)
                      + marshal(pc.Channel.Close(200, "bye", 0, 0), 1))
    event = conn.next_event()
    assert isinstance(event, MethodReceived) and event.method == QueueDeclare(queue="q")
    assert conn.send_method(1, QueueDeclareOk("q", 0, 0))
    event = conn.next_event()
    assert event == ChannelClosed(1, 200, "bye")
    assert conn.next_event() is None
    frames = parse_frames(conn.data_to_send())
    assert [f.name for _, f in frames] == ["Queue.DeclareOk", "Channel.CloseOk"]
    assert conn.open_channels == frozenset()
    assert not conn.send_method(1, QueueDeclareOk("q", 0, 0))  # channel gone: dropped
    open_channel(conn, 1)  # and the number can be reused


def test_method_on_unopened_channel_is_channel_error() -> None:
    conn = open_connection()
    conn.receive_data(publish(3, b"hi"))
    events, frames = drain(conn)
    assert_closed_with(frames, 504, "CHANNEL_ERROR - expected 'channel.open'", 60, 40)
    assert events == [ConnectionClosing(504, "CHANNEL_ERROR - expected 'channel.open'")]
    # while closing, everything but close/close-ok is ignored
    conn.receive_data(marshal(pc.Channel.Open(), 1) + publish(1, b"x") + heartbeat())
    assert drain(conn) == ([], [])
    conn.receive_data(marshal(pc.Connection.CloseOk()))
    assert list(conn.events()) == [ConnectionClosed(504,
                                                    "CHANNEL_ERROR - expected 'channel.open'")]


def test_second_channel_open() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(marshal(pc.Channel.Open(), 1))
    _, frames = drain(conn)
    assert_closed_with(frames, 504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)


def test_channel_max_limits_open_channels_not_numbers() -> None:
    """RabbitMQ: any number up to 65535 opens; the (channel_max+1)th open channel is 530."""
    conn = open_connection(channel_max=2)
    open_channel(conn, 65535)
    open_channel(conn, 7)
    conn.receive_data(marshal(pc.Channel.Open(), 1))
    _, frames = drain(conn)
    assert_closed_with(frames, 530, "NOT_ALLOWED - number of channels opened (2) has reached "
                       "the negotiated channel_max (2)")


def test_server_only_method_from_client_is_command_invalid() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(marshal(pc.Basic.ConsumeOk("ctag"), 1))
    _, frames = drain(conn)
    assert_closed_with(frames, 503, "COMMAND_INVALID - unimplemented method", 60, 21)


def test_close_channel_drops_frames_until_close_ok() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.close_channel(1, 404, "NOT_FOUND - no queue 'q' in vhost '/'", 50, 10)
    [(_, close)] = parse_frames(conn.data_to_send())
    assert close.name == "Channel.Close" and close.reply_code == 404
    assert (close.class_id, close.method_id) == (50, 10)
    assert not conn.send_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"x")
    conn.receive_data(publish(1, b"dropped") + marshal(pc.Basic.Ack(1), 1))
    assert drain(conn) == ([], [])
    conn.receive_data(marshal(pc.Channel.CloseOk(), 1))
    assert list(conn.events()) == [ChannelClosed(1)]
    open_channel(conn, 1)


def test_channel_close_crossing_ours() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.close_channel(1, 406, "PRECONDITION_FAILED - x")
    conn.data_to_send()
    conn.receive_data(marshal(pc.Channel.Close(200, "client", 0, 0), 1))
    events, frames = drain(conn)
    assert events == [] and [f.name for _, f in frames] == ["Channel.CloseOk"]
    conn.receive_data(marshal(pc.Channel.CloseOk(), 1))
    assert list(conn.events()) == [ChannelClosed(1)]


def test_send_error_routes_soft_and_hard() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.send_error(1, ChannelError.make(406, "PRECONDITION_FAILED - inequivalent arg"))
    assert parse_frames(conn.data_to_send())[0][1].name == "Channel.Close"
    conn.send_error(1, ConnectionError_.make(541, "boom"))
    assert_closed_with(parse_frames(conn.data_to_send()), 541, "INTERNAL_ERROR - boom")


# -------------------------------------------------------------------- content


def test_publish_assembly_single_and_multi_frame() -> None:
    conn = open_connection(frame_max=4096)
    open_channel(conn, 1)
    props = pc.Basic.Properties(delivery_mode=2, headers={"a": 1}, content_type="text/plain")
    big = bytes(range(256)) * 40
    conn.receive_data(publish(1, b"small", routing_key="k1", properties=props)
                      + publish(1, big, exchange="amq.topic", routing_key="k2",
                                frame_max=4096)
                      + publish(1, b"", routing_key="k1"))
    events = list(conn.events())
    assert [type(e) for e in events] == [ContentReceived] * 3
    first, second, third = events
    assert first.method == BasicPublish(exchange="", routing_key="k1")
    assert first.body == b"small" and delivery_mode_of(first.properties_raw) == 2
    assert second.method == BasicPublish(exchange="amq.topic", routing_key="k2")
    assert second.body == big
    assert third.body == b"" and third.method.routing_key == "k1"


def test_publish_split_across_receives() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    data = publish(1, b"a" * 300) * 3
    for i in range(0, len(data), 7):
        conn.receive_data(data[i : i + 7])
    assert [e.body for e in conn.events()] == [b"a" * 300] * 3


def _content_header(channel: int, size: int, class_id: int = 60, weight: int = 0) -> bytes:
    return encode_frame(2, channel, struct.pack(">HHQ", class_id, weight, size) + b"\x00\x00")


@pytest.mark.parametrize(
    ("data", "code", "text", "ids"),
    [
        (lambda: _content_header(1, 5),
         505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1) + encode_frame(3, 1, b"x"),
         505, "UNEXPECTED_FRAME - expected content header for class 60, got non content "
              "header frame instead", (60, 40)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1) + marshal(pc.Basic.Ack(1), 1),
         505, "UNEXPECTED_FRAME - expected content header for class 60, got non content "
              "header frame instead", (60, 40)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1) + _content_header(1, 5, 50),
         505, "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 "
              "instead", (60, 40)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1) + _content_header(1, 5)
         + encode_frame(3, 1, b"123456"),
         501, "FRAME_ERROR - content body frame exceeds remaining content size", (60, 40)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1) + _content_header(1, 5)
         + _content_header(1, 5),
         505, "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
         (60, 40)),
        (lambda: marshal(pc.Basic.Publish(routing_key="q"), 1)
         + _content_header(1, 600 * 1024 * 1024),
         501, "FRAME_ERROR - content body size 629145600 exceeds maximum allowed size 536870912",
         (60, 40)),
        (lambda: encode_frame(3, 1, b"stray"),
         505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0)),
    ],
)
def test_content_sequence_errors(data: Any, code: int, text: str, ids: tuple[int, int]) -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(data())
    events, frames = drain(conn)
    assert_closed_with(frames, code, text, *ids)
    assert events == [ConnectionClosing(code, text)]


def test_oversized_message_is_a_channel_error() -> None:
    conn = open_connection(max_message_size=1000)
    open_channel(conn, 1)
    conn.receive_data(publish(1, b"x" * 1001) + publish(1, b"y"))
    events, frames = drain(conn)
    assert events == []
    [(ch, close)] = frames
    assert ch == 1 and close.name == "Channel.Close"
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - message size 1001 is larger than configured max size 1000")
    assert (close.class_id, close.method_id) == (60, 40)
    conn.receive_data(marshal(pc.Channel.CloseOk(), 1))
    assert list(conn.events()) == [ChannelClosed(1)]
    open_channel(conn, 1)
    conn.receive_data(publish(1, b"z" * 1000))
    assert [e.body for e in conn.events()] == [b"z" * 1000]


# --------------------------------------------------------------- frame errors


def test_frame_larger_than_frame_max() -> None:
    conn = open_connection(frame_max=4096)
    open_channel(conn, 1)
    conn.receive_data(encode_frame(3, 1, b"x" * 5000))
    events, frames = drain(conn)
    text = "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,5000,4088}"
    assert_closed_with(frames, 501, text)
    assert events == [ConnectionClosed(501, text)]  # lost sync: no wait for close-ok


def test_frame_max_applies_before_tuning() -> None:
    conn = make_connection()
    conn.receive_data(PROTOCOL_HEADER)
    conn.data_to_send()
    conn.receive_data(struct.pack(">BHI", 1, 0, 5000))
    events, frames = drain(conn)
    assert frames == [] and isinstance(events[0], ConnectionClosed)


def test_bad_frame_end() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(encode_frame(1, 1, b"\x00\x3c\x00\x50" + b"\x00" * 9)[:-1] + b"\x00")
    events, frames = drain(conn)
    assert_closed_with(
        frames, 501, "FRAME_ERROR - type 1, all octets = <<0,60,0,80,0,0,0,0,0,0,0,0,0>>: "
                     "{invalid_frame_end_marker,0}")
    assert isinstance(events[-1], ConnectionClosed)


def test_unknown_frame_type() -> None:
    conn = open_connection()
    conn.receive_data(encode_frame(4, 0, b"abc"))
    events, frames = drain(conn)
    assert_closed_with(frames, 501, 'FRAME_ERROR - type 4, all octets = <<"abc">>: unknown_frame')
    assert isinstance(events[-1], ConnectionClosing)


def test_heartbeats() -> None:
    conn = open_connection()
    conn.receive_data(heartbeat())
    assert drain(conn) == ([], [])
    conn.send_heartbeat()
    assert conn.data_to_send() == b"\x08\x00\x00\x00\x00\x00\x00\xce"
    conn.receive_data(encode_frame(8, 1, b""))
    _, frames = drain(conn)
    assert_closed_with(frames, 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>")


def test_unknown_method_id() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(encode_frame(1, 1, b"\x00\x3c\x00\xc8"))
    _, frames = drain(conn)
    assert frames[-1][1].reply_code == 540


def test_malformed_method_arguments_close_the_connection() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(encode_frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x05ab"))
    _, frames = drain(conn)
    assert frames[-1][1].reply_code == 502
    assert (frames[-1][1].class_id, frames[-1][1].method_id) == (50, 10)


@FAST
@given(st.binary(max_size=200), st.integers(1, 64))
def test_garbage_never_escapes(garbage: bytes, step: int) -> None:
    conn = open_connection()
    open_channel(conn, 1)
    for i in range(0, len(garbage), step):
        conn.receive_data(garbage[i : i + step])
    for event in conn.events():
        assert not isinstance(event, ConnectionClosed) or event.reply_code != 541, event
    conn.data_to_send()


@FAST
@given(st.lists(st.sampled_from(["pub", "ack", "hb", "decl", "big"]), max_size=12),
       st.integers(1, 50))
def test_valid_traffic_in_any_chunking(ops: list[str], step: int) -> None:
    conn = open_connection(frame_max=4096)
    open_channel(conn, 1)
    parts = {
        "pub": publish(1, b"p", routing_key="r"),
        "big": publish(1, b"B" * 9000, routing_key="r", frame_max=4096),
        "ack": marshal(pc.Basic.Ack(7), 1),
        "hb": heartbeat(),
        "decl": marshal(pc.Queue.Declare(queue="q", arguments={"x-max-length": 5}), 1),
    }
    data = b"".join(parts[o] for o in ops)
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step])
    kinds = [type(e).__name__ for e in conn.events()]
    expected = {"pub": "ContentReceived", "big": "ContentReceived", "ack": "MethodReceived",
                "decl": "MethodReceived"}
    assert kinds == [expected[o] for o in ops if o != "hb"]


# ------------------------------------------------------------------- sending


def test_send_deliver_get_ok_return_decode_with_pamqp() -> None:
    conn = open_connection(frame_max=4096)
    open_channel(conn, 2)
    props_raw = pheader.ContentHeader(0, 0, pc.Basic.Properties(delivery_mode=2)).marshal()[12:]
    body = b"z" * 10000
    assert conn.send_deliver(2, "ctag", 42, True, "ex", "rk", props_raw, body)
    assert conn.send_get_ok(2, 43, False, "", "q", 7, props_raw, b"g")
    assert conn.send_return(2, 312, "NO_ROUTE", "ex", "nowhere", props_raw, b"")
    frames = parse_frames(conn.data_to_send())
    deliver = frames[0][1]
    assert deliver.name == "Basic.Deliver"
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered,
            deliver.exchange, deliver.routing_key) == ("ctag", 42, True, "ex", "rk")
    assert frames[1][1].body_size == 10000 and frames[1][1].properties.delivery_mode == 2
    bodies = [f for _, f in frames[2:5]]
    assert all(isinstance(b, pbody.ContentBody) for b in bodies)
    assert [len(b.value) for b in bodies] == [4088, 4088, 1824]
    get_ok = frames[5][1]
    assert (get_ok.delivery_tag, get_ok.message_count, get_ok.routing_key) == (43, 7, "q")
    ret = frames[8][1]
    assert (ret.reply_code, ret.reply_text, ret.routing_key) == (312, "NO_ROUTE", "nowhere")
    assert frames[9][1].body_size == 0 and len(frames) == 10
    assert all(ch == 2 for ch, _ in frames)


def test_server_close_then_client_close_ok() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.close(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
    events, frames = drain(conn)
    assert events[0].reply_code == 320 and frames[0][1].name == "Connection.Close"
    assert not conn.send_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"x")
    conn.receive_data(publish(1, b"ignored") + marshal(pc.Connection.CloseOk()))
    [event] = list(conn.events())
    assert isinstance(event, ConnectionClosed) and event.reply_code == 320


def test_client_close() -> None:
    conn = open_connection()
    conn.receive_data(marshal(pc.Connection.Close(200, "Normal shutdown", 0, 0)))
    events, frames = drain(conn)
    assert events == [ConnectionClosed(200, "Normal shutdown")]
    assert [f.name for _, f in frames] == ["Connection.CloseOk"]
    assert conn.state is ConnectionState.CLOSED


def test_long_reply_text_is_truncated_to_a_shortstr() -> None:
    conn = open_connection()
    conn.close(541, "INTERNAL_ERROR - " + "é" * 300)
    [(_, close)] = parse_frames(conn.data_to_send())
    assert len(close.reply_text.encode()) <= 255


def test_update_secret_is_passed_to_the_server() -> None:
    conn = open_connection()
    conn.receive_data(marshal(pc.Connection.UpdateSecret("s3cret", "rotation")))
    [event] = list(conn.events())
    assert isinstance(event, MethodReceived) and event.channel == 0
    assert event.method.new_secret == b"s3cret"


def test_replies_to_methods_before_connection_close_still_go_out() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(marshal(pc.Queue.Declare(queue="q"), 1)
                      + marshal(pc.Connection.Close(200, "bye", 0, 0)))
    assert isinstance(conn.next_event(), MethodReceived)
    assert conn.state is ConnectionState.OPEN
    assert conn.send_method(1, QueueDeclareOk("q", 0, 0))
    assert conn.next_event() == ConnectionClosed(200, "bye")
    assert conn.state is ConnectionState.CLOSED
    assert not conn.send_method(1, QueueDeclareOk("q", 0, 0))
    names = [f.name for _, f in parse_frames(conn.data_to_send())]
    assert names == ["Queue.DeclareOk", "Connection.CloseOk"]


def test_client_reopens_channel_right_after_close_ok() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(marshal(pc.Channel.Close(200, "", 0, 0), 1))
    assert parse_frames(conn.data_to_send())[0][1].name == "Channel.CloseOk"
    conn.receive_data(marshal(pc.Channel.Open(), 1))  # before the server saw ChannelClosed
    events, frames = drain(conn)
    assert events == [ChannelClosed(1), ChannelOpened(1)]
    assert [f.name for _, f in frames] == ["Channel.OpenOk"]
    assert conn.open_channels == frozenset({1})
