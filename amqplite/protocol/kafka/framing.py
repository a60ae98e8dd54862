"""Size-prefixed framing and the request/response headers of Kafka's protocol.

Every Kafka message on the wire is ``int32 size`` then ``size`` bytes. The
:class:`FrameBuffer` takes bytes as they arrive and hands out whole frames; a
negative or oversized size raises :class:`FrameError` before any allocation,
and the shell closes the connection on it (Kafka's own broker does the same:
past ``socket.request.max.bytes`` the stream cannot be resynchronised).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from amqplite.protocol.kafka import primitives as p

#: Kafka's default ``socket.request.max.bytes`` (100 MiB)
DEFAULT_MAX_FRAME = 100 * 1024 * 1024
_HEAD = p.INT32
#: api_key, api_version, correlation_id
_REQ_HEAD = struct.Struct(">hhi")


class FrameError(p.CodecError):
    """A frame size the stream cannot carry: the connection must close."""


class FrameBuffer:
    """Incremental splitter of a byte stream into size-prefixed frames.

    Bytes are appended to one ``bytearray`` and consumed from a read position;
    the consumed prefix is dropped only when it outgrows the rest, so a burst of
    small requests costs one copy per frame, not one per read.
    """

    __slots__ = ("_buf", "_pos", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: Any) -> None:
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next whole frame (without its size prefix), or None until more bytes come."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        size = _HEAD.unpack_from(buf, pos)[0]
        if size < 0 or size > self.max_frame:
            raise FrameError(f"frame size {size} outside 0..{self.max_frame}")
        end = pos + 4 + size
        if end > len(buf):
            return None
        frame = bytes(buf[pos + 4:end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > len(buf) - end:
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return frame

    def frames(self) -> Iterator[bytes]:
        """Every whole frame buffered so far."""
        while (frame := self.next_frame()) is not None:
            yield frame

    @property
    def pending(self) -> int:
        """Bytes buffered but not yet handed out (a partial frame)."""
        return len(self._buf) - self._pos


class RequestHeader:
    """A request's header; ``client_id`` is None when the client sent a null one."""

    __slots__ = ("api_key", "api_version", "client_id", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")


def read_request_header(frame: Any, header_version: int) -> tuple[RequestHeader, int]:
    """The header (v0: no client id; v1; v2: v1 plus tagged fields) and where the body starts.

    The client id is a nullable *non-compact* string even in v2 (KIP-482 kept it so
    that a broker can always read it, whatever the API version).
    """
    with p.reading("request header"):
        key, version, corr = _REQ_HEAD.unpack_from(frame, 0)
        pos = 8
        client_id: str | None = None
        if header_version >= 1:
            client_id, pos = p.read_nullable_string(frame, pos)
        if header_version >= 2:
            pos = p.skip_tagged_fields(frame, pos)
    return RequestHeader(key, version, corr, client_id), pos


def peek_api(frame: Any) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)``: the part of every header version that
    comes first, read before the header version is known."""
    if len(frame) < 8:
        raise p.CodecError(f"frame of {len(frame)} bytes is shorter than a request header")
    key, version, corr = _REQ_HEAD.unpack_from(frame, 0)
    return key, version, corr


def request_header_bytes(header: RequestHeader, header_version: int) -> bytes:
    out = [_REQ_HEAD.pack(header.api_key, header.api_version, header.correlation_id)]
    if header_version >= 1:
        p.write_nullable_string(header.client_id, out)
    if header_version >= 2:
        out.append(p.EMPTY_TAGS)
    return b"".join(out)


def response_header_bytes(correlation_id: int, header_version: int) -> bytes:
    """Response header v0 (correlation id) or v1 (plus an empty tagged-field section)."""
    head = _HEAD.pack(correlation_id)
    return head + p.EMPTY_TAGS if header_version >= 1 else head


def read_response_header(frame: Any, header_version: int) -> tuple[int, int]:
    """``(correlation_id, body offset)`` of a response frame."""
    with p.reading("response header"):
        corr = _HEAD.unpack_from(frame, 0)[0]
        pos = 4
        if header_version >= 1:
            pos = p.skip_tagged_fields(frame, pos)
    return corr, pos


def frame(parts: list[bytes]) -> bytes:
    """Size-prefix and join a message's pieces into one buffer for the socket."""
    size = 0
    for part in parts:
        size += len(part)
    parts.insert(0, _HEAD.pack(size))
    return b"".join(parts)
