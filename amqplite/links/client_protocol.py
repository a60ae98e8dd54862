"""The client side of AMQP 0-9-1, sans-I/O: bytes in, events out, bytes to send.

A link's remote end is an AMQP client connection. aio-pika and aiormq are
asyncio-only and pika's async adapters are asyncio/tornado/twisted, while
links run as trio tasks in the broker's root nursery; so links speak AMQP
through this small state machine over ``protocol/``'s own codec (the same
method classes and property encoder the server uses), and ``client.py``
drives it with a trio stream. It handles what a shovel needs: the
connection handshake (PLAIN), frames, content assembly; the channel methods
themselves are plain ``protocol.methods`` objects.
"""

from __future__ import annotations

import struct

import attrs

from amqplite import __version__
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.frames import HEARTBEAT_FRAME, encode_content, encode_frame
from amqplite.protocol.methods import (
    BasicDeliver,
    BasicGetOk,
    BasicReturn,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
    decode_method,
    encode_method,
)
from amqplite.protocol.spec import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    PROTOCOL_HEADER,
)

_HEAD = struct.Struct(">BHI")
_CONTENT = struct.Struct(">HHQ")
_CONTENT_METHODS = (BasicDeliver, BasicGetOk, BasicReturn)


class ProtocolFailure(Exception):
    """The peer broke the protocol, refused us, or closed the connection."""


class PeerClosed(ProtocolFailure):
    """The peer sent connection.close: its reply code and text (the message is both)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code} {text}")
        self.code, self.text = code, text


@attrs.frozen
class MethodIn:
    """A method without content on ``channel``."""

    channel: int
    method: Method


@attrs.frozen
class ContentIn:
    """A method with its content (basic.deliver, basic.return, basic.get-ok)."""

    channel: int
    method: Method
    properties: bytes
    body: bytes


@attrs.frozen
class Opened:
    """The handshake is done: the connection is usable."""

    frame_max: int
    heartbeat: int


Event = MethodIn | ContentIn | Opened


class ClientProtocol:
    """One client connection's protocol state; ``data_to_send`` after each call."""

    def __init__(self, user: str, password: str, vhost: str, *, heartbeat: int = 60,
                 name: str = "amqplite link") -> None:
        self._user, self._password, self._vhost = user, password, vhost
        self._want_heartbeat = heartbeat
        self._name = name
        self._buf = bytearray()
        self._out = bytearray(PROTOCOL_HEADER)
        self.frame_max = 131072
        self.heartbeat = 0
        self.open = False
        #: how far the handshake got: ``header`` (protocol header sent), ``login``
        #: (start-ok sent), ``vhost`` (connection.open sent), ``open``; what a failure
        #: during the handshake means depends on it (a close after start-ok is a
        #: refused login, after connection.open a refused vhost)
        self.stage = "header"
        #: what the server announced in connection.start (its ``cluster_name``...)
        self.server_properties: dict[str, object] = {}
        #: channel -> (method, properties, expected size, body parts) while content arrives
        self._content: dict[int, tuple[Method, bytes, int, list[bytes]]] = {}

    # ----------------------------------------------------------------- output
    def data_to_send(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def send(self, channel: int, method: Method) -> None:
        self._out += encode_frame(FRAME_METHOD, channel, encode_method(method))

    def publish(self, channel: int, method: Method, properties: bytes, body: bytes) -> None:
        self._out += encode_content(channel, encode_method(method), 60, properties, body,
                                    self.frame_max)

    def heartbeat_frame(self) -> None:
        self._out += HEARTBEAT_FRAME

    # ------------------------------------------------------------------ input
    def feed(self, data: bytes | bytearray) -> list[Event]:
        """Events of the bytes received; ProtocolFailure when the peer ends things."""
        # one copy of what is buffered, walked by offset, and one trim at the end: a
        # copy and a trim per frame cost a link a third of its reading time
        if self._buf:
            self._buf += data
            view = bytes(self._buf)
        else:
            view = bytes(data)
        events: list[Event] = []
        pos, n = 0, len(view)
        try:
            while n - pos >= 7:
                if not self.open and view[pos:pos + 4] == b"AMQP":  # a version it prefers
                    raise ProtocolFailure(
                        f"the server refused AMQP 0-9-1 (answered {view[pos:pos + 8]!r})")
                kind, channel, size = _HEAD.unpack_from(view, pos)
                end = pos + 7 + size
                if end >= n:
                    break
                if view[end] != FRAME_END:
                    raise ProtocolFailure("frame without frame-end")
                payload = view[pos + 7:end]
                pos = end + 1
                ev = self._frame(kind, channel, payload)
                if ev is not None:
                    events.append(ev)
        finally:
            self._buf = bytearray(view[pos:])
        return events

    def _frame(self, kind: int, channel: int, payload: bytes) -> Event | None:
        if kind == FRAME_HEARTBEAT:
            return None
        if kind == FRAME_METHOD:
            method = decode_method(payload)
            if channel == 0:
                return self._connection_method(method)
            if isinstance(method, _CONTENT_METHODS):
                self._content[channel] = (method, b"", -1, [])
                return None
            return MethodIn(channel, method)
        pending = self._content.get(channel)
        if pending is None:
            raise ProtocolFailure(f"content frame on channel {channel} without a method")
        method, props, size, parts = pending
        if kind == FRAME_HEADER:
            _, _, size = _CONTENT.unpack_from(payload)
            props = payload[12:]
            parts = []
        elif kind == FRAME_BODY:
            if not parts and len(payload) >= size >= 0:  # the usual one-frame body
                del self._content[channel]
                return ContentIn(channel, method, props, payload)
            parts.append(payload)
        else:
            raise ProtocolFailure(f"unknown frame type {kind}")
        if size >= 0 and sum(len(p) for p in parts) >= size:
            del self._content[channel]
            return ContentIn(channel, method, props, b"".join(parts))
        self._content[channel] = (method, props, size, parts)
        return None

    def _connection_method(self, method: Method) -> Event | None:
        if isinstance(method, ConnectionStart):
            if b"PLAIN" not in str(method.mechanisms).encode().split():
                raise ProtocolFailure(f"the server offers no PLAIN login ({method.mechanisms})")
            self.server_properties = dict(method.server_properties or {})
            props = FieldTable({"product": "amqplite", "version": __version__,
                                "connection_name": self._name,
                                "capabilities": FieldTable({
                                    "publisher_confirms": True, "consumer_cancel_notify": True,
                                    "basic.nack": True, "connection.blocked": True,
                                    "authentication_failure_close": True})})
            response = b"\0" + self._user.encode() + b"\0" + self._password.encode()
            self.send(0, ConnectionStartOk(props, "PLAIN", response, "en_US"))
            self.stage = "login"
        elif isinstance(method, ConnectionTune):
            if method.frame_max:
                self.frame_max = min(self.frame_max, method.frame_max)
            hb = self._want_heartbeat
            self.heartbeat = min(hb, method.heartbeat) if hb and method.heartbeat else (
                hb or method.heartbeat)
            self.send(0, ConnectionTuneOk(method.channel_max or 2047, self.frame_max,
                                          self.heartbeat))
            self.send(0, ConnectionOpen(self._vhost))
            self.stage = "vhost"
        elif isinstance(method, ConnectionOpenOk):
            self.open, self.stage = True, "open"
            return Opened(self.frame_max, self.heartbeat)
        elif isinstance(method, ConnectionClose):
            self.send(0, ConnectionCloseOk())
            self.open = False
            raise PeerClosed(method.reply_code, str(method.reply_text))
        elif isinstance(method, ConnectionCloseOk):
            self.open = False
            raise ProtocolFailure("connection closed")
        else:
            return MethodIn(0, method)
        return None
