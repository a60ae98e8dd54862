"""What a StompConnection hands its shell: one record per client frame.

Headers arrive as the client sent them (unescaped; 1.0 values with leading
whitespace trimmed, as RabbitMQ does), so the session layer reads what it
maps (AMQP properties, queue arguments, ``prefetch-count``) itself.
``receipt`` is the frame's ``receipt`` header: the shell answers with
``send_receipt`` once the action took effect (for a persistent SEND, after
the commit).
"""

from __future__ import annotations

import enum

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.stomp.destinations import Destination


class AckMode(enum.Enum):
    AUTO = "auto"
    CLIENT = "client"  # cumulative
    CLIENT_INDIVIDUAL = "client-individual"


@mypyc_attr(native_class=False)
@attrs.frozen
class ConnectRequested:
    """CONNECT or STOMP with a version both sides speak. The shell authenticates
    (``login``/``passcode`` None when absent: a default user or a client
    certificate may apply), picks the vhost (``host`` None: the default) and
    answers ``accept`` or ``reject``; no further event comes before that."""

    version: str
    host: str | None
    login: str | None
    passcode: str | None
    heart_beat: tuple[int, int]  # the client's cx, cy in milliseconds
    headers: dict[str, str]
    command: str = "CONNECT"


@mypyc_attr(native_class=False)
@attrs.frozen
class SendReceived:
    destination: Destination
    headers: dict[str, str]
    body: bytes
    transaction: str | None = None
    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class SubscribeReceived:
    """``subscription_id`` is None only in 1.0, where RabbitMQ keys the
    subscription by its destination header instead."""

    subscription_id: str | None
    destination: Destination
    ack: AckMode
    headers: dict[str, str]
    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class UnsubscribeReceived:
    """By ``subscription_id`` or, when absent, by ``destination`` (the raw header)."""

    subscription_id: str | None
    destination: str | None
    headers: dict[str, str]
    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class SettleFrame:
    """ACK or NACK (each its own subclass). ``ack_id`` is the 1.2 ``id`` header
    or the 1.0/1.1 ``message-id``."""

    ack_id: str
    subscription: str | None
    transaction: str | None = None
    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class AckReceived(SettleFrame):
    pass


@mypyc_attr(native_class=False)
@attrs.frozen
class NackReceived(SettleFrame):
    """``requeue`` is None when the client did not say (the server's default applies)."""

    requeue: bool | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class TransactionFrame:
    """BEGIN, COMMIT or ABORT; each is its own subclass."""

    transaction: str
    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class BeginReceived(TransactionFrame):
    pass


@mypyc_attr(native_class=False)
@attrs.frozen
class CommitReceived(TransactionFrame):
    pass


@mypyc_attr(native_class=False)
@attrs.frozen
class AbortReceived(TransactionFrame):
    pass


@mypyc_attr(native_class=False)
@attrs.frozen
class DisconnectReceived:
    """The client is leaving: the shell settles what is pending, sends the
    RECEIPT if ``receipt`` is set, then calls ``close``."""

    receipt: str | None = None


@mypyc_attr(native_class=False)
@attrs.frozen
class ProtocolError:
    """A frame broke a rule: the ERROR frame is queued and the connection closed."""

    message: str
    detail: str


StompEvent = (
    ConnectRequested | SendReceived | SubscribeReceived | UnsubscribeReceived | AckReceived
    | NackReceived | BeginReceived | CommitReceived | AbortReceived | DisconnectReceived
    | ProtocolError
)
