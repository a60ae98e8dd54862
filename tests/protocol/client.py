"""A tiny AMQP client simulator for driving ServerConnection with real bytes.

Frames are built with pamqp (an independent implementation), so the tests
check our server against what a real client library puts on the wire.
"""

from __future__ import annotations

from typing import Any

from pamqp import body as pbody
from pamqp import commands as pc
from pamqp import frame as pframe
from pamqp import header as pheader
from pamqp import heartbeat as pheartbeat

from amqplite.protocol.connection import ServerConnection

PIKA_CAPABILITIES = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


def marshal(method: Any, channel: int = 0) -> bytes:
    """One frame from a pamqp frame object."""
    return pframe.marshal(method, channel)


def heartbeat() -> bytes:
    return pframe.marshal(pheartbeat.Heartbeat(), 0)


def publish(channel: int, body: bytes, exchange: str = "", routing_key: str = "q",
            properties: pc.Basic.Properties | None = None, frame_max: int = 131072) -> bytes:
    """basic.publish + header + body frames, split like a client would."""
    props = properties or pc.Basic.Properties()
    out = [
        marshal(pc.Basic.Publish(exchange=exchange, routing_key=routing_key), channel),
        marshal(pheader.ContentHeader(0, len(body), props), channel),
    ]
    chunk = frame_max - 8
    for i in range(0, len(body), chunk):
        out.append(marshal(pbody.ContentBody(body[i : i + chunk]), channel))
    return b"".join(out)


def parse_frames(data: bytes) -> list[tuple[int, Any]]:
    """Split server output into (channel, pamqp frame) pairs."""
    frames = []
    while data:
        consumed, channel, value = pframe.unmarshal(data)
        frames.append((channel, value))
        data = data[consumed:]
    return frames


def start_ok(username: str = "guest", password: str = "guest", mechanism: str = "PLAIN",
             capabilities: dict[str, bool] | None = None, response: bytes | None = None) -> bytes:
    caps = PIKA_CAPABILITIES if capabilities is None else capabilities
    if response is None:
        response = b"\x00" + username.encode() + b"\x00" + password.encode()
    return marshal(
        pc.Connection.StartOk(
            client_properties={"product": "pika", "platform": "Python", "capabilities": caps},
            mechanism=mechanism,
            response=response.decode("latin-1"),
        )
    )


def make_connection(**kwargs: Any) -> ServerConnection:
    users = {"guest": "guest"}
    kwargs.setdefault("authenticate", lambda u, p: users.get(u) == p)
    kwargs.setdefault("check_vhost", lambda u, v: v == "/")
    return ServerConnection(**kwargs)


def open_connection(vhost: str = "/", channel_max: int = 2047, frame_max: int = 131072,
                    heartbeat: int = 60, **kwargs: Any) -> ServerConnection:
    """A ServerConnection driven through the whole handshake; events and output drained."""
    conn = make_connection(**kwargs)
    conn.receive_data(b"AMQP\x00\x00\x09\x01")
    conn.receive_data(start_ok())
    conn.receive_data(
        marshal(pc.Connection.TuneOk(channel_max, frame_max, heartbeat))
        + marshal(pc.Connection.Open(vhost))
    )
    events = list(conn.events())
    assert events and type(events[-1]).__name__ == "ConnectionOpened", events
    conn.data_to_send()
    return conn
