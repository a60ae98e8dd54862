"""Connection and channel life: update-secret, channel numbers."""

from __future__ import annotations

import asyncio
import struct

import aio_pika

from conformance._raw import RawConnection, longstr, shortstr, table
from conformance.conftest import amqp_url

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
