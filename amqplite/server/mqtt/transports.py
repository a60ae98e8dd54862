"""MQTT's other ways in: over TLS with the AMQPS certificates, over WebSockets at
``/ws`` on the admin HTTP port, and who a CONNECT logs in as when it comes with
a client certificate or asks for enhanced authentication.

Every transport ends in ``MQTTListener.serve_stream(stream, peer, cert_user)``:
the per-connection client only sees a ``trio.abc.Stream`` (a socket, a TLS
stream, a WebSocket), so it is the same code over all three.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from amqplite.config import Settings
from amqplite.protocol.errors import AMQPError
from amqplite.protocol.mqtt.datatypes import decode_varint
from amqplite.protocol.mqtt.errors import MQTTError, ReasonCode
from amqplite.protocol.mqtt.packets import CONNACK, Connect
from amqplite.server.ports import accepted_peer, listen_tcp
from amqplite.server.tls import accept as accept_tls
from amqplite.server.tls import peer_user, server_context
from amqplite.server.wsstream import Receive, Send, WebSocketStream
from amqplite.sessions.mqtt.common import Login

if TYPE_CHECKING:
    from amqplite.server.mqtt.listener import MQTTListener

log = logging.getLogger("amqplite.mqtt")

#: where the admin app serves MQTT over WebSockets (RabbitMQ's Web MQTT path)
WS_PATH = "/ws"
#: WebSocket subprotocols an MQTT client offers: "mqtt" ([MQTT-6.0.0-3]), and
#: "mqttv3.1" from MQTT.js at protocol level 3; the first one offered is chosen
WS_SUBPROTOCOLS = ("mqtt", "mqttv3.1")


# ---------------------------------------------------------------- TLS
async def open_tls(settings: Settings,
                   ) -> tuple[list[trio.SocketListener], ssl.SSLContext] | None:
    """The MQTT-over-TLS listeners and their context (the AMQPS settings: tls_cert,
    tls_key, tls_ca, tls_verify_peer, tls_fail_if_no_peer_cert); None when
    ``mqtt_tls_port`` is unset. A taken port names ``mqtt_tls_port``."""
    if settings.mqtt_tls_port is None:
        return None
    ctx = server_context(settings)
    listeners = await listen_tcp(settings.mqtt_tls_port, settings.host, "MQTT over TLS",
                                 "mqtt_tls_port")
    return listeners, ctx


def tls_handler(listener: MQTTListener, ctx: ssl.SSLContext,
                ) -> Callable[[trio.SocketStream], Awaitable[None]]:
    """Each accepted socket: its own handshake (a failure closes only it), then an
    MQTT client carrying the verified certificate's user name, if any."""

    async def handle(stream: trio.SocketStream) -> None:
        peer = accepted_peer(stream)
        if peer is None:
            return
        tls = await accept_tls(stream, ctx, f"MQTT {peer[0]}:{peer[1]}",
                               listener.settings.handshake_timeout)
        if tls is not None:
            await listener.serve_stream(tls, peer, peer_user(tls))

    return handle


# ---------------------------------------------------------------- login
def login(listener: MQTTListener, connect: Connect, peer_host: str,
          cert_user: str | None) -> Login:
    """Who a CONNECT logs in as.

    - An MQTT 5 Authentication Method asks for enhanced authentication, which
      we offer none of: CONNACK 0x8C Bad authentication method, as the
      specification allows ([MQTT-4.12.0-1]).
    - With ``mqtt_ssl_cert_login``, a client with a verified certificate and no
      user name logs in as the certificate's CN into ``mqtt_vhost`` (SASL
      EXTERNAL's rule: the user exists and may connect from here); an unknown
      CN is refused with 0x87 Not authorized (3.1.1: return code 5).
    - Anything else is the listener's user name and password login.
    """
    if connect.properties.authentication_method is not None:
        log.info("MQTT %s: enhanced authentication %r is not supported", peer_host,
                 connect.properties.authentication_method)
        return _refused(ReasonCode.BAD_AUTHENTICATION_METHOD)
    s = listener.settings
    if connect.username is None and cert_user is not None and s.mqtt_ssl_cert_login:
        return _certificate_login(listener, cert_user, peer_host)
    return listener.login(connect.username, connect.password, peer_host)


def _certificate_login(listener: MQTTListener, name: str, peer_host: str) -> Login:
    users = listener.users
    vhost = listener.settings.mqtt_vhost
    if users.identify(name, peer_host) is None:
        line = users.failure_line("MQTT", name, peer_host, time.monotonic(),
                                  refused="client certificate")
        if line is not None:
            log.warning("%s", line)
        return _refused(ReasonCode.NOT_AUTHORIZED)
    try:
        listener.broker.check_vhost_access(name, vhost)
    except AMQPError:
        return _refused(ReasonCode.NOT_AUTHORIZED)
    return Login(name, vhost)


def _refused(code: int) -> Login:
    return Login(refused=code)


# ---------------------------------------------------------------- WebSocket
def ws_subprotocol(offered: Sequence[str]) -> str | None:
    """The subprotocol to answer with: "mqtt" before "mqttv3.1"; None refuses."""
    for name in WS_SUBPROTOCOLS:
        if name in offered:
            return name
    return None


async def serve_websocket(listener: MQTTListener | None, scope: dict[str, Any],
                          receive: Receive, send: Send) -> None:
    """An ASGI ``websocket`` scope of the admin app. ``/ws`` with an MQTT
    subprotocol becomes an MQTT client; another path or subprotocol, or MQTT
    off (``listener`` None), is refused before the handshake ends (hypercorn
    answers HTTP 403). No HTTP login here: the CONNECT authenticates."""
    if (await receive()).get("type") != "websocket.connect":
        return
    client = scope.get("client") or ("", 0)
    peer = (str(client[0]), int(client[1]))
    path = scope.get("path")
    chosen = ws_subprotocol(list(scope.get("subprotocols") or ()))
    if listener is None or path != WS_PATH or chosen is None:
        why = ("MQTT over WebSockets is off" if listener is None
               else f"no MQTT here (path {path!r})" if path != WS_PATH
               else f"no MQTT subprotocol in {scope.get('subprotocols')}")
        log.info("WebSocket from %s:%s refused: %s", peer[0], peer[1], why)
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "websocket.accept", "subprotocol": chosen})
    stream = MQTTWebSocket(receive, send, f"MQTT over WebSocket {peer[0]}:{peer[1]}", scope,
                           listener.limits.max_packet_size_unauthenticated,
                           listener.limits.max_packet_size)
    await listener.serve_stream(stream, peer, None)


class MQTTWebSocket(WebSocketStream):
    """The WebSocket of one MQTT client, its message size bounded as MQTT's packets
    are: by the unauthenticated limit until the broker accepts the CONNECT, by the
    packet limit after (one message may carry several packets or part of one; a
    client that batches more than a packet's worth in one message is refused).

    The acceptance is seen in the CONNACK the client shell sends (return code 0),
    so the transport needs nothing from the session code."""

    def __init__(self, receive: Receive, send: Send, name: str, scope: dict[str, Any],
                 before_login: int, after_login: int) -> None:
        super().__init__(receive, send, name, scope, before_login)
        self._after_login = after_login
        self._logged_in = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self._logged_in and connack_accepts(bytes(data[:16])):
            self._logged_in = True
            self.max_message_size = self._after_login
        await super().send_all(data)


def connack_accepts(data: bytes) -> bool:
    """Whether ``data`` starts with a CONNACK whose return (reason) code is 0, at
    any protocol level: type, remaining length, acknowledge flags, code."""
    if len(data) < 4 or data[0] != CONNACK << 4:
        return False
    try:
        length, body = decode_varint(data, 1, len(data))
    except MQTTError:  # not a CONNACK we can read: not an acceptance
        return False
    return length >= 2 and body + 1 < len(data) and data[body + 1] == 0
