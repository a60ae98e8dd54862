"""Web STOMP: STOMP over WebSockets at ``/ws`` on the admin HTTP port, chosen by
the subprotocol the client offers (``v12.stomp``, ``v11.stomp``, ``v10.stomp``,
as RabbitMQ's rabbitmq_web_stomp and stompjs name them); MQTT shares the path
with its own subprotocols. Text and binary messages both carry frames; replies
go as the client sends (RabbitMQ's Web STOMP sends text)."""

from __future__ import annotations

import logging
from typing import Any

from amqplite.server.stomp.client import StompClient
from amqplite.server.stomp.listener import StompListener
from amqplite.server.wsstream import Receive, Send, WebSocketStream

log = logging.getLogger("amqplite.stomp")

WS_PATH = "/ws"
#: best first: the one chosen is the highest the client offers
WS_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")


def offers_stomp(scope: dict[str, Any]) -> bool:
    """Does a WebSocket handshake ask for STOMP (rather than MQTT)?"""
    return any(p in WS_SUBPROTOCOLS for p in scope.get("subprotocols") or ())


async def serve_websocket(listener: StompListener | None, scope: dict[str, Any],
                          receive: Receive, send: Send) -> None:
    """An ASGI ``websocket`` scope offering a STOMP subprotocol: a STOMP client at
    ``/ws`` while the STOMP listener runs; refused before the handshake ends
    otherwise (HTTP 403). The CONNECT frame authenticates, as over TCP."""
    if (await receive()).get("type") != "websocket.connect":
        return
    client = scope.get("client") or ("", 0)
    peer = (str(client[0]), int(client[1]))
    offered = list(scope.get("subprotocols") or ())
    chosen = next(p for p in WS_SUBPROTOCOLS if p in offered)
    path = scope.get("path")
    if listener is None or path != WS_PATH:
        log.info("WebSocket from %s:%s refused: %s", peer[0], peer[1],
                 "STOMP is off" if listener is None else f"no STOMP here (path {path!r})")
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "websocket.accept", "subprotocol": chosen})
    stream = StompWebSocket(receive, send, f"STOMP over WebSocket {peer[0]}:{peer[1]}", scope,
                            listener.limits.max_frame_size_unauthenticated,
                            listener.limits.parser.max_frame_size)
    await StompClient(listener, stream, peer).run()


class StompWebSocket(WebSocketStream):
    """A STOMP client's WebSocket: messages bounded by the frame limit before login
    until the CONNECTED frame goes out, by the frame limit after."""

    def __init__(self, receive: Receive, send: Send, name: str, scope: dict[str, Any],
                 before_login: int, after_login: int) -> None:
        super().__init__(receive, send, name, scope, before_login)
        self.accept_text = True
        self._after_login = after_login
        self._logged_in = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self._logged_in and bytes(data[:10]) == b"CONNECTED\n":
            self._logged_in = True
            self.max_message_size = self._after_login
        await super().send_all(data)
