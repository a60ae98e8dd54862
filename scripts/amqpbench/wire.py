"""Hand-encoded AMQP 0-9-1 frames for the benchmark client.

Only what the benchmark needs, built with struct so the hot path is a few
byte concatenations per message (no general-purpose codec in the loop).
"""

from __future__ import annotations

import struct
from urllib.parse import unquote, urlparse

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
FRAME_HEAD = struct.Struct(">BHI")

# (class, method) ids used by the client
CONNECTION_START, CONNECTION_START_OK = (10, 10), (10, 11)
CONNECTION_TUNE, CONNECTION_TUNE_OK = (10, 30), (10, 31)
CONNECTION_OPEN, CONNECTION_OPEN_OK = (10, 40), (10, 41)
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)
CHANNEL_OPEN, CHANNEL_OPEN_OK = (20, 10), (20, 11)
CHANNEL_CLOSE, CHANNEL_CLOSE_OK = (20, 40), (20, 41)
EXCHANGE_DECLARE, EXCHANGE_DECLARE_OK = (40, 10), (40, 11)
EXCHANGE_DELETE, EXCHANGE_DELETE_OK = (40, 20), (40, 21)
QUEUE_DECLARE, QUEUE_DECLARE_OK = (50, 10), (50, 11)
QUEUE_BIND, QUEUE_BIND_OK = (50, 20), (50, 21)
QUEUE_DELETE, QUEUE_DELETE_OK = (50, 40), (50, 41)
BASIC_QOS, BASIC_QOS_OK = (60, 10), (60, 11)
BASIC_CONSUME, BASIC_CONSUME_OK = (60, 20), (60, 21)
BASIC_PUBLISH, BASIC_DELIVER = (60, 40), (60, 60)
BASIC_ACK, BASIC_NACK = (60, 80), (60, 120)
CONFIRM_SELECT, CONFIRM_SELECT_OK = (85, 10), (85, 11)


def shortstr(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">B", len(raw)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


def table(entries: dict[str, str | bool | int] | None = None) -> bytes:
    """A field table of strings, booleans and 32-bit ints (all the client sends)."""
    body = b""
    for key, value in (entries or {}).items():
        if isinstance(value, bool):
            body += shortstr(key) + b"t" + struct.pack(">B", value)
        elif isinstance(value, int):
            body += shortstr(key) + b"I" + struct.pack(">i", value)
        else:
            body += shortstr(key) + b"S" + longstr(value)
    return struct.pack(">I", len(body)) + body


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEAD.pack(kind, channel, len(payload)) + payload + FRAME_END


def method(channel: int, ids: tuple[int, int], args: bytes = b"") -> bytes:
    return frame(FRAME_METHOD, channel, struct.pack(">HH", *ids) + args)


def content_header(channel: int, body_size: int, delivery_mode: int) -> bytes:
    """A header frame whose only property is delivery-mode (flag bit 12)."""
    payload = struct.pack(">HHQHB", 60, 0, body_size, 1 << 12, delivery_mode)
    return frame(FRAME_HEADER, channel, payload)


def body_around_stamp(channel: int, size: int, frame_max: int) -> tuple[bytes, bytes]:
    """Body frames of ``size`` bytes split to ``frame_max``, as the bytes before and
    after the body's first 8 octets (the send timestamp, packed per message)."""
    chunk = frame_max - 8
    first = min(size, chunk)
    rest = b"".join(frame(FRAME_BODY, channel, bytes(min(chunk, size - at)))
                    for at in range(first, size, chunk))
    return FRAME_HEAD.pack(FRAME_BODY, channel, first), bytes(first - 8) + FRAME_END + rest


def ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return method(channel, BASIC_ACK, struct.pack(">QB", delivery_tag, 1 if multiple else 0))


class Url:
    """host, port, credentials and vhost of an amqp:// URL."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 5672
        self.user = unquote(parsed.username or "guest")
        self.password = unquote(parsed.password or "guest")
        self.vhost = unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/"
