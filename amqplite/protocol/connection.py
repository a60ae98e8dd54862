"""Sans-I/O AMQP 0-9-1 server connection: bytes in, events out, bytes out.

The object does everything that does not need the broker: protocol header,
SASL, tuning, channel open/close bookkeeping and closing, answering errors
with the reply codes and texts RabbitMQ 3.x uses (``rabbit_reader``,
``rabbit_channel``). Its base class :class:`~amqplite.protocol.reader.FrameReader`
does framing, frame-level checks and content assembly; the events it hands
out live in :mod:`amqplite.protocol.events`, credential parsing in
:mod:`amqplite.protocol.sasl` and what is negotiated in
:mod:`amqplite.protocol.handshake`. The server feeds ``receive_data``, then
drains ``next_event()`` until it returns None, and writes ``data_to_send()``.

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

import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from amqplite.protocol import frames as _frames
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.errors import AMQPError, ConnectionError_, amqp_text
from amqplite.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionClosing,
    ConnectionOpened,
    ConnectionState,
    ContentReceived,
    Event,
    MethodReceived,
)
from amqplite.protocol.handshake import default_server_properties, validate_tune
from amqplite.protocol.methods import (
    CLIENT_CHANNEL_METHODS,
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
    encode_method,
)
from amqplite.protocol.properties import printable
from amqplite.protocol.reader import (
    CH_CLIENT_CLOSED,
    CH_CLOSE_RECEIVED,
    CH_CLOSING,
    CH_OPEN,
    CH_SENDABLE,
    Channel,
    FrameReader,
)
from amqplite.protocol.sasl import MECHANISMS, offered, parse_credentials
from amqplite.protocol.spec import FRAME_MIN_SIZE, PROTOCOL_HEADER, ReplyCode, is_soft_error

if TYPE_CHECKING:
    from amqplite.protocol.frames import StoredEntry

__all__ = ["ServerConnection"]

_PROTOCOL_HEADER_0_9 = b"AMQP\x01\x01\x00\x09"
_FRAME_HEAD = struct.Struct(">BHI")
#: class and method id of connection.close, as they open its method frame's payload
_CLOSE_ID = b"\x00\x0a\x00\x32"

#: A connection error whose text is RabbitMQ's ``"CODE - detail"``.
_hard = ConnectionError_.make

_AWAITING_HEADER = ConnectionState.AWAITING_HEADER
_STARTING = ConnectionState.STARTING
_TUNING = ConnectionState.TUNING
_OPENING = ConnectionState.OPENING
_OPEN = ConnectionState.OPEN
_CLOSING = ConnectionState.CLOSING
_CLOSED = ConnectionState.CLOSED

_TRANSITIONS: Final = frozenset({ChannelClosed, ConnectionOpened, ConnectionClosing, ConnectionClosed})
_CLOSES = frozenset({ChannelClosed, ConnectionClosing, ConnectionClosed})


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


class ServerConnection(FrameReader):
    """The server side of one AMQP 0-9-1 connection (no I/O, no clocks).

    ``authenticate(username, password) -> bool`` checks credentials; password
    None means SASL EXTERNAL: ``external_user`` (a verified TLS client
    certificate's name, given only then) is the identity, so only check that
    this user may log in;
    ``check_vhost(username, vhost) -> bool`` grants the vhost (False answers
    530 "vhost X not found"; raise an :class:`AMQPError` for another text).
    ``channel_max``/``frame_max``/``heartbeat`` are offered in connection.tune.
    """

    def __init__(
        self,
        *,
        authenticate: Callable[[str, str | None], bool],
        check_vhost: Callable[[str, str], bool],
        server_properties: Mapping[str, Any] | None = None,
        channel_max: int = 2047,
        frame_max: int = 131072,
        heartbeat: int = 60,
        max_message_size: int = 128 * 1024 * 1024,
        mechanisms: tuple[str, ...] = MECHANISMS,
        external_user: str | None = None,
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
        super().__init__(max_message_size)
        self._mechanisms = offered(mechanisms, external_user)
        self._external_user = external_user

        # Two views of the state: _state follows the bytes parsed so far; _tx_state
        # follows the events handed out, and decides what the server may still send
        # (replies to methods that arrived before a close must still go out).
        self._tx_state = _AWAITING_HEADER
        self._pending = b""
        self._out = bytearray()

        self._frame_max = FRAME_MIN_SIZE
        self._channel_max = 0
        self._heartbeat = 0
        self._username: str | None = None
        self._vhost: str | None = None
        self._client_properties: FieldTable = FieldTable()
        self._mechanism = ""
        self._close_code = 0
        self._close_text = ""
        #: the client sent connection.close and got close-ok: a further close is
        #: answered too (see ``peer_closed``)
        self._peer_closed = False

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
        return frozenset(n for n, c in self._channels.items() if c.state == CH_OPEN)

    @property
    def peer_closed(self) -> bool:
        """The client closed the connection (connection.close, answered with close-ok).

        Until the socket closes, every further connection.close fed to
        ``receive_data`` is answered with close-ok too, and everything else is
        discarded: RabbitMQ does so, and clients closing from two threads at
        once (Go's amqp091-go) send two closes and wait for two close-oks.
        RabbitMQ then waits for the client to close the socket.
        """
        return self._peer_closed

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

    def next_publish(self) -> ContentReceived | None:
        """The next event if a publish (replies before it released), else None and nothing
        taken: a reply ahead of another event (close-ok) waits for next_event, after the
        server has carried out what it owes (close_pending)."""
        events = self._events
        for item in events:
            if type(item) is not bytes:
                break
        else:
            return None
        if type(item) is not ContentReceived:
            return None
        while type(events[0]) is bytes:
            self._out += events.popleft()
        return events.popleft()  # type: ignore[no-any-return]

    def _apply(self, event: Any) -> None:
        """State changes that take effect when the server sees the event."""
        kind = type(event)
        if kind is ChannelClosed:
            chan = self._channels.get(event.channel)
            if chan is not None and chan.state == CH_CLIENT_CLOSED:
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
            events = self._events
            while events and type(events[0]) is bytes:  # close-oks for later closes
                self._out += events.popleft()

    def close_pending(self) -> bool:
        """True when the next event closes a channel or the connection. Sends after it
        are dropped, so the server carries out what it still owes for earlier frames (a
        basic.return, a confirm) first: RabbitMQ answers them before the close-ok."""
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
        return chan is not None and chan.state <= CH_SENDABLE

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
        if chan is None or chan.state > CH_SENDABLE:
            return False
        _frames.write_deliver(
            self._out, channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
            properties_raw, body, self._frame_max,
        )
        return True

    def send_stream_deliveries(
        self,
        channel: int,
        consumer_tag: str | bytes,
        first_tag: int,
        entries: Sequence[StoredEntry],
    ) -> bool:
        """basic.deliver + content for stream records (tags from ``first_tag`` up);
        False if the channel is not open."""
        if self._tx_state is not _OPEN:
            return False
        chan = self._channels.get(channel)
        if chan is None or chan.state > CH_SENDABLE:
            return False
        _frames.write_stream_deliveries(self._out, channel, consumer_tag, first_tag, entries,
                                        self._frame_max)
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
        if self._state is not _OPEN or chan is None or chan.state != CH_OPEN:
            return
        chan.state = CH_CLOSING
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
        everything but close/close-ok. Emits ConnectionClosing.

        Frames parsed after the event being handled and not handed out yet came
        after this close, as far as the client can tell: they are discarded as
        RabbitMQ discards frames after its connection.close (no channel.open-ok
        after the close, no ChannelOpened for a connection without a session),
        except a connection.close, which is answered, and a framing error, which
        still ends the connection."""
        tx_state = self._tx_state
        if self._events and tx_state is not _CLOSING and tx_state is not _CLOSED:
            self._rewind(reply_code, reply_text, class_id, method_id)
            return
        self._close(reply_code, reply_text, class_id, method_id, ordered=False)

    def _rewind(self, reply_code: int, reply_text: str, class_id: int, method_id: int) -> None:
        """close() with events pending: drop them and close as of the server's state."""
        state = self._state
        peer_closed = state is _CLOSED and self._peer_closed
        broken = state is _CLOSED and not peer_closed  # a framing error: socket goes
        self._events.clear()
        self._state = self._tx_state
        self._peer_closed = False
        self._close(reply_code, reply_text, class_id, method_id, ordered=False)
        if peer_closed:  # the client's close crossed ours: answered, close-ok still awaited
            self._out += self._method_frame(0, ConnectionCloseOk())
        elif broken:
            self._finish(self._close_code, self._close_text)

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
        if not data or (self._state is _CLOSED and not self._peer_closed):
            return
        try:
            buf = self._pending + data if self._pending else bytes(data)
            self._pending = b""
            if self._state is _CLOSED:
                self._answer_closes(buf)
                return
            if self._state is _AWAITING_HEADER:
                if len(buf) < 8:
                    self._pending = buf
                    return
                self._on_protocol_header(buf[:8])
                if self._state is _CLOSED:
                    return
                buf = buf[8:]
            pos = self._parse_frames(buf)
            if pos < len(buf):
                if self._state is not _CLOSED:
                    self._pending = buf[pos:]
                elif self._peer_closed:  # what followed the client's close
                    self._answer_closes(buf[pos:])
        except Exception as exc:  # a bug here must not take the server down
            if self._state is _CLOSED:  # closed already: only stop answering
                self._peer_closed = False
                self._pending = b""
                return
            err = _hard(ReplyCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            if self._state is _OPEN or self._state is _OPENING:
                self._send_close(err.reply_code, err.reply_text, 0, 0, ordered=True)
            self._finish(err.reply_code, err.reply_text)

    def _answer_closes(self, buf: bytes) -> None:
        """After the client's close: close-ok for each further connection.close,
        every other frame skipped unread; a framing error ends the answering."""
        fmax = self._in_frame_max
        n = len(buf)
        pos = 0
        while n - pos >= 7:
            ftype, ch, size = _FRAME_HEAD.unpack_from(buf, pos)
            end = pos + 7 + size
            if (fmax and size > fmax) or (end < n and buf[end] != 0xCE):
                self._peer_closed = False
                self._pending = b""
                return
            if end >= n:
                break
            if ftype == 1 and ch == 0 and buf[pos + 7 : pos + 11] == _CLOSE_ID:
                self._write_ordered(self._method_frame(0, ConnectionCloseOk()))
            pos = end + 1
        self._pending = buf[pos:]

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

    def _on_channel_method(self, ch: int, chan: Channel | None, method: Method) -> None:
        mtype = type(method)
        if chan is None:
            if mtype is ChannelOpen:
                self._open_channel(ch)
                return
            raise _hard(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'",
                        method.CLASS_ID, method.METHOD_ID)
        if chan.state != CH_OPEN:
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
            chan.state = CH_CLIENT_CLOSED
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
        self._channels[ch] = Channel()
        self._write_ordered(self._method_frame(ch, ChannelOpenOk()))
        self._events.append(ChannelOpened(ch))

    def _on_closing_channel(self, ch: int, chan: Channel, method: Method) -> None:
        """A closing channel: only close/close-ok (and a reopen) matter."""
        mtype = type(method)
        if chan.state == CH_CLIENT_CLOSED:
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
            chan.state = CH_CLOSE_RECEIVED
        elif mtype is ChannelOpen and chan.state == CH_CLOSE_RECEIVED:
            # The client took our close-ok as the end and reuses the number.
            del self._channels[ch]
            self._events.append(ChannelClosed(ch))
            self._open_channel(ch)

    def _on_channel0(self, method: Method) -> None:
        state = self._state
        mtype = type(method)
        if mtype is ConnectionClose:
            self._write_ordered(self._method_frame(0, ConnectionCloseOk()))
            if state is not _CLOSING:
                self._peer_closed = True
                self._finish(method.reply_code, method.reply_text)  # type: ignore[attr-defined]
            # else the client's close crossed ours: answered, and (as RabbitMQ) our
            # close-ok is still awaited; every close until then is answered
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
        username, password = parse_credentials(mechanism, method.response,
                                               self._external_user)
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

    def _on_tune_ok(self, method: ConnectionTuneOk) -> None:
        frame_max = method.frame_max
        channel_max = method.channel_max
        validate_tune("frame_max", FRAME_MIN_SIZE, self._offer_frame_max, frame_max)
        validate_tune("channel_max", 1, self._offer_channel_max, channel_max)
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
