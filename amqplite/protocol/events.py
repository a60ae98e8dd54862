"""What a ServerConnection hands the server: events and the connection state.

Kept apart from the state machine so the server (and tests) depend on these
plain records, not on how the bytes were parsed.
"""

from __future__ import annotations

import enum

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.methods import BasicPublish, Method

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
]


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class ConnectionOpened:
    """connection.open accepted (open-ok sent); channels may now be opened."""

    vhost: str
    username: str
    client_properties: FieldTable


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class ChannelOpened:
    """The client opened ``channel``; channel.open-ok goes out with this event."""

    channel: int


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class ChannelClosed:
    """``channel`` is gone: the client closed it (close-ok goes out with this
    event; reply_code/text are the client's) or it acknowledged our close."""

    channel: int
    reply_code: int = 200
    reply_text: str = ""


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class MethodReceived:
    """A method for the broker (queue/exchange/basic/confirm/tx/channel.flow,
    or connection.update-secret on channel 0)."""

    channel: int
    method: Method


class ContentReceived:
    """A complete basic.publish: method, raw property bytes and the body.

    A plain class, native when compiled (one per publish, built by the compiled
    reader): attrs' generated ``__init__`` would run interpreted. Equality and
    repr as the attrs events have them.
    """

    __slots__ = ("body", "channel", "method", "properties_raw")

    def __init__(self, channel: int, method: BasicPublish, properties_raw: bytes,
                 body: bytes) -> None:
        self.channel = channel
        self.method = method
        self.properties_raw = properties_raw
        self.body = body

    def __repr__(self) -> str:
        return (f"ContentReceived(channel={self.channel!r}, method={self.method!r}, "
                f"properties_raw={self.properties_raw!r}, body={self.body!r})")

    def __eq__(self, other: object) -> bool:
        if type(other) is not ContentReceived:
            return NotImplemented
        return (self.channel == other.channel and self.method == other.method
                and self.properties_raw == other.properties_raw and self.body == other.body)

    __hash__ = None  # type: ignore[assignment]  # compared by value, as attrs makes it


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class ConnectionClosing:
    """We sent connection.close; wait briefly for close-ok, then drop the socket."""

    reply_code: int
    reply_text: str


@mypyc_attr(native_class=False)
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
