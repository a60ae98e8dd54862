"""Closes that repeat or cross, and frames that follow a connection error.

RabbitMQ 3.10 (``rabbit_reader``) answers every connection.close with
close-ok once closing has begun: a client closing from two threads at once
(Go's amqp091-go and streadway/amqp do) sends two closes and waits for two
close-oks, and a client whose close crossed the broker's gets its close-ok
while the broker still waits for the client's. After its own
connection.close RabbitMQ discards every frame but close and close-ok; a
channel.open then gets no answer.
"""

from __future__ import annotations

import contextlib
import socket

import pytest

from conformance._raw import RawConnection, shortstr
from conformance.conftest import Names

CLOSE = (10, 50)
CLOSE_OK = (10, 51)
IMMEDIATE = (540, "NOT_IMPLEMENTED - immediate=true")


def _assert_eof_or_open(sock: socket.socket) -> None:
    """Nothing more comes: the broker closes (EOF) or waits for us (RabbitMQ waits);
    never a reset and never another frame."""
    sock.settimeout(1.0)
    with contextlib.suppress(TimeoutError):  # still open
        assert sock.recv(65536) == b""


def _assert_ends(sock: socket.socket) -> None:
    """After the client's close-ok to the broker's close no frame comes; the socket
    ends (RabbitMQ resets it, SO_LINGER 0; amqplite half-closes) or stays open."""
    sock.settimeout(1.0)
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        assert sock.recv(65536) == b""


def _assert_silent(raw: RawConnection, seconds: float = 0.5) -> None:
    """No frame for a while (the socket still open)."""
    raw.sock.settimeout(seconds)
    with pytest.raises(TimeoutError):
        raw.read_frame(timeout=seconds)


def _fail_with_540(raw: RawConnection, queue: str, then: bytes = b"") -> None:
    """Provoke the broker's connection.close (540); ``then`` goes in the same write."""
    raw.queue_declare(queue, exclusive=True)
    raw.send_raw(raw.publish_frames("", queue, b"x", immediate=True) + then)


def _broker_closes(raw: RawConnection, queue: str) -> None:
    """Provoke the broker's connection.close (540) and read it."""
    _fail_with_540(raw, queue)
    close = raw.read_method()
    assert (close.ids, close.close_reason()) == (CLOSE, IMMEDIATE)


def _close_ok_ends(raw: RawConnection) -> None:
    """Nothing more came; our close-ok to the broker's close ends the connection."""
    _assert_silent(raw)
    raw.send_method(0, 10, 51, b"")
    _assert_ends(raw.sock)


@pytest.mark.parametrize("writes", [1, 2], ids=["one-write", "two-writes"])
def test_two_closes_get_two_close_oks(url: str, writes: int) -> None:
    raw = RawConnection(url).open()
    try:
        if writes == 1:
            raw.send_raw(raw.close_frame() + raw.close_frame())
        else:
            raw.send_raw(raw.close_frame())
            raw.send_raw(raw.close_frame(200, "again"))
        raw.expect(CLOSE_OK)
        raw.expect(CLOSE_OK)
        _assert_eof_or_open(raw.sock)
    finally:
        raw.sock.close()


def test_a_close_after_close_ok_is_answered_too(url: str) -> None:
    """The second close written only once the first close-ok was read (the slower
    of two threads): the broker still answers it."""
    raw = RawConnection(url).open()
    try:
        raw.send_raw(raw.close_frame())
        raw.expect(CLOSE_OK)
        raw.send_raw(raw.close_frame())
        raw.expect(CLOSE_OK)
    finally:
        raw.sock.close()


def test_closes_crossing_the_brokers_close_are_answered(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        _broker_closes(raw, names.queue())
        # our close crossed the broker's: each is answered; it still waits for close-ok
        raw.send_raw(raw.close_frame() + raw.close_frame())
        raw.expect(CLOSE_OK)
        raw.expect(CLOSE_OK)
        _close_ok_ends(raw)
    finally:
        raw.sock.close()


def test_channel_open_after_the_brokers_close_is_discarded(url: str, names: Names) -> None:
    raw = RawConnection(url).open()
    try:
        _broker_closes(raw, names.queue())
        raw.send_method(2, 20, 10, shortstr(""))
        _close_ok_ends(raw)
    finally:
        raw.sock.close()


def test_channel_open_written_with_the_failing_publish(url: str, names: Names) -> None:
    """channel.open in the same write as the publish that fails: RabbitMQ may answer
    it before its connection.close (the error comes from the channel process, the
    open from the reader); nothing at all may follow the close."""
    raw = RawConnection(url).open()
    try:
        _fail_with_540(raw, names.queue(), then=raw.method_frame(2, 20, 10, shortstr("")))
        method = raw.read_method()
        if method.ids == (20, 11):
            assert method.channel == 2
            method = raw.read_method()
        assert (method.channel, method.ids, method.close_reason()) == (0, CLOSE, IMMEDIATE)
        raw.send_method(3, 20, 10, shortstr(""))  # after the close: discarded
        _close_ok_ends(raw)
    finally:
        raw.sock.close()
