"""Per-connection WebSocket message limits inside hypercorn, checked frame by frame.

hypercorn assembles each WebSocket message in a buffer bounded only by its
process-wide ``websocket_max_message_size`` (16 MiB) before the app sees it:
a stranger who never logs in could make the broker hold 16 MiB per socket
(32 sockets took RSS from 177 to 768 MiB). Here each connection's buffer takes
its bound from the ASGI scope (:data:`MAX_MESSAGE_KEY`, which the app may lower
or raise at any time: MQTT's unauthenticated limit until the CONNECT is
accepted, its packet limit after), checks it before a fragment is stored, and
past it sends close 1009 and drops the connection, so what the peer still
sends is never read. Installed where hypercorn creates its WebSocket streams;
idempotent, and a hypercorn without that seam keeps its own limit (logged).
"""

from __future__ import annotations

import logging
from typing import Any

from amqplite.server.wsstream import MAX_MESSAGE_KEY

log = logging.getLogger("amqplite.admin")

#: the limit before the app has set one: MQTT's unauthenticated packet size
DEFAULT_MAX_MESSAGE = 65_536


def install(default: int = DEFAULT_MAX_MESSAGE) -> None:
    """Give each hypercorn WebSocket stream a buffer bounded by its scope's limit."""
    try:
        from hypercorn.protocol import ws_stream
        from hypercorn.protocol.events import StreamClosed
    except ImportError:  # pragma: no cover - hypercorn is a dependency
        return
    stream_cls: Any = getattr(ws_stream, "WSStream", None)
    buffer_cls: Any = getattr(ws_stream, "WebsocketBuffer", None)
    too_large: Any = getattr(ws_stream, "FrameTooLargeError", None)
    if stream_cls is None or buffer_cls is None or too_large is None or not hasattr(
            stream_cls, "_handle_events"):
        log.warning("hypercorn's WebSocket stream has changed: messages are bounded by "
                    "its websocket_max_message_size only")
        return
    if getattr(stream_cls, "_amqplite_limits", False):
        return

    class ScopedBuffer(buffer_cls):  # type: ignore[misc, valid-type]
        """hypercorn's message buffer, its bound read from the stream's scope and
        checked before a fragment is kept; once over, it keeps nothing more."""

        def __init__(self, stream: Any) -> None:
            super().__init__(default)
            self._stream = stream
            self.overflowed = False

        @property  # type: ignore[misc]
        def max_length(self) -> int:
            scope = getattr(self._stream, "scope", None)
            value = scope.get(MAX_MESSAGE_KEY) if isinstance(scope, dict) else None
            return value if isinstance(value, int) else default

        @max_length.setter
        def max_length(self, value: int) -> None:  # hypercorn's __init__ sets it
            pass

        def extend(self, event: Any) -> None:
            if self.overflowed or self.length + len(event.data) > self.max_length:
                self.overflowed = True
                self.clear()
                raise too_large()
            super().extend(event)

    init = stream_cls.__init__
    handle_events = stream_cls._handle_events

    def bounded_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.buffer = ScopedBuffer(self)

    async def handle_then_drop(self: Any) -> None:
        await handle_events(self)  # past the limit it has sent close 1009
        if getattr(self.buffer, "overflowed", False) and not self.closed:
            scope = getattr(self, "scope", {})
            client = scope.get("client") or ("?", 0)
            log.info("WebSocket %s:%s sent a message over %d bytes: closed (1009)",
                     client[0], client[1], self.buffer.max_length)
            # drop the connection: the rest of the message is never read
            await self.send(StreamClosed(stream_id=self.stream_id))

    stream_cls.__init__ = bounded_init
    stream_cls._handle_events = handle_then_drop
    stream_cls._amqplite_limits = True
