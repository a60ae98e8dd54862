"""Closing races in the state machine: closes that cross, repeat, or follow an error.

RabbitMQ 3.10 (``rabbit_reader``) answers every connection.close with
close-ok once closing has begun, whoever started it, and discards every other
frame that arrives after its own connection.close. conformance/test_close_races.py
checks the same against the broker; these pin the protocol object's part.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands as pc

from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.events import (
    ConnectionClosed,
    ConnectionClosing,
    ConnectionState,
    MethodReceived,
)
from tests.protocol.client import marshal, open_connection, parse_frames, publish
from tests.protocol.test_connection import drain, open_channel

CLIENT_CLOSE = marshal(pc.Connection.Close(200, "bye", 0, 0))
CLOSE_OK = marshal(pc.Connection.CloseOk())
IMMEDIATE = "NOT_IMPLEMENTED - immediate=true"


def names(frames: list[tuple[int, Any]]) -> list[tuple[int, str]]:
    return [(ch, f.name) for ch, f in frames]


def failing_after(first: bytes, rest: bytes) -> ServerConnection:
    """A connection that read ``first`` + ``rest`` at once, handed out the event of
    ``first`` and answered it with a connection error (540), as the server does
    when the broker raises one."""
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(first + rest)
    assert isinstance(conn.next_event(), MethodReceived)
    conn.close(540, IMMEDIATE, 60, 40)
    return conn


def test_two_client_closes_in_one_read_get_two_close_oks() -> None:
    conn = open_connection()
    conn.receive_data(CLIENT_CLOSE + CLIENT_CLOSE)
    events, frames = drain(conn)
    assert events == [ConnectionClosed(200, "bye")]
    assert names(frames) == [(0, "Connection.CloseOk")] * 2
    assert conn.peer_closed and conn.state is ConnectionState.CLOSED


def test_after_the_client_close_only_closes_are_answered() -> None:
    conn = open_connection()
    open_channel(conn, 1)
    conn.receive_data(CLIENT_CLOSE)
    drain(conn)
    late = publish(1, b"x" * 500) + marshal(pc.Channel.Open(), 2) + CLIENT_CLOSE
    conn.receive_data(late[:-5])  # the close split across two reads
    assert drain(conn) == ([], [])
    conn.receive_data(late[-5:] + marshal(pc.Queue.Declare(queue="q"), 1))
    assert list(conn.events()) == []
    assert conn.data_to_send() == CLOSE_OK


def test_a_framing_error_after_the_client_close_ends_the_answers() -> None:
    conn = open_connection()
    conn.receive_data(CLIENT_CLOSE)
    drain(conn)
    broken = CLIENT_CLOSE[:-1] + b"\x00"  # no frame-end octet
    conn.receive_data(broken + CLIENT_CLOSE)
    conn.receive_data(CLIENT_CLOSE)
    assert drain(conn) == ([], [])
    assert not conn.peer_closed


def test_a_client_close_crossing_ours_is_answered_and_close_ok_still_awaited() -> None:
    conn = open_connection()
    conn.close(320, "CONNECTION_FORCED - shutdown")
    events, frames = drain(conn)
    assert events == [ConnectionClosing(320, "CONNECTION_FORCED - shutdown")]
    assert names(frames) == [(0, "Connection.Close")]
    conn.receive_data(CLIENT_CLOSE + CLIENT_CLOSE)
    events, frames = drain(conn)
    assert events == []
    assert names(frames) == [(0, "Connection.CloseOk")] * 2
    assert conn.state is ConnectionState.CLOSING
    conn.receive_data(CLOSE_OK)
    assert drain(conn) == ([ConnectionClosed(320, "CONNECTION_FORCED - shutdown")], [])


def test_frames_after_the_failing_one_are_discarded() -> None:
    """channel.open read with the frame that failed: no open-ok after the close,
    no ChannelOpened for a connection whose session is gone."""
    conn = failing_after(marshal(pc.Queue.Declare(queue="q"), 1),
                         marshal(pc.Channel.Open(), 2) + publish(1, b"x")
                         + marshal(pc.Channel.Close(200, "", 0, 0), 1))
    events, frames = drain(conn)
    assert events == [ConnectionClosing(540, IMMEDIATE)]
    assert names(frames) == [(0, "Connection.Close")]
    assert conn.open_channels == frozenset()
    conn.receive_data(marshal(pc.Channel.Open(), 3) + CLOSE_OK)
    assert drain(conn) == ([ConnectionClosed(540, IMMEDIATE)], [])


def test_a_client_close_read_after_the_failing_frame_is_answered_after_our_close() -> None:
    conn = failing_after(marshal(pc.Queue.Declare(queue="q"), 1), CLIENT_CLOSE)
    events, frames = drain(conn)
    assert events == [ConnectionClosing(540, IMMEDIATE)]
    assert names(frames) == [(0, "Connection.Close"), (0, "Connection.CloseOk")]
    conn.receive_data(CLOSE_OK)
    assert drain(conn) == ([ConnectionClosed(540, IMMEDIATE)], [])


def test_a_framing_error_read_after_the_failing_frame_still_ends_the_connection() -> None:
    broken = marshal(pc.Channel.Open(), 2)[:-1] + b"\x00"
    conn = failing_after(marshal(pc.Queue.Declare(queue="q"), 1), broken)
    events, frames = drain(conn)
    assert events == [ConnectionClosing(540, IMMEDIATE), ConnectionClosed(540, IMMEDIATE)]
    assert names(frames) == [(0, "Connection.Close")]
    assert frames[0][1].reply_code == 540


def test_a_run_of_publishes_stops_before_the_close_and_holds_its_close_ok() -> None:
    """next_publish (the server's compiled run of publishes) takes the publishes read
    with a connection.close and stops there without releasing the close-ok queued
    ahead of it: the server writes what it owes them first (basic.return), then
    next_event lets the close-ok out, after those."""
    conn = open_connection()
    open_channel(conn)
    conn.receive_data(publish(1, b"a") + publish(1, b"b") + CLIENT_CLOSE)
    taken = []
    while (ev := conn.next_publish()) is not None:
        taken.append(ev.body)
    assert taken == [b"a", b"b"]
    assert conn.data_to_send() == b"", "the close-ok waits for the close event"
    assert conn.close_pending()
    assert conn.send_return(1, 312, "NO_ROUTE", "", "q", b"\x00\x00", b"b")  # owed: first
    assert isinstance(conn.next_event(), ConnectionClosed)
    assert names(parse_frames(conn.data_to_send())) == [
        (1, "Basic.Return"), (1, "ContentHeader"), (1, "ContentBody"), (0, "Connection.CloseOk")]
    assert conn.next_publish() is None
