"""Sans-I/O AMQP 0-9-1 server connection: bytes in, events out, bytes out.

The object does everything that does not need the broker: protocol header,
SASL (PLAIN, AMQPLAIN), tuning, channel open/close bookkeeping, content
assembly and every frame-level check, answering errors with the reply codes
and texts RabbitMQ 3.x uses (``rabbit_reader``, ``rabbit_command_assembler``,
``rabbit_channel``). The server feeds ``receive_data``, then drains
``next_event()`` until it returns None, and writes ``data_to_send()``.

Ordering rule: replies the connection makes on its own while parsing
(channel.open-ok, channel.close-ok, connection.close-ok, error closes) are
released in event order -- the bytes go out when ``next_event()`` reaches
that point. So a channel.close-ok can never overtake the server's answer to
a queue.declare the client sent before channel.close in the same packet.
Sends from the server (``send_*``, ``close*``) are written at once; sends to
a channel that is not open (closing, closed, never opened) are dropped and
return False, so late deliveries never reach a channel after its close-ok.
State that limits sending (``state``, open channels) changes when the
matching event is handed out, so the server can still answer every method
that arrived before a close. Drive it as: ``receive_data(chunk)``, then
handle ``next_event()`` until None, then ``data_to_send()``; call
``receive_data`` again only after the previous events were handled.
"""

from __future__ import annotations

import enum
import struct
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from amqplite import __version__
from amqplite.protocol import frames as _frames
from amqplite.protocol.codec import FieldTable, decode_table
from amqplite.protocol.errors import AMQPError, ChannelError, ConnectionError_, amqp_text
from amqplite.protocol.methods import (
    CLIENT_CHANNEL_METHODS,
    BasicPublish,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    Method,
    decode_method,
    encode_method,
)
from amqplite.protocol.properties import printable
from amqplite.protocol.spec import (
    FRAME_MIN_SIZE,
    FRAME_OVERHEAD,
    MAX_MSG_SIZE,
    PROTOCOL_HEADER,
    ReplyCode,
    is_soft_error,
)

__all__ = [
    "ChannelClosed",
    "ChannelOpened",
    "ConnectionClosed",
    "ConnectionClosing",
    "ConnectionOpened",
    "ConnectionState",
    "ContentReceived",
    "Event",
    "MethodReceived",
    "ServerConnection",
    "default_server_properties",
]

_FRAME_HEAD = struct.Struct(">BHI")
_CONTENT_HEAD = struct.Struct(">HHQ")
_I = struct.Struct(">I")
_PUBLISH_ID = b"\x00\x3c\x00\x28"
_PUBLISH_CACHE_MAX = 1024
_PROTOCOL_HEADER_0_9 = b"AMQP\x01\x01\x00\x09"


# ------------------------------------------------------------------ events


@attrs.define(slots=True)
class ConnectionOpened:
    """connection.open accepted (open-ok sent); channels may now be opened."""

    vhost: str
    username: str
    client_properties: FieldTable


@attrs.define(slots=True)
class ChannelOpened:
    """The client opened ``channel``; channel.open-ok goes out with this event."""

    channel: int


@attrs.define(slots=True)
class ChannelClosed:
    """``channel`` is gone: the client closed it (close-ok goes out with this
    event; reply_code/text are the client's) or it acknowledged our close."""

    channel: int
    reply_code: int = 200
    reply_text: str = ""


@attrs.define(slots=True)
class MethodReceived:
    """A method for the broker (queue/exchange/basic/confirm/tx/channel.flow,
    or connection.update-secret on channel 0)."""

    channel: int
    method: Method


@attrs.define(slots=True)
class ContentReceived:
    """A complete basic.publish: method, raw property bytes and the body."""

    channel: int
    method: BasicPublish
    properties_raw: bytes
    body: bytes


@attrs.define(slots=True)
class ConnectionClosing:
    """We sent connection.close; wait briefly for close-ok, then drop the socket."""

    reply_code: int
    reply_text: str


@attrs.define(slots=True)
class ConnectionClosed:
    """The connection is over: flush ``data_to_send()`` and close the socket."""

    reply_code: int
    reply_text: str


Event = (
    ConnectionOpened
    | ChannelOpened
    | ChannelClosed
    | MethodReceived
    | ContentReceived
    | ConnectionClosing
    | ConnectionClosed
)


class ConnectionState(enum.Enum):
    AWAITING_HEADER = "awaiting_header"
    STARTING = "starting"
    TUNING = "tuning"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_AWAITING_HEADER = ConnectionState.AWAITING_HEADER
_STARTING = ConnectionState.STARTING
_TUNING = ConnectionState.TUNING
_OPENING = ConnectionState.OPENING
_OPEN = ConnectionState.OPEN
_CLOSING = ConnectionState.CLOSING
_CLOSED = ConnectionState.CLOSED

_CH_OPEN = 0
_CH_CLIENT_CLOSED = 1  # client sent channel.close; gone once ChannelClosed is handed out
_CH_CLOSING = 2  # we sent channel.close, waiting for close-ok
_CH_CLOSE_RECEIVED = 3  # closing, and the client's own channel.close crossed ours
_CH_SENDABLE = _CH_CLIENT_CLOSED  # states <= this still accept the server's replies


_TRANSITIONS = frozenset({ChannelClosed, ConnectionOpened, ConnectionClosing, ConnectionClosed})
_CLOSES = frozenset({ChannelClosed, ConnectionClosing, ConnectionClosed})


class _Channel:
    """Per-channel state plus the content assembler."""

    __slots__ = ("frags", "method", "props", "remaining", "state")

    def __init__(self) -> None:
        self.state = _CH_OPEN
        self.method: BasicPublish | None = None  # publish awaiting its content
        self.props: bytes | None = None  # set once the header frame arrived
        self.remaining = 0
        self.frags: list[bytes] = []

    def reset(self) -> None:
        self.method = None
        self.props = None
        self.remaining = 0
        self.frags = []


#: Exactly the RabbitMQ capabilities amqplite implements. Clients look features
#: up by name, so one that is missing here is left out, not announced as false.
CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "per_consumer_qos",
    "authentication_failure_close",
    "direct_reply_to",
)


def default_server_properties() -> dict[str, Any]:
    """What we announce in connection.start (RabbitMQ's capability names)."""
    return {
        "product": "amqplite",
        "version": __version__,
        "platform": f"Python {sys.version.split()[0]}",
        "copyright": "amqplite contributors",
        "information": "Licensed under the MIT license",
        "capabilities": dict.fromkeys(CAPABILITIES, True),
    }


def _erl_binary(data: bytes) -> str:
    """Render bytes the way Erlang's ~tp prints a binary (for RabbitMQ-shaped texts)."""
    if data and all(32 <= b < 127 for b in data):
        text = data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


def _snippet(payload: bytes) -> str:
    if len(payload) <= 16:
        return f"all octets = {_erl_binary(payload)}"
    return f"first 16 octets = {_erl_binary(payload[:16])}"


def _truncate_shortstr(text: str) -> str:
    """Reply texts over 255 bytes: RabbitMQ keeps 252 and appends '...'.

    Text that is not UTF-8 (a property echoed in an error) is escaped first,
    so an error reply can always be sent.
    """
    text = printable(text)
    raw = text.encode()
    if len(raw) <= 255:
        return text
    return raw[:252].decode("utf-8", "ignore") + "..."


def _hard(code: int, detail: str, class_id: int = 0, method_id: int = 0) -> ConnectionError_:
    return ConnectionError_(code, amqp_text(code, detail), class_id, method_id)


class ServerConnection:
    """The server side of one AMQP 0-9-1 connection (no I/O, no clocks).

    ``authenticate(username, password) -> bool`` checks credentials;
    ``check_vhost(username, vhost) -> bool`` grants the vhost (False answers
    530 "vhost X not found"; raise an :class:`AMQPError` for another text).
    ``channel_max``/``frame_max``/``heartbeat`` are offered in connection.tune.
    """

    def __init__(
        self,
        *,
        authenticate: Callable[[str, str], bool],
        check_vhost: Callable[[str, str], bool],
        server_properties: Mapping[str, Any] | None = None,
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int = 60,
        max_message_size: int = 128 * 1024 * 1024,
        mechanisms: tuple[str, ...] = ("PLAIN", "AMQPLAIN"),
    ) -> None:
        props = dict(default_server_properties())
        if server_properties:
            props.update(server_properties)
        self._server_properties = props
        self._authenticate = authenticate
        self._check_vhost = check_vhost
        self._offer_channel_max = channel_max
        self._offer_frame_max = frame_max
        self._offer_heartbeat = heartbeat
        self.max_message_size = max_message_size
        self._mechanisms = mechanisms

        # Two views of the state: _state follows the bytes parsed so far; _tx_state
        # follows the events handed out, and decides what the server may still send
        # (replies to methods that arrived before a close must still go out).
        self._state = _AWAITING_HEADER
        self._tx_state = _AWAITING_HEADER
        self._pending = b""
        self._out = bytearray()
        self._events: deque[Any] = deque()
        self._channels: dict[int, _Channel] = {}
        self._publish_cache: dict[bytes, BasicPublish] = {}

        self._in_frame_max = FRAME_MIN_SIZE  # RabbitMQ's initial_frame_max
        self._frame_max = FRAME_MIN_SIZE
        self._channel_max = 0
        self._heartbeat = 0
        self._username: str | None = None
        self._vhost: str | None = None
        self._client_properties: FieldTable = FieldTable()
        self._mechanism = ""
        self._close_code = 0
        self._close_text = ""

    # ---------------------------------------------------------- properties

    @property
    def state(self) -> ConnectionState:
        """State as of the last event handed out by next_event()."""
        return self._tx_state

    @property
    def username(self) -> str | None:
        return self._username

    @property
    def vhost(self) -> str | None:
        return self._vhost

    @property
    def client_properties(self) -> FieldTable:
        return self._client_properties

    @property
    def client_capabilities(self) -> Mapping[str, Any]:
        caps = self._client_properties.get("capabilities")
        return caps if isinstance(caps, Mapping) else {}

    @property
    def heartbeat(self) -> int:
        """Negotiated heartbeat in seconds (0 = off): the client's tune-ok value."""
        return self._heartbeat

    @property
    def frame_max(self) -> int:
        return self._frame_max

    @property
    def channel_max(self) -> int:
        return self._channel_max

    @property
    def open_channels(self) -> frozenset[int]:
        return frozenset(n for n, c in self._channels.items() if c.state == _CH_OPEN)

    @property
    def close_reason(self) -> tuple[int, str]:
        """(reply_code, reply_text) of the close in progress or done, else (0, "")."""
        return self._close_code, self._close_text

    # ------------------------------------------------------------- output

    def pending_bytes(self) -> int:
        """Bytes queued for the socket and not yet taken by data_to_send()."""
        return len(self._out)

    def data_to_send(self) -> bytes:
        """Drain and return everything queued for the socket."""
        if not self._out:
            return b""
        data = bytes(self._out)
        self._out.clear()
        return data

    def next_event(self) -> Event | None:
        """The next event, or None. Also releases protocol replies in order."""
        events = self._events
        while events:
            item = events.popleft()
            kind = type(item)
            if kind is bytes:
                self._out += item
                continue
            if kind in _TRANSITIONS:
                self._apply(item)
            return item  # type: ignore[no-any-return]
        return None

    def _apply(self, event: Any) -> None:
        """State changes that take effect when the server sees the event."""
        kind = type(event)
        if kind is ChannelClosed:
            chan = self._channels.get(event.channel)
            if chan is not None and chan.state == _CH_CLIENT_CLOSED:
                del self._channels[event.channel]
        elif kind is ConnectionOpened:
            if self._tx_state is not _CLOSING and self._tx_state is not _CLOSED:
                self._tx_state = _OPEN
        elif kind is ConnectionClosing:
            if self._tx_state is not _CLOSED:
                self._tx_state = _CLOSING
            self._channels.clear()
        else:  # ConnectionClosed
            self._tx_state = _CLOSED
            self._channels.clear()

    def close_pending(self) -> bool:
        """True when the next event closes a channel or the connection.

        Sends after that event are dropped, so the server carries out what it
        still owes for earlier frames (a basic.return, a confirm) first, as
        RabbitMQ answers them before channel.close-ok / connection.close-ok.
        """
        for item in self._events:
            if type(item) is not bytes:
                return type(item) in _CLOSES
        return False

    def events(self) -> Iterator[Event]:
        """Drain all pending events."""
        while (event := self.next_event()) is not None:
            yield event

    def _write_ordered(self, data: bytes) -> None:
        """Write now if no event is pending, else when next_event reaches this point."""
        if self._events:
            self._events.append(data)
        else:
            self._out += data

    def _method_frame(self, channel: int, method: Method) -> bytes:
        return _frames.encode_frame(1, channel, encode_method(method))

    def _can_send(self, channel: int) -> bool:
        if self._tx_state is not _OPEN:
            return False
        if channel == 0:
            return True
        chan = self._channels.get(channel)
        return chan is not None and chan.state <= _CH_SENDABLE

    def send_method(self, channel: int, method: Method) -> bool:
        """Queue a method frame; False (and nothing sent) if the channel is not open."""
        if not self._can_send(channel):
            return False
        _frames.write_frame(self._out, 1, channel, encode_method(method))
        return True

    def send_content(
        self, channel: int, method: Method, properties_raw: bytes, body: bytes
    ) -> bool:
        """Queue a content-bearing method with header and body frames."""
        if not self._can_send(channel):
            return False
        _frames.write_content(
            self._out, channel, encode_method(method), method.CLASS_ID, properties_raw, body,
            self._frame_max,
        )
        return True

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str | bytes,
        delivery_tag: int,
        redelivered: bool,
        exchange: str | bytes,
        routing_key: str | bytes,
        properties_raw: bytes,
        body: bytes,
    ) -> bool:
        """Fast path for basic.deliver + content; False if the channel is not open."""
        if self._tx_state is not _OPEN:
            return False
        chan = self._channels.get(channel)
        if chan is None or chan.state > _CH_SENDABLE:
            return False
        _frames.write_deliver(
            self._out, channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
            properties_raw, body, self._frame_max,
        )
        return True

    def send_get_ok(
        self,
        channel: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str | bytes,
        routing_key: str | bytes,
        message_count: int,
        properties_raw: bytes,
        body: bytes,
    ) -> bool:
        """Fast path for basic.get-ok + content."""
        if not self._can_send(channel) or channel == 0:
            return False
        _frames.write_get_ok(
            self._out, channel, delivery_tag, redelivered, exchange, routing_key, message_count,
            properties_raw, body, self._frame_max,
        )
        return True

    def send_return(
        self,
        channel: int,
        reply_code: int,
        reply_text: str,
        exchange: str | bytes,
        routing_key: str | bytes,
        properties_raw: bytes,
        body: bytes,
    ) -> bool:
        """Fast path for basic.return + content."""
        if not self._can_send(channel) or channel == 0:
            return False
        _frames.write_return(
            self._out, channel, reply_code, _truncate_shortstr(reply_text), exchange, routing_key,
            properties_raw, body, self._frame_max,
        )
        return True

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame (the server's timer decides when)."""
        if self._tx_state is not _CLOSED and self._tx_state is not _AWAITING_HEADER:
            self._out += _frames.HEARTBEAT_FRAME

    def close_channel(
        self, channel: int, reply_code: int, reply_text: str, class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        """Soft error: send channel.close; until close-ok arrives every frame on the
        channel except channel.close/close-ok is dropped. ChannelClosed follows."""
        self._close_channel(channel, reply_code, reply_text, class_id, method_id, ordered=False)

    def _close_channel(
        self, channel: int, reply_code: int, reply_text: str, class_id: int, method_id: int,
        *, ordered: bool,
    ) -> None:
        chan = self._channels.get(channel)
        if self._state is not _OPEN or chan is None or chan.state != _CH_OPEN:
            return
        chan.state = _CH_CLOSING
        chan.reset()
        frame = self._method_frame(
            channel,
            ChannelClose(reply_code, _truncate_shortstr(reply_text), class_id, method_id),
        )
        if ordered:
            self._write_ordered(frame)
        else:
            self._out += frame

    def close(
        self, reply_code: int, reply_text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        """Hard error or forced shutdown (320): send connection.close and then ignore
        everything but close/close-ok. Emits ConnectionClosing."""
        self._close(reply_code, reply_text, class_id, method_id, ordered=False)

    def send_error(self, channel: int, error: AMQPError) -> None:
        """Answer a broker error: soft codes close ``channel``, hard ones the connection."""
        if channel and is_soft_error(error.reply_code) and not isinstance(error, ConnectionError_):
            self.close_channel(channel, error.reply_code, error.reply_text, error.class_id,
                               error.method_id)
        else:
            self.close(error.reply_code, error.reply_text, error.class_id, error.method_id)

    def _close(
        self, reply_code: int, reply_text: str, class_id: int, method_id: int, *, ordered: bool
    ) -> None:
        if self._state is _CLOSING or self._state is _CLOSED:
            return
        if self._state is _AWAITING_HEADER:
            self._finish(reply_code, reply_text)
            return
        self._send_close(reply_code, reply_text, class_id, method_id, ordered=ordered)
        self._state = _CLOSING
        if not ordered:  # the server asked: stop sending now
            self._tx_state = _CLOSING
            self._channels.clear()
        self._events.append(ConnectionClosing(reply_code, self._close_text))

    def _send_close(
        self, reply_code: int, reply_text: str, class_id: int, method_id: int, *, ordered: bool
    ) -> None:
        text = _truncate_shortstr(reply_text)
        self._close_code = reply_code
        self._close_text = text
        frame = self._method_frame(0, ConnectionClose(reply_code, text, class_id, method_id))
        if ordered:
            self._write_ordered(frame)
        else:
            self._out += frame

    def _finish(self, reply_code: int, reply_text: str) -> None:
        """Enter CLOSED and tell the server to drop the socket."""
        self._state = _CLOSED
        self._close_code = reply_code
        self._close_text = reply_text
        self._pending = b""
        self._events.append(ConnectionClosed(reply_code, reply_text))

    def _fail(self, err: AMQPError, channel: int, *, fatal: bool = False) -> None:
        """Answer a protocol error the way rabbit_reader:handle_exception does."""
        state = self._state
        if state is _CLOSED:
            return
        if state is _CLOSING:
            if fatal:
                self._finish(self._close_code, self._close_text)
            return
        if (
            state is _OPEN
            and channel
            and not fatal
            and is_soft_error(err.reply_code)
            and not isinstance(err, ConnectionError_)
        ):
            self._close_channel(channel, err.reply_code, err.reply_text, err.class_id,
                                err.method_id, ordered=True)
            return
        if (
            state is _OPEN
            or state is _OPENING
            or (state is _TUNING and err.reply_code == ReplyCode.NOT_ALLOWED)
        ):
            if fatal:
                self._send_close(err.reply_code, err.reply_text, err.class_id, err.method_id,
                                 ordered=True)
                self._finish(err.reply_code, self._close_text)
            else:
                self._close(err.reply_code, err.reply_text, err.class_id, err.method_id,
                            ordered=True)
            return
        # During the handshake RabbitMQ drops the socket without a close.
        self._finish(err.reply_code, err.reply_text)

    # -------------------------------------------------------------- input

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes from the socket. Never raises; errors become closes + events."""
        if self._state is _CLOSED or not data:
            return
        try:
            buf = self._pending + data if self._pending else bytes(data)
            self._pending = b""
            if self._state is _AWAITING_HEADER:
                if len(buf) < 8:
                    self._pending = buf
                    return
                self._on_protocol_header(buf[:8])
                if self._state is _CLOSED:
                    return
                buf = buf[8:]
            pos = self._parse_frames(buf)
            if self._state is not _CLOSED and pos < len(buf):
                self._pending = buf[pos:]
        except Exception as exc:  # a bug here must not take the server down
            err = _hard(ReplyCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            if self._state is _OPEN or self._state is _OPENING:
                self._send_close(err.reply_code, err.reply_text, 0, 0, ordered=True)
            self._finish(err.reply_code, err.reply_text)

    def _on_protocol_header(self, header: bytes) -> None:
        if header == PROTOCOL_HEADER:
            major, minor = 0, 9
        elif header == _PROTOCOL_HEADER_0_9:
            major, minor = 0, 9  # RabbitMQ treats 0-9 as 0-9-1
        else:
            self._out += PROTOCOL_HEADER
            self._finish(
                ReplyCode.FRAME_ERROR,
                amqp_text(ReplyCode.FRAME_ERROR,
                          f"client did not start with AMQP protocol header: {header!r}"),
            )
            return
        start = ConnectionStart(
            version_major=major,
            version_minor=minor,
            server_properties=self._server_properties,  # type: ignore[arg-type]
            mechanisms=" ".join(self._mechanisms),
            locales="en_US",
        )
        self._out += self._method_frame(0, start)
        self._state = self._tx_state = _STARTING

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
                    elif ftype == 1 and chan.method is None and chan.state == _CH_OPEN:
                        publish = cache.get(buf[start:end])
                        if publish is not None:
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
                return n
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
            and chan.state == _CH_OPEN
            and chan.method is None
            and buf[start : start + 4] == _PUBLISH_ID
        ):
            # Publishers reuse a handful of exchange/routing-key pairs: decode once.
            key = buf[start:end]
            cache = self._publish_cache
            publish = cache.get(key)
            if publish is None:
                publish = decode_method(buf, start, end)  # type: ignore[assignment]
                if len(cache) >= _PUBLISH_CACHE_MAX:
                    cache.clear()
                cache[key] = publish  # type: ignore[assignment]
            chan.method = publish
            return
        method = decode_method(buf, start, end)
        mtype = type(method)
        if chan is None:
            if mtype is ChannelOpen:
                self._open_channel(ch)
                return
            raise _hard(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                        method.CLASS_ID, method.METHOD_ID)
        if chan.state != _CH_OPEN:
            self._on_closing_channel(ch, chan, method)
            return
        if chan.method is not None:
            raise _hard(ReplyCode.UNEXPECTED_FRAME,
                        "expected content header for class 60, "
                        "got non content header frame instead", 60, 40)
        if mtype not in CLIENT_CHANNEL_METHODS:
            raise _hard(ReplyCode.COMMAND_INVALID, "unimplemented method",
                        method.CLASS_ID, method.METHOD_ID)
        if mtype.HAS_CONTENT:
            chan.method = method  # type: ignore[assignment]
        elif mtype is ChannelClose:
            chan.state = _CH_CLIENT_CLOSED
            self._write_ordered(self._method_frame(ch, ChannelCloseOk()))
            self._events.append(
                ChannelClosed(ch, method.reply_code, method.reply_text)  # type: ignore[attr-defined]
            )
        elif mtype is ChannelOpen:
            raise _hard(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
        elif mtype is ChannelCloseOk:
            pass  # nothing to acknowledge; RabbitMQ ignores it too
        else:
            self._events.append(MethodReceived(ch, method))

    def _open_channel(self, ch: int) -> None:
        # RabbitMQ's channel_max caps how many channels are open at once, not the
        # channel number: channel 65535 opens fine on a connection that has room.
        limit = self._channel_max
        if limit and len(self._channels) >= limit:
            raise _hard(ReplyCode.NOT_ALLOWED,
                        f"number of channels opened ({len(self._channels)}) has reached "
                        f"the negotiated channel_max ({limit})")
        self._channels[ch] = _Channel()
        self._write_ordered(self._method_frame(ch, ChannelOpenOk()))
        self._events.append(ChannelOpened(ch))

    def _on_closing_channel(self, ch: int, chan: _Channel, method: Method) -> None:
        """A closing channel: only close/close-ok (and a reopen) matter."""
        mtype = type(method)
        if chan.state == _CH_CLIENT_CLOSED:
            if mtype is ChannelOpen:  # the client got our close-ok and reuses the number
                del self._channels[ch]
                self._open_channel(ch)
            return
        if mtype is ChannelCloseOk:
            del self._channels[ch]
            self._events.append(ChannelClosed(ch))
        elif mtype is ChannelClose:
            # The client's close crossed ours: answer it, keep waiting for close-ok.
            self._write_ordered(self._method_frame(ch, ChannelCloseOk()))
            chan.state = _CH_CLOSE_RECEIVED
        elif mtype is ChannelOpen and chan.state == _CH_CLOSE_RECEIVED:
            # The client took our close-ok as the end and reuses the number.
            del self._channels[ch]
            self._events.append(ChannelClosed(ch))
            self._open_channel(ch)

    def _on_channel0(self, method: Method) -> None:
        state = self._state
        mtype = type(method)
        if mtype is ConnectionClose:
            if state is _CLOSING:
                self._write_ordered(self._method_frame(0, ConnectionCloseOk()))
                self._finish(self._close_code, self._close_text)
                return
            self._write_ordered(self._method_frame(0, ConnectionCloseOk()))
            self._finish(method.reply_code, method.reply_text)  # type: ignore[attr-defined]
            return
        if state is _CLOSING:
            if mtype is ConnectionCloseOk:
                self._finish(self._close_code, self._close_text)
            return
        if state is _OPEN:
            if mtype is ConnectionUpdateSecret:
                self._events.append(MethodReceived(0, method))
                return
        elif state is _STARTING and mtype is ConnectionStartOk:
            self._on_start_ok(method)  # type: ignore[arg-type]
            return
        elif state is _TUNING and mtype is ConnectionTuneOk:
            self._on_tune_ok(method)  # type: ignore[arg-type]
            return
        elif state is _OPENING and mtype is ConnectionOpen:
            self._on_open(method)  # type: ignore[arg-type]
            return
        names = {_OPEN: "running", _STARTING: "starting", _TUNING: "tuning",
                 _OPENING: "opening"}
        raise _hard(ReplyCode.CHANNEL_ERROR,
                    f"unexpected method in connection state {names.get(state, state.value)}",
                    method.CLASS_ID, method.METHOD_ID)

    # -------------------------------------------------------- handshake

    def _on_start_ok(self, method: ConnectionStartOk) -> None:
        self._client_properties = method.client_properties
        mechanism = method.mechanism
        self._mechanism = mechanism
        if mechanism not in self._mechanisms:
            raise _hard(ReplyCode.COMMAND_INVALID,
                        f"unknown authentication mechanism '{mechanism}'", 10, 11)
        username, password = self._parse_credentials(mechanism, method.response)
        try:
            ok = bool(self._authenticate(username, password))
        except AMQPError:
            ok = False
        if not ok:
            text = amqp_text(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {mechanism}. "
                "For details see the broker logfile.",
            )
            if self.client_capabilities.get("authentication_failure_close") is True:
                self._send_close(ReplyCode.ACCESS_REFUSED, text, 0, 0, ordered=True)
            self._finish(ReplyCode.ACCESS_REFUSED, text)
            return
        self._username = username
        tune = ConnectionTune(self._offer_channel_max, self._offer_frame_max,
                              self._offer_heartbeat)
        self._write_ordered(self._method_frame(0, tune))
        self._state = self._tx_state = _TUNING

    def _parse_credentials(self, mechanism: str, response: bytes) -> tuple[str, str]:
        if mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) != 3:
                raise _hard(ReplyCode.SYNTAX_ERROR, f"response {_erl_binary(response)} invalid",
                            10, 11)
            return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        if mechanism == "AMQPLAIN":
            # A field table *without* its length prefix (py-amqp, kombu, RabbitMQ's parser).
            table, _ = decode_table(_I.pack(len(response)) + response)
            login = table.get("LOGIN")
            password = table.get("PASSWORD")
            if not isinstance(login, str | bytes) or not isinstance(password, str | bytes):
                raise _hard(ReplyCode.SYNTAX_ERROR,
                            "AMQPLAIN auth info is missing LOGIN or PASSWORD field", 10, 11)
            if isinstance(login, bytes):
                login = login.decode("utf-8", "replace")
            if isinstance(password, bytes):
                password = password.decode("utf-8", "replace")
            return login, password
        raise _hard(ReplyCode.COMMAND_INVALID,
                    f"invalid authentication mechanism '{mechanism}'", 10, 11)

    def _on_tune_ok(self, method: ConnectionTuneOk) -> None:
        frame_max = method.frame_max
        channel_max = method.channel_max
        _validate_tune("frame_max", FRAME_MIN_SIZE, self._offer_frame_max, frame_max)
        _validate_tune("channel_max", 1, self._offer_channel_max, channel_max)
        self._frame_max = frame_max
        self._in_frame_max = frame_max
        self._channel_max = channel_max
        self._heartbeat = method.heartbeat
        self._state = self._tx_state = _OPENING

    def _on_open(self, method: ConnectionOpen) -> None:
        vhost = method.virtual_host
        assert self._username is not None
        if not self._check_vhost(self._username, vhost):
            raise _hard(ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found", 10, 40)
        self._vhost = vhost
        self._state = _OPEN
        self._write_ordered(self._method_frame(0, ConnectionOpenOk()))
        self._events.append(ConnectionOpened(vhost, self._username, self._client_properties))

    # ------------------------------------------------------------ content

    def _on_header(self, ch: int, buf: bytes, start: int, end: int) -> None:
        if self._state is not _OPEN or ch == 0:
            self._on_bad_frame(2, ch, buf[start:end], unknown=False)
            return
        chan = self._channels.get(ch)
        if chan is not None and chan.state != _CH_OPEN:
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
            if chan.state != _CH_OPEN:
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


def _validate_tune(field: str, minimum: int, server: int, client: int) -> None:
    """RabbitMQ's validate_negotiated_integer_value: 530 outside [minimum, server]."""
    if client != 0 and client < minimum:
        raise _hard(ReplyCode.NOT_ALLOWED,
                    f"negotiated {field} = {client} is lower than the minimum allowed value "
                    f"({minimum})", 10, 30)
    if server != 0 and (client == 0 or client > server):
        detail = " (no limit)" if field == "channel_max" and client == 0 else ""
        raise _hard(ReplyCode.NOT_ALLOWED,
                    f"negotiated {field} = {client}{detail} is higher than the maximum "
                    f"allowed value ({server})", 10, 30)

