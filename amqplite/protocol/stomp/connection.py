"""StompConnection: the server side of one STOMP connection, sans I/O.

Bytes in (``receive_data(data, now)``), events out (``next_event()``), bytes
to write out (``data_to_send(now)``). The shell answers ConnectRequested with
``accept``/``reject``, sends deliveries with ``send_message`` and receipts
with ``send_receipt``, and calls ``check_timers(now)`` at ``deadline``. No
sockets, no clocks (``now`` is passed in), no randomness (the shell names
the session).

What lives here is what one connection can check alone: frame syntax and
limits (FrameParser), the handshake (version and heart-beat negotiation, the
login timeout, the smaller frame limit before login), which frames may come
when, and each command's required headers and destination grammar, answered
with RabbitMQ's ERROR texts. What needs broker state (subscription ids in
use, delivery tags, open transactions) is the session layer's.

As in RabbitMQ, a frame refused after login gets an ERROR and the connection
goes on (``errors.keeps_open``); bytes that are not a frame, and anything
refused before or during login, close it, as the STOMP specification has every
ERROR do (RabbitMQ keeps a connection open even after a refused login).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping

from amqplite.protocol.stomp.destinations import Destination, check_direction, parse_destination
from amqplite.protocol.stomp.errors import FrameError, StompError, keeps_open
from amqplite.protocol.stomp.events import (
    AbortReceived,
    AckMode,
    AckReceived,
    BeginReceived,
    CommitReceived,
    ConnectRequested,
    DisconnectReceived,
    NackReceived,
    ProtocolError,
    SendReceived,
    StompEvent,
    SubscribeReceived,
    UnsubscribeReceived,
)
from amqplite.protocol.stomp.frames import (
    DEFAULT_MAX_FRAME_SIZE_UNAUTHENTICATED,
    SUPPORTED_VERSIONS,
    V10,
    V12,
    Frame,
    FrameParser,
    ParserLimits,
    header_tables,
    serialize,
    translated,
)

_VERSION_HEADER = ",".join(SUPPORTED_VERSIONS)
#: how many SEND destinations a connection keeps parsed
_SEND_DESTINATIONS_KEPT = 256
#: the names a MESSAGE's own headers cannot override, by (subscription?, ack?)
_MESSAGE_RESERVED = {
    (sub, ack): frozenset(("destination", "message-id", "redelivered", "content-length")
                          + (("subscription",) if sub else ()) + (("ack",) if ack else ()))
    for sub in (False, True) for ack in (False, True)}
_TRUE = ("true", "True")
_FALSE = ("false", "False")
_ACK_MODES = {m.value: m for m in AckMode}


class State(enum.Enum):
    AWAIT_CONNECT = "await-connect"
    CONNECTING = "connecting"  # CONNECT received, the shell has not answered yet
    CONNECTED = "connected"
    DISCONNECTING = "disconnecting"  # DISCONNECT received: only a RECEIPT may still go out
    CLOSED = "closed"


class ServerLimits:
    """What this server accepts (RabbitMQ's defaults and setting names). A plain
    class: compiled, mypyc checks an attrs default (a factory) against the
    field's type at import and refuses it."""

    __slots__ = ("login_timeout", "max_frame_size_unauthenticated", "parser", "trailing_lf")

    def __init__(self, max_frame_size_unauthenticated: int = DEFAULT_MAX_FRAME_SIZE_UNAUTHENTICATED,
                 parser: ParserLimits | None = None, login_timeout: float = 10.0,
                 trailing_lf: bool = True) -> None:
        # stomp.max_frame_size is parser.max_frame_size; this one bounds every
        # frame before the login succeeded (stomp.max_frame_size_unauthenticated)
        self.max_frame_size_unauthenticated = max_frame_size_unauthenticated
        self.parser = ParserLimits() if parser is None else parser
        self.login_timeout = login_timeout  # stomp.login_timeout: socket to CONNECTED, seconds
        self.trailing_lf = trailing_lf  # stomp.trailing_lf: an EOL after every frame's NUL

    def __repr__(self) -> str:
        return (f"ServerLimits(max_frame_size_unauthenticated={self.max_frame_size_unauthenticated}, "
                f"parser={self.parser!r}, login_timeout={self.login_timeout}, "
                f"trailing_lf={self.trailing_lf})")


def negotiate_version(accept_version: str | None) -> str | None:
    """The highest version both sides speak; 1.0 when the header is absent, None when none."""
    if accept_version is None:
        return V10
    offered = {v.strip() for v in accept_version.split(",")}
    common = [v for v in SUPPORTED_VERSIONS if v in offered]
    return common[-1] if common else None


def parse_heart_beat(value: str | None) -> tuple[int, int]:
    """The client's ``cx,cy`` (milliseconds); ``0,0`` when absent."""
    if value is None:
        return 0, 0
    parts = value.split(",")
    if len(parts) == 2:
        cx, cy = (p.strip() for p in parts)
        if cx.isdigit() and cy.isdigit() and cx.isascii() and cy.isascii():
            return int(cx), int(cy)
    raise StompError(
        "Bad CONNECT", f"heart-beat header must be two non-negative integers 'cx,cy', not '{value}'\n"
    )


def _whole_seconds(ms: int) -> int:
    """RabbitMQ's rounding of a heart-beat interval: 0 stays off, under a second is one."""
    if ms <= 0:
        return 0
    return max(1, ms // 1000)


def negotiate_heart_beat(cx: int, cy: int) -> tuple[int, int]:
    """RabbitMQ's answer to ``heart-beat: cx,cy``: the CONNECTED ``sx,sy`` in milliseconds.

    The server sends every ``cy`` and expects the client every ``cx``, both
    rounded to whole seconds (so the spec's max(cx, sy) and max(sx, cy) come
    out as exactly those)."""
    return _whole_seconds(cy) * 1000, _whole_seconds(cx) * 1000


def _boolean(value: str | None) -> bool | None:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _missing_header(command: str, header: str) -> StompError:
    return StompError("Missing header", f'"{command}" must include the "{header}" header\n')


class StompConnection:
    """One client connection, server side."""

    def __init__(self, limits: ServerLimits | None = None, now: float = 0.0) -> None:
        self.limits = limits or ServerLimits()
        self.state = State.AWAIT_CONNECT
        self.version: str | None = None
        self.connect: ConnectRequested | None = None
        self._parser = FrameParser(self.limits.parser)
        self._parser.max_frame_size = min(
            self.limits.parser.max_frame_size, self.limits.max_frame_size_unauthenticated
        )
        self._out = bytearray()
        self._last_rx = now
        self._last_tx = now
        self._login_deadline: float | None = now + self.limits.login_timeout
        self.send_interval = 0.0  # seconds between our heart-beats (0: none)
        self.receive_interval = 0.0  # seconds the client promised between its own
        #: SEND destinations parsed so far (a publisher sends to few): one dict
        #: lookup per SEND instead of a parse
        self._send_destinations: dict[str, Destination] = {}
        #: the escaping of a MESSAGE's header names and values in ``version``
        self._message_tables = header_tables("MESSAGE", None)

    # ------------------------------------------------------------ plumbing

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None:
        """Bytes from the socket at time ``now`` (heart-beat EOLs included)."""
        if self.state is State.CLOSED or self.state is State.DISCONNECTING:
            return
        self._last_rx = now
        self._parser.receive(data)

    def data_to_send(self, now: float) -> bytes:
        """Everything queued for the socket; ``now`` is when it goes (heart-beat timing)."""
        if not self._out:
            return b""
        out = bytes(self._out)
        self._out.clear()
        self._last_tx = now
        return out

    def pending_bytes(self) -> int:
        return len(self._out)

    def close(self) -> None:
        """The shell is closing the socket (after DISCONNECT, or for its own reasons)."""
        self.state = State.CLOSED

    def events(self) -> Iterator[StompEvent]:
        while (event := self.next_event()) is not None:
            yield event

    def next_event(self) -> StompEvent | None:
        """The next thing the client did, or None until more bytes (or the
        answer to ConnectRequested) arrive."""
        state = self.state
        if state is State.CONNECTING:
            if self._parser.buffered > self.limits.max_frame_size_unauthenticated:
                return self._fail(FrameError(
                    f"more than {self.limits.max_frame_size_unauthenticated} bytes "
                    "sent before the login completed", "Frame too large",
                ))
            return None  # pipelined frames wait for accept(): limits and version depend on it
        if state is not State.AWAIT_CONNECT and state is not State.CONNECTED:
            return None
        while True:
            try:
                frame = self._parser.next_frame()
            except FrameError as err:
                return self._fail(err)
            if frame is None:
                return None
            try:
                return self._dispatch(frame)
            except StompError as error:  # not ``err``: compiled, one name has one type
                receipt = frame.headers.get("receipt")
                if state is not State.CONNECTED or not keeps_open(error):
                    return self._fail(error, receipt)
                # RabbitMQ's way for a frame it refuses: ERROR, and on to the next one
                self.send_error(error.message, error.detail, receipt=receipt, close=False)

    # ------------------------------------------------------------ timers

    @property
    def deadline(self) -> float | None:
        """When ``check_timers`` has something to do (None: never)."""
        if self.state is State.CLOSED:
            return None
        if self._login_deadline is not None:
            return self._login_deadline
        times = []
        if self.send_interval:
            times.append(self._last_tx + self.send_interval / 2)
        if self.receive_interval:
            times.append(self._last_rx + 2 * self.receive_interval)
        return min(times) if times else None

    def check_timers(self, now: float) -> bool:
        """Queue a heart-beat EOL when we have been quiet for half our interval
        (as RabbitMQ's heartbeater does); True when the connection expired:
        no CONNECTED within the login timeout, or nothing from the client
        for two of its intervals. The connection is then closed (no ERROR,
        as RabbitMQ)."""
        if self.state is State.CLOSED:
            return False
        if self._login_deadline is not None:
            if now >= self._login_deadline:
                self.state = State.CLOSED
                return True
            return False
        if self.receive_interval and now >= self._last_rx + 2 * self.receive_interval:
            self.state = State.CLOSED
            return True
        if self.send_interval and not self._out and now >= self._last_tx + self.send_interval / 2:
            self._out += b"\n"
        return False

    # ------------------------------------------------------------ answers from the shell

    def accept(self, session: str, now: float, server: str | None = None) -> None:
        """Login succeeded: CONNECTED with ``session`` (and ``server``, e.g.
        "amqplite/1.2.3"; None hides it, as RabbitMQ's hide_server_info)."""
        if self.state is not State.CONNECTING or self.connect is None:
            raise RuntimeError(f"accept() in state {self.state.value}")
        sx, sy = negotiate_heart_beat(*self.connect.heart_beat)
        headers = {} if server is None else {"server": server}
        headers.update({"session": session, "heart-beat": f"{sx},{sy}", "version": self.connect.version})
        self._write("CONNECTED", headers)
        self.state = State.CONNECTED
        self._parser.max_frame_size = self.limits.parser.max_frame_size
        self._login_deadline = None
        self.send_interval = sx / 1000
        self.receive_interval = sy / 1000
        self._last_rx = self._last_tx = now

    def reject(self, error: StompError) -> None:
        """Login refused: ERROR with ``error``'s texts, then closed."""
        if self.state is not State.CONNECTING:
            raise RuntimeError(f"reject() in state {self.state.value}")
        self.send_error(error.message, error.detail)

    def send_message(
        self,
        *,
        destination: str,
        message_id: str,
        subscription: str | None = None,
        redelivered: bool = False,
        ack: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        body: bytes = b"",
    ) -> int:
        """Queue a MESSAGE; returns its size. Headers come in RabbitMQ's order:
        subscription, destination, message-id, redelivered, ack (1.2 only,
        for client ack modes), then ``headers`` (the mapped properties)."""
        start = len(self._out)
        # the MESSAGE frame built here in one pass (serialize()'s rules, inlined):
        # this is the consumer's hot path
        name_tr, tr = self._message_tables
        parts = ["MESSAGE\n"]
        if subscription is not None:
            parts.append(f"subscription:{translated(subscription, tr)}\n")
        message_id = translated(message_id, tr)
        parts.append(f"destination:{translated(destination, tr)}\n"
                     f"message-id:{message_id}\n"
                     f"redelivered:{'true' if redelivered else 'false'}\n")
        with_ack = False
        if ack is not None and self.version == V12:
            with_ack = True
            parts.append(f"ack:{message_id if ack is message_id else translated(ack, tr)}\n")
        # the headers already written win over the message's own; content-length is ours
        reserved = _MESSAGE_RESERVED[subscription is not None, with_ack]
        items = headers.items() if isinstance(headers, Mapping) else headers
        for k, v in items:
            if k not in reserved:
                parts.append(f"{translated(k, name_tr)}:{translated(v, tr)}\n")
        parts.append(f"content-length:{len(body)}\n\n")
        out = self._out
        out += "".join(parts).encode()
        out += body
        out += b"\x00\n" if self.limits.trailing_lf else b"\x00"
        return len(out) - start

    def send_receipt(self, receipt_id: str) -> None:
        """Queue a RECEIPT (``serialize``'s bytes, built inline: one per receipted
        SEND; its header escapes as a MESSAGE's do)."""
        if self.state is State.CLOSED:
            return
        out = self._out
        out += f"RECEIPT\nreceipt-id:{translated(receipt_id, self._message_tables[1])}\n\n".encode()
        out += b"\x00\n" if self.limits.trailing_lf else b"\x00"

    def send_error(
        self,
        message: str,
        detail: str = "",
        *,
        receipt: str | None = None,
        headers: Mapping[str, str] | None = None,
        close: bool = True,
    ) -> None:
        """Queue an ERROR as RabbitMQ shapes it (message, content-type,
        version, the detail as body) plus ``receipt-id`` when the offending
        frame asked for a receipt; ``close=False`` only for notices such as
        a subscription the server cancelled."""
        if self.state is State.CLOSED:
            return
        head = {"message": message, "content-type": "text/plain", "version": _VERSION_HEADER}
        if receipt is not None:
            head["receipt-id"] = receipt
        if headers:
            head.update(headers)
        self._write("ERROR", head, detail.encode())
        if close:
            self.state = State.CLOSED

    # ------------------------------------------------------------ internals

    def _write(
        self,
        command: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes = b"",
    ) -> int:
        data = serialize(command, headers, body, self.version, trailing_lf=self.limits.trailing_lf)
        self._out += data
        return len(data)

    def _fail(self, err: StompError, receipt: str | None = None) -> ProtocolError:
        self.send_error(err.message, err.detail, receipt=receipt)
        return ProtocolError(err.message, err.detail)

    def _dispatch(self, frame: Frame) -> StompEvent:
        command = frame.command
        if self.state is State.AWAIT_CONNECT:
            if command == "CONNECT" or command == "STOMP":
                return self._on_connect(frame)
            raise StompError("Illegal command", "You must log in using CONNECT first")
        if self.version == V10:
            frame = _trim_1_0(frame)
        handler = _HANDLERS.get(command)
        if handler is None:
            if command == "CONNECT" or command == "STOMP":
                raise StompError("Illegal command", "Already connected")
            raise StompError("Bad command", f'Could not interpret command "{command}"\n')
        return handler(self, frame)

    def _on_connect(self, frame: Frame) -> ConnectRequested:
        version = negotiate_version(frame.get("accept-version"))
        if version is None:
            raise StompError("Version mismatch", f"Supported versions are {_VERSION_HEADER}\n")
        if version == V10:
            frame = _trim_1_0(frame)
        heart_beat = parse_heart_beat(frame.get("heart-beat"))
        self.version = version
        self._parser.version = version
        self._message_tables = header_tables("MESSAGE", version)
        h = frame.headers
        self.connect = ConnectRequested(
            version, h.get("host"), h.get("login"), h.get("passcode"), heart_beat, h, frame.command
        )
        self.state = State.CONNECTING
        return self.connect

    def _on_send(self, frame: Frame) -> SendReceived:
        h = frame.headers
        if "message-id" in h:
            raise StompError("Invalid header", "'message-id' is not allowed on 'SEND'.\n")
        known = self._send_destinations
        destination = known.get(h.get("destination", ""))
        if destination is None:
            destination = _destination(frame)  # raises on a bad one: never cached
            if len(known) < _SEND_DESTINATIONS_KEPT:
                known[h["destination"]] = destination
        return SendReceived(destination, h, frame.body, h.get("transaction"), h.get("receipt"))

    def _on_subscribe(self, frame: Frame) -> SubscribeReceived:
        h = frame.headers
        sub_id = h.get("id")
        _check_durable_id(h)
        destination = _destination(frame)
        raw_ack = h.get("ack", "auto")
        ack = _ACK_MODES.get(raw_ack)
        if ack is None:
            raise StompError(
                "Invalid header",
                f"'{raw_ack}' is not a valid ack mode: auto, client or client-individual\n",
            )
        if sub_id is None:
            if self.version != V10:
                raise _missing_header("SUBSCRIBE", "id")  # 1.1 and 1.2: required
        elif sub_id.startswith("/temp-queue/"):
            raise StompError("Invalid id", "SUBSCRIBE 'id' may not start with /temp-queue/\n")
        return SubscribeReceived(sub_id, destination, ack, h, h.get("receipt"))

    def _on_unsubscribe(self, frame: Frame) -> UnsubscribeReceived:
        h = frame.headers
        _check_durable_id(h)
        sub_id = h.get("id")
        if sub_id is None:
            if "destination" not in h:
                raise StompError(
                    "Missing destination or id", "UNSUBSCRIBE must include a 'destination' or 'id' header"
                )
        elif sub_id.startswith("/temp-queue/"):
            raise StompError("Invalid id", "UNSUBSCRIBE 'id' may not start with /temp-queue/\n")
        return UnsubscribeReceived(sub_id, h.get("destination"), h, h.get("receipt"))

    def _ack_id(self, frame: Frame) -> str:
        name = "id" if self.version == V12 else "message-id"
        value = frame.headers.get(name)
        if value is None:
            raise _missing_header(frame.command, name)
        return value

    def _on_ack(self, frame: Frame) -> AckReceived:
        h = frame.headers
        return AckReceived(self._ack_id(frame), h.get("subscription"), h.get("transaction"), h.get("receipt"))

    def _on_nack(self, frame: Frame) -> NackReceived:
        h = frame.headers
        return NackReceived(
            self._ack_id(frame), h.get("subscription"), h.get("transaction"), h.get("receipt"),
            requeue=_boolean(h.get("requeue")),
        )

    def _on_begin(self, frame: Frame) -> BeginReceived:
        return BeginReceived(_transaction(frame), frame.headers.get("receipt"))

    def _on_commit(self, frame: Frame) -> CommitReceived:
        return CommitReceived(_transaction(frame), frame.headers.get("receipt"))

    def _on_abort(self, frame: Frame) -> AbortReceived:
        return AbortReceived(_transaction(frame), frame.headers.get("receipt"))

    def _on_disconnect(self, frame: Frame) -> DisconnectReceived:
        self.state = State.DISCONNECTING
        return DisconnectReceived(frame.headers.get("receipt"))


def _trim_1_0(frame: Frame) -> Frame:
    """RabbitMQ trims leading whitespace of 1.0 header values ("destination: /queue/a")."""
    h = frame.headers
    if not any(v[:1].isspace() for v in h.values()):
        return frame
    return Frame(frame.command, {k: v.lstrip() for k, v in h.items()}, frame.body)


def _destination(frame: Frame) -> Destination:
    header = frame.headers.get("destination")
    if header is None:
        raise StompError("Missing destination", f"\"{frame.command}\" must include a 'destination' header\n")
    destination = parse_destination(header)
    check_direction(destination, header, frame.command)
    return destination


def _check_durable_id(h: dict[str, str]) -> None:
    if "id" not in h and (h.get("durable") == "true" or h.get("persistent") == "true"):
        raise StompError("Missing Header", "Header 'id' is required for durable subscriptions")


def _transaction(frame: Frame) -> str:
    tx = frame.headers.get("transaction")
    if tx is None:
        raise StompError("Missing transaction", f"\"{frame.command}\" must include a 'transaction' header\n")
    return tx


_HANDLERS: dict[str, Callable[[StompConnection, Frame], StompEvent]] = {
    "SEND": StompConnection._on_send,
    "SUBSCRIBE": StompConnection._on_subscribe,
    "UNSUBSCRIBE": StompConnection._on_unsubscribe,
    "ACK": StompConnection._on_ack,
    "NACK": StompConnection._on_nack,
    "BEGIN": StompConnection._on_begin,
    "COMMIT": StompConnection._on_commit,
    "ABORT": StompConnection._on_abort,
    "DISCONNECT": StompConnection._on_disconnect,
}
