"""Connection and channel life: update-secret, channel numbers, the close handshake.

The close-handshake tests write bursts of frames around connection.close in
one go, the way a client with a busy writer does. RabbitMQ answers every
publish that came before the close (basic.return included), sends close-ok,
and keeps reading and discarding whatever follows, so the client never sees
EPIPE or ECONNRESET and always gets to read the close-ok.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import aio_pika
import pytest

from conformance._raw import RawConnection, longstr, shortstr, table
from conformance.conftest import Names, amqp_url

BURST = 2000  # messages in a burst
BODY = b"b" * 8000  # ~16 MB per burst: more than any socket buffer holds


def _assert_no_reset(sock: socket.socket) -> None:
    """After close-ok the broker may close (EOF) or wait for us to; never reset.

    A reset would mean it closed with our bytes unread, which on a busier
    connection destroys the close-ok the client has not read yet. (Only for a
    close the client started: RabbitMQ then waits for the client to close.)
    """
    sock.settimeout(1.0)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        pass  # still open: RabbitMQ waits for the client to close


# ------------------------------------------------------------- update-secret


def test_update_secret_is_answered(url: str) -> None:
    raw = RawConnection(url).open()
    try:
        raw.send_method(0, 10, 70, longstr("guest") + shortstr("token refresh"))
        assert raw.expect((10, 71)).args == b""
        raw.queue_declare("", exclusive=True)  # the connection carries on
    finally:
        raw.close()


def test_update_secret_before_any_channel(url: str) -> None:
    """RabbitMQ's internal users answer whatever the new secret is (checked at start-ok)."""
    raw = RawConnection(url).open(channel=False)
    try:
        for secret in ("guest", "not-the-password"):
            raw.send_method(0, 10, 70, longstr(secret) + shortstr("rotate"))
            raw.expect((10, 71))
        raw.open_channel(1)
    finally:
        raw.close()


def test_update_secret_aiopika() -> None:
    """aio-pika's update_secret waits for update-secret-ok: it must come back."""

    async def main() -> None:
        async with asyncio.timeout(10):
            conn = await aio_pika.connect(amqp_url())
            try:
                await conn.update_secret("guest", reason="refresh", timeout=5)
                ch = await conn.channel()
                await ch.declare_queue("", exclusive=True)
            finally:
                await conn.close()

    asyncio.run(main())


# ----------------------------------------------------------- channel numbers


def test_channel_65535_opens_on_a_fresh_connection(url: str) -> None:
    """channel_max caps how many channels are open, not their numbers."""
    raw = RawConnection(url).open(channel=False)
    try:
        raw.open_channel(65535)
        raw.send_method(65535, 50, 10, b"\x00\x00" + shortstr("") + b"\x08" + table())
        ok = raw.expect((50, 11), channel=65535)
        assert ok.args[1 : 1 + ok.args[0]].startswith(b"amq.gen-")
    finally:
        raw.close()


def test_negotiated_channel_max_counts_open_channels(url: str) -> None:
    raw = RawConnection(url).open(channel=False, channel_max=3)
    try:
        for number in (100, 65535, 7):  # all above channel_max, three of them
            raw.open_channel(number)
        raw.send_method(8, 20, 10, shortstr(""))
        assert raw.expect_close() == (
            530, "NOT_ALLOWED - number of channels opened (3) has reached the negotiated"
            " channel_max (3)", 0, 0)
    finally:
        raw.sock.close()


def test_closed_channel_frees_its_slot(url: str) -> None:
    raw = RawConnection(url).open(channel=False, channel_max=1)
    try:
        for number in (40000, 2, 40000):
            raw.open_channel(number)
            raw.send_method(number, 20, 40, struct.pack(">H", 200) + shortstr("done")
                            + struct.pack(">HH", 0, 0))
            raw.expect((20, 41), channel=number)
    finally:
        raw.close()


# ----------------------------------------------------------- close handshake


def test_every_return_precedes_close_ok(url: str, names: Names) -> None:
    """Mandatory publishes to nowhere, then close, in one write from a busy writer.

    The writer runs beside the reader, as in every real client: a broker may
    stop reading a client that owes it megabytes of returns and reads none.
    """
    raw = RawConnection(url).open()
    try:
        publish = raw.publish_frames("", names.queue("nobody"), BODY, mandatory=True)
        writer = threading.Thread(target=raw.sock.sendall,
                                  args=(publish * BURST + raw.close_frame(),), daemon=True)
        writer.start()
        returns = 0
        while True:
            method = raw.read_method(timeout=30)
            if method.ids != (60, 50):
                break
            raw.read_content(method)
            returns += 1
        assert method.ids == (10, 51), method
        assert returns == BURST
        writer.join(10)
        _assert_no_reset(raw.sock)
    finally:
        raw.sock.close()


def test_frames_after_close_are_discarded_not_reset(url: str) -> None:
    """A writer still flushing after connection.close must not get EPIPE/ECONNRESET."""
    raw = RawConnection(url).open()
    try:
        publish = raw.publish_frames("", "conformance-nowhere", BODY)
        raw.send_raw(raw.close_frame() + publish * BURST)  # raises on EPIPE/ECONNRESET
        raw.expect((10, 51))
        _assert_no_reset(raw.sock)
    finally:
        raw.sock.close()


def test_connection_error_mid_burst(url: str, names: Names) -> None:
    """The broker closes (540) while the client is still writing: it keeps reading
    and discarding until close-ok, so the client finishes its write and reads why.

    What follows our close-ok is not pinned down: RabbitMQ then closes with
    SO_LINGER 0 (a reset); amqplite half-closes and drains (tests/server).
    """
    raw = RawConnection(url).open()
    try:
        queue = names.queue()
        raw.queue_declare(queue)
        publish = raw.publish_frames("", queue, BODY)
        raw.send_raw(raw.publish_frames("", queue, b"x", immediate=True) + publish * BURST)
        assert raw.expect_close() == (540, "NOT_IMPLEMENTED - immediate=true", 60, 40)
    finally:
        raw.sock.close()


@pytest.mark.parametrize("channels", [1, 3])
def test_client_close_with_open_channels(url: str, channels: int) -> None:
    raw = RawConnection(url).open(channel=False)
    try:
        for number in range(1, channels + 1):
            raw.open_channel(number)
        raw.send_raw(raw.close_frame())
        raw.expect((10, 51))
        _assert_no_reset(raw.sock)
    finally:
        raw.sock.close()
