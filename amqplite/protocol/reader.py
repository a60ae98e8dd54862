"""Bytes to frames: framing, frame-level checks, method decoding, content assembly.

:class:`FrameReader` cuts the input into frames, enforces frame_max and the
end marker, decodes methods (basic.publish through a cache), assembles
basic.publish content from header and body frames, and answers frame-level
errors with RabbitMQ's codes and texts. What a method *means* -- handshake,
channel open/close, closing -- is up to ``ServerConnection``
(``protocol/connection.py``), which extends this class through three hooks
(``_on_channel0``, ``_on_channel_method``, ``_fail``). One object rather
than two because the publish fast path reads per-channel state on every
frame: a call across objects per frame would cost publish throughput.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, Final

from amqplite.protocol.errors import AMQPError, ChannelError, ConnectionError_, amqp_text, erl_binary
from amqplite.protocol.events import ConnectionState, ContentReceived
from amqplite.protocol.methods import BasicPublish, Method, decode_method
from amqplite.protocol.spec import FRAME_MIN_SIZE, FRAME_OVERHEAD, MAX_MSG_SIZE, ReplyCode

__all__ = [
    "CH_CLIENT_CLOSED",
    "CH_CLOSE_RECEIVED",
    "CH_CLOSING",
    "CH_OPEN",
    "CH_SENDABLE",
    "Channel",
    "FrameReader",
]

_FRAME_HEAD: Final = struct.Struct(">BHI")
_CONTENT_HEAD: Final = struct.Struct(">HHQ")
_PUBLISH_ID: Final = b"\x00\x3c\x00\x28"
_PUBLISH_CACHE_MAX: Final = 1024

_OPEN: Final = ConnectionState.OPEN
_CLOSING: Final = ConnectionState.CLOSING
_CLOSED: Final = ConnectionState.CLOSED

#: A connection error whose text is RabbitMQ's ``"CODE - detail"``.
_hard: Final = ConnectionError_.make

# Channel states: ServerConnection moves them; the reader only drops content
# frames for channels that are no longer open.
CH_OPEN: Final = 0
CH_CLIENT_CLOSED: Final = 1  # client sent channel.close; gone once ChannelClosed is handed out
CH_CLOSING: Final = 2  # we sent channel.close, waiting for close-ok
CH_CLOSE_RECEIVED: Final = 3  # closing, and the client's own channel.close crossed ours
CH_SENDABLE: Final = CH_CLIENT_CLOSED  # states <= this still accept the server's replies


class Channel:
    """Per-channel state plus the content assembler."""

    __slots__ = ("frags", "method", "props", "remaining", "state")

    def __init__(self) -> None:
        self.state = CH_OPEN
        self.method: BasicPublish | None = None  # publish awaiting its content
        self.props: bytes | None = None  # set once the header frame arrived
        self.remaining = 0
        self.frags: list[bytes] = []

    def reset(self) -> None:
        self.method = None
        self.props = None
        self.remaining = 0
        self.frags = []


def _snippet(payload: bytes) -> str:
    """The payload as RabbitMQ quotes it in frame errors (at most 16 octets)."""
    if len(payload) <= 16:
        return f"all octets = {erl_binary(payload)}"
    return f"first 16 octets = {erl_binary(payload[:16])}"


class FrameReader:
    """Frames in, methods and assembled content out (see the module docstring).

    ``_state`` is the subclass's parse state; ``_channels`` its open channels.
    Events go to ``_events`` in frame order.
    """

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size
        self._state = ConnectionState.AWAITING_HEADER
        self._events: deque[Any] = deque()
        self._channels: dict[int, Channel] = {}
        self._publish_cache: dict[bytes, BasicPublish] = {}
        self._in_frame_max = FRAME_MIN_SIZE  # RabbitMQ's initial_frame_max

    # -------------------------------------------------- the subclass's hooks

    def _on_channel0(self, method: Method) -> None:
        """A method on channel 0 (handshake and connection close)."""
        raise NotImplementedError

    def _on_channel_method(self, ch: int, chan: Channel | None, method: Method) -> None:
        """A method on channel ``ch`` of an open connection (``chan`` None: not open)."""
        raise NotImplementedError

    def _fail(self, err: AMQPError, channel: int, *, fatal: bool = False) -> None:
        """Answer an error raised while handling a frame of ``channel``."""
        raise NotImplementedError

    # ---------------------------------------------------------------- frames

    def _parse_frames(self, buf: bytes) -> int:
        """Handle every complete frame in ``buf``; returns the offset consumed.

        The loop inlines the publish path (cached basic.publish, content
        header, single body frame); anything unusual falls through to the
        general handlers, which do all the checking.
        """
        n = len(buf)
        pos = 0
        unpack = _FRAME_HEAD.unpack_from
        unpack_header = _CONTENT_HEAD.unpack_from
        channels = self._channels
        emit = self._events.append
        cache = self._publish_cache
        fmax = self._in_frame_max
        max_size = min(self.max_message_size, MAX_MSG_SIZE)
        is_open = self._state is _OPEN
        # struct's tuples are Any to mypy: typed ints here let the compiled loop do its
        # arithmetic and comparisons natively instead of through Python objects
        ftype: int
        ch: int
        size: int
        class_id: int
        weight: int
        body_size: int
        ht: int
        hch: int
        hsize: int
        bt: int
        bch: int
        bsize: int
        while n - pos >= 7:
            ftype, ch, size = unpack(buf, pos)
            if fmax and size > fmax:
                self._fail(
                    _hard(ReplyCode.FRAME_ERROR,
                          f"type {ftype}, all octets = <<>>: "
                          f"{{frame_too_large,{size},{fmax - FRAME_OVERHEAD}}}"),
                    ch, fatal=True,
                )
                return n
            start = pos + 7
            end = start + size
            if end >= n:
                break
            if buf[end] != 0xCE:
                self._fail(
                    _hard(ReplyCode.FRAME_ERROR,
                          f"type {ftype}, {_snippet(buf[start:end])}: "
                          f"{{invalid_frame_end_marker,{buf[end]}}}"),
                    ch, fatal=True,
                )
                return n
            pos = end + 1
            if is_open:
                chan = channels.get(ch)
                if chan is not None:
                    if ftype == 3:
                        props = chan.props
                        if props is not None and chan.remaining == size and not chan.frags:
                            emit(ContentReceived(ch, chan.method, props, buf[start:end]))  # type: ignore[arg-type]
                            chan.method = None
                            chan.props = None
                            chan.remaining = 0
                            continue
                    elif ftype == 2:
                        if chan.method is not None and chan.props is None and size >= 12:
                            class_id, weight, body_size = unpack_header(buf, start)
                            if class_id == 60 and not weight and 0 < body_size <= max_size:
                                chan.props = buf[start + 12 : end]
                                chan.remaining = body_size
                                continue
                    elif ftype == 1 and chan.method is None and chan.state == CH_OPEN:
                        publish = cache.get(buf[start:end])
                        if publish is not None:
                            # the whole publish (method, header, one body frame) is
                            # usually in the buffer: take it in one step when every
                            # check the frame-by-frame path makes passes, else go on
                            # frame by frame from the header
                            hpos = pos
                            if n - hpos >= 7:
                                ht, hch, hsize = unpack(buf, hpos)
                                hstart = hpos + 7
                                hend = hstart + hsize
                                if (ht == 2 and hch == ch and hsize >= 12 and hend + 7 < n
                                        and (not fmax or hsize <= fmax) and buf[hend] == 0xCE):
                                    class_id, weight, body_size = unpack_header(buf, hstart)
                                    bt, bch, bsize = unpack(buf, hend + 1)
                                    bstart = hend + 8
                                    bend = bstart + bsize
                                    if (class_id == 60 and not weight and bt == 3 and bch == ch
                                            and bsize == body_size and 0 < body_size <= max_size
                                            and (not fmax or bsize <= fmax) and bend < n
                                            and buf[bend] == 0xCE):
                                        emit(ContentReceived(ch, publish, buf[hstart + 12 : hend],
                                                             buf[bstart:bend]))
                                        pos = bend + 1
                                        continue
                            chan.method = publish
                            continue
            try:
                if ftype == 3:
                    self._on_body(ch, buf, start, end)
                elif ftype == 1:
                    self._on_method(ch, buf, start, end)
                elif ftype == 2:
                    self._on_header(ch, buf, start, end)
                elif ftype == 8:
                    self._on_heartbeat(ch, buf, start, end)
                else:
                    self._on_bad_frame(ftype, ch, buf[start:end], unknown=True)
            except AMQPError as err:
                self._fail(err, ch)
            state = self._state
            if state is _CLOSED:
                return pos  # the rest is discarded, or scanned for closes (peer_closed)
            is_open = state is _OPEN
            fmax = self._in_frame_max
        return pos

    def _on_bad_frame(self, ftype: int, ch: int, payload: bytes, *, unknown: bool) -> None:
        if self._state is _CLOSING:
            return
        if unknown:
            raise _hard(ReplyCode.FRAME_ERROR, f"type {ftype}, {_snippet(payload)}: unknown_frame")
        raise _hard(ReplyCode.UNEXPECTED_FRAME, f"type {ftype}, {_snippet(payload)}")

    def _on_heartbeat(self, ch: int, buf: bytes, start: int, end: int) -> None:
        if end != start:
            self._on_bad_frame(8, ch, buf[start:end], unknown=True)
        elif ch != 0:
            self._on_bad_frame(8, ch, b"", unknown=False)

    # ------------------------------------------------------------ methods

    def _on_method(self, ch: int, buf: bytes, start: int, end: int) -> None:
        state = self._state
        if ch == 0:
            if state is _CLOSING:
                try:
                    method = decode_method(buf, start, end)
                except AMQPError:
                    return
            else:
                method = decode_method(buf, start, end)
            self._on_channel0(method)
            return
        if state is not _OPEN:
            self._on_bad_frame(1, ch, buf[start:end], unknown=False)
            return
        chan = self._channels.get(ch)
        if (
            chan is not None
            and chan.state == CH_OPEN
            and chan.method is None
            and buf[start : start + 4] == _PUBLISH_ID
        ):
            # Publishers reuse a handful of exchange/routing-key pairs: decode once.
            key = buf[start:end]
            cache = self._publish_cache
            # Any, as the interpreter sees it: typed as the cache's value type, the
            # mypyc-compiled reader dropped every publish (issue 27)
            publish: Any = cache.get(key)
            if publish is None:
                publish = decode_method(buf, start, end)  # type: ignore[assignment]
                if len(cache) >= _PUBLISH_CACHE_MAX:
                    cache.clear()
                cache[key] = publish  # type: ignore[assignment]
            chan.method = publish
            return
        self._on_channel_method(ch, chan, decode_method(buf, start, end))

    # ------------------------------------------------------------ content

    def _on_header(self, ch: int, buf: bytes, start: int, end: int) -> None:
        if self._state is not _OPEN or ch == 0:
            self._on_bad_frame(2, ch, buf[start:end], unknown=False)
            return
        chan = self._channels.get(ch)
        if chan is not None and chan.state != CH_OPEN:
            return
        if chan is None or chan.method is None:
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected method frame, got non method frame instead")
        if chan.props is not None:
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected content body, got non content body frame instead", 60, 40)
        if end - start < 12:
            raise _hard(ReplyCode.FRAME_ERROR,
                        f"type 2, {_snippet(buf[start:end])}: unknown_frame")
        class_id, weight, body_size = _CONTENT_HEAD.unpack_from(buf, start)
        if weight != 0:
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected content header for class 60, "
                        "got non content header frame instead", 60, 40)
        if class_id != 60:
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        f"expected content header for class 60, got one for class {class_id} "
                        "instead", 60, 40)
        if body_size > MAX_MSG_SIZE:
            raise _hard(ReplyCode.FRAME_ERROR,
                        f"content body size {body_size} exceeds maximum allowed size "
                        f"{MAX_MSG_SIZE}", 60, 40)
        limit = self.max_message_size
        if body_size > limit:
            which = "max size" if limit == MAX_MSG_SIZE else "configured max size"
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED,
                amqp_text(ReplyCode.PRECONDITION_FAILED,
                          f"message size {body_size} is larger than {which} {limit}"),
                60, 40,
            )
        props = buf[start + 12 : end]
        if body_size == 0:
            method = chan.method
            chan.method = None
            self._events.append(ContentReceived(ch, method, props, b""))
            return
        chan.props = props
        chan.remaining = body_size

    def _on_body(self, ch: int, buf: bytes, start: int, end: int) -> None:
        chan = self._channels.get(ch)
        if chan is None or self._state is not _OPEN:
            if self._state is not _OPEN or ch == 0:
                self._on_bad_frame(3, ch, buf[start:end], unknown=False)
                return
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected method frame, got non method frame instead")
        if chan.props is None:
            if chan.state != CH_OPEN:
                return
            if chan.method is None:
                raise _hard(ReplyCode.UNEXPECTED_FRAME,
                            "expected method frame, got non method frame instead")
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected content header for class 60, "
                        "got non content header frame instead", 60, 40)
        size = end - start
        remaining = chan.remaining - size
        if remaining < 0:
            raise _hard(ReplyCode.FRAME_ERROR,
                        "content body frame exceeds remaining content size", 60, 40)
        if remaining:
            chan.remaining = remaining
            chan.frags.append(buf[start:end])
            return
        frags = chan.frags
        if frags:
            frags.append(buf[start:end])
            body = b"".join(frags)
            chan.frags = []
        else:
            body = buf[start:end]
        method = chan.method
        props = chan.props
        chan.method = None
        chan.props = None
        chan.remaining = 0
        self._events.append(ContentReceived(ch, method, props, body))  # type: ignore[arg-type]

