"""A tiny blocking AMQP 0-9-1 client on a raw socket.

pika hides things the suite must check: exact field-table type tags, the
order of basic.return versus basic.ack, confirm delivery tags and the
`multiple` flag, `immediate=true`, and what a broker does with bytes that are
not AMQP at all. This client encodes every frame by hand with struct so those
checks do not depend on any AMQP library's codec.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"


def shortstr(value: str | bytes) -> bytes:
    """Encode an AMQP short string (length octet + bytes)."""
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">B", len(raw)) + raw


def longstr(value: str | bytes) -> bytes:
    """Encode an AMQP long string (length long + bytes)."""
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack(">I", len(raw)) + raw


def field_value(tag: bytes, value: Any) -> bytes:
    """Encode one field value with an explicit type tag (no guessing)."""
    fixed = {
        b"t": ">B", b"b": ">b", b"B": ">B", b"s": ">h", b"u": ">H",
        b"I": ">i", b"i": ">I", b"l": ">q", b"f": ">f", b"d": ">d", b"T": ">Q",
    }
    if tag in fixed:
        return tag + struct.pack(fixed[tag], value)
    if tag == b"D":
        scale, unscaled = value
        return tag + struct.pack(">Bi", scale, unscaled)
    if tag in (b"S", b"x"):
        return tag + longstr(value)
    if tag == b"V":
        return tag
    if tag == b"F":
        return tag + table(value)
    if tag == b"A":
        inner = b"".join(field_value(t, v) for t, v in value)
        return tag + struct.pack(">I", len(inner)) + inner
    raise ValueError(f"unsupported tag {tag!r}")


def table(entries: list[tuple[str, bytes, Any]] | dict[str, Any] | None = None) -> bytes:
    """Encode a field table from (name, tag, value) triples, or a simple dict.

    A dict only supports str (S), bool (t) and int (I/l) values: enough for
    arguments; tag-precise tests pass triples.
    """
    if entries is None:
        entries = []
    if isinstance(entries, dict):
        triples: list[tuple[str, bytes, Any]] = []
        for key, val in entries.items():
            if isinstance(val, bool):
                triples.append((key, b"t", int(val)))
            elif isinstance(val, int):
                triples.append((key, b"I" if -(2**31) <= val < 2**31 else b"l", val))
            else:
                triples.append((key, b"S", str(val)))
        entries = triples
    body = b"".join(shortstr(name) + field_value(tag, val) for name, tag, val in entries)
    return struct.pack(">I", len(body)) + body


class ServerClosed(Exception):
    """The broker sent connection.close or channel.close instead of a reply."""

    def __init__(self, kind: str, reply_code: int, reply_text: str) -> None:
        super().__init__(f"{kind} {reply_code} {reply_text}")
        self.kind = kind
        self.reply_code = reply_code
        self.reply_text = reply_text


@dataclass
class Method:
    """A received method frame: ids plus the raw argument bytes."""

    channel: int
    class_id: int
    method_id: int
    args: bytes

    @property
    def ids(self) -> tuple[int, int]:
        return (self.class_id, self.method_id)

    def close_reason(self) -> tuple[int, str]:
        """Reply code and text of a connection.close / channel.close."""
        code, tlen = struct.unpack_from(">HB", self.args, 0)
        return code, self.args[3 : 3 + tlen].decode()


@dataclass
class Message:
    """A message received by basic.get or basic.deliver, with raw properties."""

    method: Method
    properties: bytes  # property flags + property list, exactly as sent by the broker
    body: bytes = b""


@dataclass
class RawConnection:
    """A blocking connection with one channel (1) open after `open()`."""

    url: str
    timeout: float = 5.0
    sock: socket.socket = field(init=False)
    buffer: bytes = field(default=b"", init=False)
    frame_max: int = field(default=131072, init=False)

    def connect(self) -> None:
        parsed = urlparse(self.url)
        self.sock = socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or 5672), timeout=self.timeout
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def open(self, channel: bool = True, channel_max: int | None = None,
             capabilities: tuple[str, ...] = ()) -> RawConnection:
        """Run the whole handshake (PLAIN) and open channel 1.

        ``channel_max`` is what tune-ok asks for; by default the server's offer.
        ``capabilities``: more client capabilities to announce (true), such as
        ``consumer_cancel_notify``, without which RabbitMQ sends no basic.cancel.
        """
        parsed = urlparse(self.url)
        self.connect()
        self.sock.sendall(PROTOCOL_HEADER)
        self.expect((10, 10))
        user, password = unquote(parsed.username or "guest"), unquote(parsed.password or "guest")
        vhost = unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/"
        caps = table([("capabilities", b"F", [("authentication_failure_close", b"t", 1),
                                                ("basic.nack", b"t", 1),
                                                ("publisher_confirms", b"t", 1)]
                                    + [(name, b"t", 1) for name in capabilities])])
        self.send_method(0, 10, 11, caps + shortstr("PLAIN")
                         + longstr(f"\0{user}\0{password}") + shortstr("en_US"))
        tune = self.expect((10, 30))
        offered_channel_max, frame_max, _heartbeat = struct.unpack(">HIH", tune.args)
        self.frame_max = frame_max or 131072
        if channel_max is None:
            channel_max = offered_channel_max
        self.send_method(0, 10, 31, struct.pack(">HIH", channel_max, self.frame_max, 0))
        self.send_method(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00")
        self.expect((10, 41))
        if channel:
            self.send_method(1, 20, 10, shortstr(""))
            self.expect((20, 11), channel=1)
        return self

    def close(self) -> None:
        try:
            self.send_raw(self.close_frame())
            self.expect((10, 51))
        except (OSError, ConnectionError, AssertionError, ServerClosed):
            pass
        finally:
            self.sock.close()

    # -- frames -----------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    @staticmethod
    def frame(kind: int, channel: int, payload: bytes) -> bytes:
        return struct.pack(">BHI", kind, channel, len(payload)) + payload + FRAME_END

    @classmethod
    def method_frame(cls, channel: int, class_id: int, method_id: int, args: bytes) -> bytes:
        return cls.frame(FRAME_METHOD, channel, struct.pack(">HH", class_id, method_id) + args)

    @classmethod
    def close_frame(cls, reply_code: int = 200, reply_text: str = "bye") -> bytes:
        """connection.close from the client."""
        return cls.method_frame(0, 10, 50, struct.pack(">H", reply_code) + shortstr(reply_text)
                                + struct.pack(">HH", 0, 0))

    def send_method(self, channel: int, class_id: int, method_id: int, args: bytes) -> None:
        self.sock.sendall(self.method_frame(channel, class_id, method_id, args))

    def _read_exact(self, size: int, deadline: float) -> bytes:
        while len(self.buffer) < size:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by peer")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def read_frame(self, timeout: float | None = None) -> tuple[int, int, bytes]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        kind, channel, size = struct.unpack(">BHI", self._read_exact(7, deadline))
        payload = self._read_exact(size, deadline)
        end = self._read_exact(1, deadline)
        assert end == FRAME_END, f"bad frame end {end!r}"
        return kind, channel, payload

    def read_method(self, timeout: float | None = None) -> Method:
        while True:
            kind, channel, payload = self.read_frame(timeout)
            if kind == FRAME_HEARTBEAT:
                continue
            assert kind == FRAME_METHOD, f"expected a method frame, got type {kind}"
            class_id, method_id = struct.unpack_from(">HH", payload)
            return Method(channel, class_id, method_id, payload[4:])

    def expect(self, ids: tuple[int, int], channel: int = 0) -> Method:
        method = self.read_method()
        if method.ids != ids and method.ids in ((10, 50), (20, 40)):
            kind = "connection.close" if method.ids == (10, 50) else "channel.close"
            raise ServerClosed(kind, *method.close_reason())
        assert method.ids == ids, f"expected {ids}, got {method.ids}: {method.args!r}"
        assert method.channel == channel
        return method

    def expect_close(self, channel: int = 0) -> tuple[int, str, int, int]:
        """Read the broker's channel.close (channel > 0) or connection.close (0) and
        answer it with close-ok; returns (reply_code, reply_text, class_id, method_id)."""
        method = self.read_method()
        ids = (20, 40) if channel else (10, 50)
        assert (method.channel, method.ids) == (channel, ids), method
        code, text = method.close_reason()
        class_id, method_id = struct.unpack(">HH", method.args[-4:])
        self.send_method(channel, ids[0], ids[1] + 1, b"")
        return code, text, class_id, method_id

    def consume(self, queue: str, tag: str, channel: int = 1) -> None:
        """basic.consume (ack mode, no arguments) and wait for consume-ok."""
        self.send_method(channel, 60, 20, struct.pack(">H", 0) + shortstr(queue) + shortstr(tag)
                         + b"\x00" + table())
        self.expect((60, 21), channel=channel)

    def open_channel(self, number: int) -> None:
        self.send_method(number, 20, 10, shortstr(""))
        self.expect((20, 11), channel=number)

    def read_content(self, method: Method) -> Message:
        """Read the header (and body frames) that follow a content-bearing method."""
        kind, _, payload = self.read_frame()
        assert kind == FRAME_HEADER
        (size,) = struct.unpack_from(">Q", payload, 4)
        body = b""
        while len(body) < size:
            kind, _, chunk = self.read_frame()
            assert kind == FRAME_BODY
            body += chunk
        return Message(method, payload[12:], body)

    # -- methods ----------------------------------------------------------------

    def queue_declare(self, name: str, arguments: bytes | None = None,
                      exclusive: bool = False, auto_delete: bool = False) -> str:
        bits = (4 if exclusive else 0) | (8 if auto_delete else 0)
        self.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(name)
                         + struct.pack(">B", bits) + (arguments or table()))
        ok = self.expect((50, 11), channel=1)
        return ok.args[1 : 1 + ok.args[0]].decode()

    def publish(self, exchange: str, routing_key: str, body: bytes,
                properties: bytes = b"\x00\x00", mandatory: bool = False,
                immediate: bool = False) -> None:
        """Publish with pre-encoded properties (flags + list), in one write."""
        self.sock.sendall(self.publish_frames(exchange, routing_key, body, properties,
                                              mandatory, immediate))

    def publish_frames(self, exchange: str, routing_key: str, body: bytes,
                       properties: bytes = b"\x00\x00", mandatory: bool = False,
                       immediate: bool = False, channel: int = 1) -> bytes:
        """The frames of one basic.publish on ``channel``, to send later or in bulk."""
        bits = (1 if mandatory else 0) | (2 if immediate else 0)
        method = self.frame(FRAME_METHOD, channel, struct.pack(">HHH", 60, 40, 0)
                            + shortstr(exchange) + shortstr(routing_key) + struct.pack(">B", bits))
        header = self.frame(FRAME_HEADER, channel,
                            struct.pack(">HHQ", 60, 0, len(body)) + properties)
        frames = [method, header]
        step = self.frame_max - 8
        frames += [self.frame(FRAME_BODY, channel, body[i : i + step])
                   for i in range(0, len(body), step)]
        return b"".join(frames)

    def get(self, queue: str, no_ack: bool = True) -> Message | None:
        self.send_method(1, 60, 70, struct.pack(">H", 0) + shortstr(queue)
                         + struct.pack(">B", 1 if no_ack else 0))
        method = self.read_method()
        if method.ids in ((10, 50), (20, 40)):
            kind = "connection.close" if method.ids == (10, 50) else "channel.close"
            raise ServerClosed(kind, *method.close_reason())
        if method.ids == (60, 72):
            return None
        assert method.ids == (60, 71), method
        return self.read_content(method)

    def confirm_select(self) -> None:
        self.send_method(1, 85, 10, b"\x00")
        self.expect((85, 11), channel=1)


def headers_property(encoded_table: bytes) -> bytes:
    """Content properties carrying only `headers` (flag bit 13)."""
    return struct.pack(">H", 1 << 13) + encoded_table


def parse_ack(method: Method) -> tuple[int, bool]:
    """(delivery_tag, multiple) of a basic.ack or basic.nack."""
    tag, bits = struct.unpack_from(">QB", method.args)
    return tag, bool(bits & 1)


def parse_return(method: Method) -> tuple[int, str, str, str]:
    """(reply_code, reply_text, exchange, routing_key) of a basic.return."""
    code, tlen = struct.unpack_from(">HB", method.args)
    pos = 3
    text = method.args[pos : pos + tlen].decode()
    pos += tlen
    elen = method.args[pos]
    exchange = method.args[pos + 1 : pos + 1 + elen].decode()
    pos += 1 + elen
    rlen = method.args[pos]
    return code, text, exchange, method.args[pos + 1 : pos + 1 + rlen].decode()
