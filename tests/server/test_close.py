"""Closing connections: forced closes (admin, SIGTERM), lingering close, timeouts.

The broker runs with a short handshake timeout, so every connection here is
soon "older than the handshake timeout": a forced close drops the session,
and that must never be mistaken for a connection that did not finish its
handshake (which used to reset about one forced close in three).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import httpx
import pytest

from conformance._raw import RawConnection
from tests.brokerproc import BrokerProcess, wait_for

HANDSHAKE_TIMEOUT = 0.3
FORCED_TEXT = "CONNECTION_FORCED - Closed via management plugin"
SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
BURST = 2000
BODY = b"b" * 8000


def _start(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(
        data_dir, env={"AMQPLITE_HANDSHAKE_TIMEOUT": str(HANDSHAKE_TIMEOUT)}).start()


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory.mktemp("quick"))
    yield b
    b.stop()


def _name(raw: RawConnection) -> str:
    """The broker names a connection by the client's address."""
    host, port = raw.sock.getsockname()[:2]
    return f"{host}:{port}"


def _open_aged(b: BrokerProcess, count: int) -> list[RawConnection]:
    """Connections that have outlived the handshake timeout (and still work)."""
    raws = [RawConnection(b.url).open() for _ in range(count)]
    deadline = time.monotonic() + 3 * HANDSHAKE_TIMEOUT
    wait_for(lambda: time.monotonic() > deadline, what="the connections to age")
    for raw in raws:  # a round trip each: the handshake timeout did not touch them
        raw.queue_declare("", exclusive=True)
    return raws


def _read_to_eof(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything up to the broker's FIN; a reset fails the test."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _handshake_timeouts(b: BrokerProcess) -> int:
    """How often the broker logged a handshake timeout so far."""
    return b.log_path.read_text(errors="replace").count("no handshake within")


def _forced_close_is_clean(raw: RawConnection, text: str) -> None:
    assert raw.expect_close() == (320, text, 0, 0)  # answers close-ok
    assert _read_to_eof(raw.sock) == b""
    raw.sock.close()


def test_admin_close_of_aged_connections_always_sends_320(quick: BrokerProcess) -> None:
    timeouts = _handshake_timeouts(quick)
    raws = _open_aged(quick, 12)
    assert quick.admin_url is not None
    with httpx.Client(base_url=quick.admin_url, auth=("guest", "guest"), timeout=10) as api:
        for raw in raws:
            assert api.delete(f"/api/connections/{_name(raw)}").status_code == 204
    for raw in raws:
        _forced_close_is_clean(raw, FORCED_TEXT)
    assert _handshake_timeouts(quick) == timeouts


def test_cli_close_of_an_aged_connection(quick: BrokerProcess) -> None:
    [raw] = _open_aged(quick, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMQPLITE_")}
    env["AMQPLITE_ADMIN_URL"] = str(quick.admin_url)
    out = subprocess.run(
        [sys.executable, "-m", "amqplite", "connections", "close", _name(raw)],
        env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    _forced_close_is_clean(raw, FORCED_TEXT)


def test_silent_client_gets_the_close_then_eof_not_a_reset(quick: BrokerProcess) -> None:
    """A client that never answers close-ok still reads why, then a clean EOF."""
    [raw] = _open_aged(quick, 1)
    assert quick.admin_url is not None
    httpx.delete(f"{quick.admin_url}/api/connections/{_name(raw)}", auth=("guest", "guest"),
                 timeout=10).raise_for_status()
    close = raw.read_method()
    assert (close.ids, close.close_reason()) == ((10, 50), (320, FORCED_TEXT))
    assert _read_to_eof(raw.sock) == b""  # after the close-ok wait, FIN
    raw.sock.close()


def test_sigterm_closes_aged_connections_with_320(tmp_path: Path) -> None:
    b = _start(tmp_path / "d")
    raws = _open_aged(b, 8)
    assert b.proc is not None
    b.proc.terminate()
    for raw in raws:
        _forced_close_is_clean(raw, SHUTDOWN_TEXT)
    assert b.proc.wait(30) == 0
    assert _handshake_timeouts(b) == 0


def test_handshake_timeout_still_drops_a_silent_client(quick: BrokerProcess) -> None:
    timeouts = _handshake_timeouts(quick)
    sock = socket.create_connection(("127.0.0.1", quick.port), timeout=10)
    started = time.monotonic()
    assert _read_to_eof(sock) == b""  # never sent the protocol header
    assert time.monotonic() - started < 5
    sock.close()
    wait_for(lambda: _handshake_timeouts(quick) == timeouts + 1, 5, what="the log line")


def test_after_our_close_and_close_ok_the_broker_lingers(quick: BrokerProcess) -> None:
    """Server-initiated close (540), close-ok, and the client's writer still flushing:
    the broker half-closes and drains, so the client sees EOF, never a reset."""
    raw = RawConnection(quick.url).open()
    queue = raw.queue_declare("", exclusive=True)
    raw.publish("", queue, b"x", immediate=True)
    assert raw.expect_close() == (540, "NOT_IMPLEMENTED - immediate=true", 60, 40)
    raw.send_raw(raw.publish_frames("", queue, BODY) * BURST)  # EPIPE/ECONNRESET would raise
    assert _read_to_eof(raw.sock) == b""
    raw.sock.close()


def test_close_then_burst_gets_close_ok_and_eof(quick: BrokerProcess) -> None:
    raw = RawConnection(quick.url).open()
    raw.send_raw(raw.close_frame() + raw.publish_frames("", "nowhere", BODY) * BURST)
    raw.expect((10, 51))
    assert _read_to_eof(raw.sock) == b""
    raw.sock.close()


def test_aio_pika_closing_twice(quick: BrokerProcess) -> None:
    async def main() -> None:
        async with asyncio.timeout(20):
            conn = await aio_pika.connect(quick.url)
            ch = await conn.channel()
            await ch.declare_queue("", exclusive=True)
            await conn.close()
            await conn.close()  # a second close is a no-op, not a hang or an error
            assert conn.is_closed
            robust = await aio_pika.connect_robust(quick.url)
            await robust.channel()
            await asyncio.gather(robust.close(), robust.close())
            assert robust.is_closed

    asyncio.run(main())
