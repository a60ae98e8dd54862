"""An accepted ASGI WebSocket as a trio byte stream.

Protocol shells read and write bytes through ``trio.abc.Stream`` (a socket, a
TLS stream); hypercorn hands an ASGI app a WebSocket as ``receive``/``send``
callables carrying messages. This adapter joins the two so that a shell written
for sockets runs unchanged over a WebSocket: ``receive_some`` returns the bytes
of binary messages in order (message boundaries are not packet boundaries, so
the shell's incremental decoder sees one byte stream), ``send_all`` sends one
binary message, and ``send_eof``/``aclose`` close the WebSocket normally.

It knows nothing of MQTT or of the admin app; ``receive`` must already have
given ``websocket.connect`` and the app must have sent ``websocket.accept``.

Message size: a server assembles a whole message before the app sees it, so a
limit checked here would come after the memory is spent. The limit is
therefore the server's to enforce as frames arrive: the stream writes it into
the ASGI scope under :data:`MAX_MESSAGE_KEY`, and the admin server's WebSocket
buffer (``amqplite.admin.wslimits``) reads it on every fragment and closes with
1009 past it. The check here is the fallback for a server without that seam.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("amqplite.websocket")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

#: RFC 6455 close codes: a normal close; a data frame of the wrong kind; too big
NORMAL_CLOSURE, UNSUPPORTED_DATA, MESSAGE_TOO_BIG = 1000, 1003, 1009
#: the scope key holding the largest message (bytes) the server may assemble now
MAX_MESSAGE_KEY = "amqplite.websocket.max_message_size"


class WebSocketStream(trio.abc.HalfCloseableStream):
    """Binary WebSocket messages as one byte stream. A text message ends it
    (protocols carried in binary frames, as MQTT's [MQTT-6.0.0-1], close then)."""

    def __init__(self, receive: Receive, send: Send, name: str = "WebSocket",
                 scope: dict[str, Any] | None = None,
                 max_message_size: int | None = None) -> None:
        self._receive = receive
        self._scope: dict[str, Any] = scope if scope is not None else {}
        self._send = send
        self.name = name
        #: what a short receive_some left of the last message
        self._pending = memoryview(b"")
        #: we sent websocket.close (send_eof or aclose)
        self._sent_close = False
        #: aclose was called: no more reading or writing here
        self._closed = False
        #: the peer is gone (websocket.disconnect) or broke the protocol
        self._ended = False
        if max_message_size is not None:
            self.max_message_size = max_message_size
        #: text messages carry the protocol too (STOMP), and once the peer sent one,
        #: what we send goes as text where it is UTF-8 (as RabbitMQ's Web STOMP)
        self.accept_text = False
        self._text_peer = False

    @property
    def max_message_size(self) -> int | None:
        """The largest message the peer may send now (None: the server's own limit)."""
        value = self._scope.get(MAX_MESSAGE_KEY)
        return value if isinstance(value, int) else None

    @max_message_size.setter
    def max_message_size(self, value: int) -> None:
        self._scope[MAX_MESSAGE_KEY] = value

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream was closed")
        if self._sent_close or self._ended:
            raise trio.BrokenResourceError("the WebSocket is closed")
        try:
            if data and self._text_peer:
                try:
                    await self._send({"type": "websocket.send",
                                      "text": bytes(data).decode()})
                except UnicodeDecodeError:
                    await self._send({"type": "websocket.send", "bytes": bytes(data)})
            elif data:
                await self._send({"type": "websocket.send", "bytes": bytes(data)})
            else:
                await trio.lowlevel.checkpoint()
        except trio.BusyResourceError:
            # hypercorn serialises its sends, but its close path (send_eof when
            # the peer goes) does not take that lock: the socket is closing
            raise trio.BrokenResourceError("the WebSocket is closing") from None

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        """The close handshake's first half: what was sent is complete."""
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream was closed")
        await self._close(NORMAL_CLOSURE)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket stream was closed")
        while not self._pending:
            if self._ended:
                return b""
            msg = await self._receive()
            kind = msg.get("type")
            if kind == "websocket.receive":
                data = msg.get("bytes")
                if data is None and self.accept_text and msg.get("text") is not None:
                    self._text_peer = True
                    data = msg["text"].encode()
                if data is None:  # a text frame: not ours to decode
                    log.info("%s: text WebSocket message; only binary messages carry "
                             "packets, closing", self.name)
                    self._ended = True
                    await self._close(UNSUPPORTED_DATA)
                    raise trio.BrokenResourceError("text WebSocket message")
                limit = self.max_message_size
                if limit is not None and len(data) > limit:  # a server without the seam
                    log.info("%s: WebSocket message of %d bytes over %d, closing",
                             self.name, len(data), limit)
                    self._ended = True
                    await self._close(MESSAGE_TOO_BIG)
                    raise trio.BrokenResourceError("WebSocket message too big")
                self._pending = memoryview(data)
            elif kind == "websocket.disconnect":
                self._ended = True
        n = len(self._pending) if max_bytes is None else min(max_bytes, len(self._pending))
        chunk, self._pending = self._pending[:n], self._pending[n:]
        return bytes(chunk)

    async def aclose(self) -> None:
        """Close normally; without this the server would close with 1011 once the
        app returns."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        await self._close(NORMAL_CLOSURE)

    async def _close(self, code: int) -> None:
        if self._sent_close:
            await trio.lowlevel.checkpoint()
            return
        self._sent_close = True
        try:
            await self._send({"type": "websocket.close", "code": code})
        except Exception as exc:  # the peer went first: nothing left to close
            log.debug("%s: close not sent: %r", self.name, exc)
