"""The server inside a trio nursery (pytest-trio): handshake bytes and graceful shutdown."""

from __future__ import annotations

import struct
from pathlib import Path

import trio

from amqplite.config import Settings
from amqplite.server.app import Server

HEADER = b"AMQP\x00\x00\x09\x01"


async def read_frame(stream: trio.SocketStream, buf: bytearray) -> tuple[int, int, bytes]:
    while len(buf) < 7 or len(buf) < 8 + struct.unpack(">I", buf[3:7])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "connection closed"
        buf += chunk
    ftype, ch, size = struct.unpack(">BHI", buf[:7])
    payload = bytes(buf[7 : 7 + size])
    assert buf[7 + size] == 0xCE
    del buf[: 8 + size]
    return ftype, ch, payload


def plain_start_ok() -> bytes:
    from amqplite.protocol.codec import encode_table

    resp = b"\x00guest\x00guest"
    return (
        struct.pack(">HH", 10, 11)
        + encode_table({"product": "test"})
        + b"\x05PLAIN"
        + struct.pack(">I", len(resp)) + resp
        + b"\x05en_US"
    )


def frame(ftype: int, ch: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", ftype, ch, len(payload)) + payload + b"\xce"


async def test_handshake_and_shutdown_with_320(tmp_path: Path) -> None:
    settings = Settings(host=["127.0.0.1"], port=0, data_dir=str(tmp_path))
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(settings).run)
        port = server.listen_ports[0]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        buf = bytearray()
        await stream.send_all(HEADER)
        ftype, ch, payload = await read_frame(stream, buf)
        assert (ftype, ch) == (1, 0) and payload[:4] == struct.pack(">HH", 10, 10)
        await stream.send_all(frame(1, 0, plain_start_ok()))
        _, _, tune = await read_frame(stream, buf)
        assert tune[:4] == struct.pack(">HH", 10, 30)
        channel_max, frame_max, _heartbeat = struct.unpack(">HIH", tune[4:12])
        await stream.send_all(frame(1, 0, struct.pack(">HHHIH", 10, 31, channel_max, frame_max, 0)))
        await stream.send_all(frame(1, 0, struct.pack(">HH", 10, 40) + b"\x01/" + b"\x00\x00"))
        _, _, open_ok = await read_frame(stream, buf)
        assert open_ok[:4] == struct.pack(">HH", 10, 41)
        server.stop()
        _, _, close = await read_frame(stream, buf)
        assert close[:4] == struct.pack(">HH", 10, 50)
        assert struct.unpack(">H", close[4:6])[0] == 320
        await stream.send_all(frame(1, 0, struct.pack(">HH", 10, 51)))
