"""Connection handshake: properties, authentication, vhosts, bad preambles."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse, urlunparse

import pika
import pika.exceptions
import pytest

from conformance._raw import PROTOCOL_HEADER, RawConnection, ServerClosed
from conformance.conftest import connect

REQUIRED_CAPABILITIES = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "per_consumer_qos",
    "authentication_failure_close",
    "direct_reply_to",
    "consumer_priorities",
]


def _with(url: str, *, password: str | None = None, vhost: str | None = None) -> str:
    parsed = urlparse(url)
    netloc = parsed.netloc
    if password is not None:
        creds, host = netloc.rsplit("@", 1)
        netloc = f"{creds.split(':', 1)[0]}:{password}@{host}"
    path = parsed.path if vhost is None else "/" + vhost
    return urlunparse(parsed._replace(netloc=netloc, path=path))


def _read_until_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends before it closes the socket (bounded)."""
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            break
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"server did not close the socket; got {data!r}")


def test_server_properties_and_capabilities(url: str) -> None:
    conn = connect()
    try:
        props = conn._impl.server_properties
        assert props is not None
        for key in ("product", "version", "platform", "capabilities"):
            assert key in props, key
        caps = props["capabilities"]
        for cap in REQUIRED_CAPABILITIES:
            assert caps.get(cap) is True, cap
        # what a broker announces, it has: no feature is listed as false
        assert all(value is True for value in caps.values()), caps
    finally:
        conn.close()


def test_wrong_password_is_refused(url: str) -> None:
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        connect(_with(url, password="definitely-wrong"))
    # With authentication_failure_close the broker says why (403 ACCESS_REFUSED).
    assert "ACCESS_REFUSED" in str(info.value)
    assert "403" in str(info.value)


def test_wrong_password_raw_gets_connection_close_403(url: str) -> None:
    raw = RawConnection(_with(url, password="definitely-wrong"))
    with pytest.raises(ServerClosed) as info:
        raw.open()
    raw.sock.close()
    assert info.value.kind == "connection.close"
    assert info.value.reply_code == 403
    assert info.value.reply_text.startswith("ACCESS_REFUSED - ")


def test_unknown_vhost_is_530(url: str) -> None:
    # pika reports this as ProbableAccessDeniedError wrapping the broker's close.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        connect(_with(url, vhost="no-such-vhost-conformance"))
    assert "(530) 'NOT_ALLOWED - vhost no-such-vhost-conformance not found'" in str(info.value)


def test_unknown_vhost_raw_connection_close(url: str) -> None:
    raw = RawConnection(_with(url, vhost="no-such-vhost-conformance"))
    with pytest.raises(ServerClosed) as info:
        raw.open()
    raw.sock.close()
    assert (info.value.kind, info.value.reply_code) == ("connection.close", 530)
    assert info.value.reply_text == "NOT_ALLOWED - vhost no-such-vhost-conformance not found"


@pytest.mark.parametrize(
    "preamble",
    [b"AMQP\x00\x00\x0a\x00", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"AMQP\x00\x00\x09\x02"],
    ids=["amqp-0-10", "http", "amqp-0-9-2"],
)
def test_wrong_protocol_header_gets_server_header_and_close(url: str, preamble: bytes) -> None:
    raw = RawConnection(url)
    raw.connect()
    raw.send_raw(preamble)
    assert _read_until_eof(raw.sock) == PROTOCOL_HEADER
    raw.sock.close()


def test_garbage_after_handshake_closes_connection_others_unaffected(url: str) -> None:
    bystander = connect()
    try:
        raw = RawConnection(url).open()
        raw.send_raw(b"\x41\x42\x43 this is not a frame \x00\xff" * 8)
        # RabbitMQ answers a bad frame type with connection.close 501 FRAME_ERROR
        # (it reads the first 7 bytes as a frame header: "ABC this " = type 65,
        # channel 16963, size 544499817 > frame_max), then closes the socket.
        assert raw.expect_close() == (
            501, "FRAME_ERROR - type 65, all octets = <<>>: {frame_too_large,544499817,131064}",
            0, 0)
        _read_until_eof(raw.sock)
        raw.sock.close()
        ch = bystander.channel()
        ok = ch.queue_declare("", exclusive=True)
        assert ok.method.queue
        fresh = connect()
        fresh.close()
    finally:
        bystander.close()


def test_garbage_instead_of_header(url: str) -> None:
    raw = RawConnection(url)
    raw.connect()
    raw.send_raw(b"\xff\x00\x13garbage-garbage")
    assert _read_until_eof(raw.sock) == PROTOCOL_HEADER
    raw.sock.close()
    connect().close()


def test_channel_numbers_are_independent(connection: pika.BlockingConnection) -> None:
    chans = [connection.channel() for _ in range(5)]
    assert len({c.channel_number for c in chans}) == 5
    chans[2].close()
    assert chans[3].is_open
    assert connection.channel().is_open
