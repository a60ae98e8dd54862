"""What a StompConnection hands its shell: one record per client frame.

Headers arrive as the client sent them (unescaped; 1.0 values with leading
whitespace trimmed, as RabbitMQ does), so the session layer reads what it
maps (AMQP properties, queue arguments, ``prefetch-count``) itself.
``receipt`` is the frame's ``receipt`` header: the shell answers with
``send_receipt`` once the action took effect (for a persistent SEND, after
the commit).

The records are plain classes (``protocol.records.Record``): one is built per
frame read (a SEND, an ACK), natively when compiled, where an attrs class's
generated ``__init__`` ran as interpreted Python.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from amqplite.protocol.records import Record
from amqplite.protocol.stomp.destinations import Destination


class AckMode(enum.Enum):
    AUTO = "auto"
    CLIENT = "client"  # cumulative
    CLIENT_INDIVIDUAL = "client-individual"


class ConnectRequested(Record):
    """CONNECT or STOMP with a version both sides speak. The shell authenticates
    (``login``/``passcode`` None when absent: a default user or a client
    certificate may apply), picks the vhost (``host`` None: the default) and
    answers ``accept`` or ``reject``; no further event comes before that."""

    __slots__ = ("command", "headers", "heart_beat", "host", "login", "passcode", "version")
    _FIELDS = ("version", "host", "login", "passcode", "heart_beat", "headers", "command")

    def __init__(self, version: str, host: str | None, login: str | None,
                 passcode: str | None, heart_beat: tuple[int, int], headers: dict[str, str],
                 command: str = "CONNECT") -> None:
        self.version = version
        self.host = host
        self.login = login
        self.passcode = passcode
        self.heart_beat = heart_beat  # the client's cx, cy in milliseconds
        self.headers = headers
        self.command = command


class SendReceived(Record):
    __slots__ = ("body", "destination", "headers", "receipt", "transaction")
    _FIELDS = ("destination", "headers", "body", "transaction", "receipt")

    def __init__(self, destination: Destination, headers: dict[str, str], body: bytes,
                 transaction: str | None = None, receipt: str | None = None) -> None:
        self.destination = destination
        self.headers = headers
        self.body = body
        self.transaction = transaction
        self.receipt = receipt


class SubscribeReceived(Record):
    """``subscription_id`` is None only in 1.0, where RabbitMQ keys the
    subscription by its destination header instead."""

    __slots__ = ("ack", "destination", "headers", "receipt", "subscription_id")
    _FIELDS = ("subscription_id", "destination", "ack", "headers", "receipt")

    def __init__(self, subscription_id: str | None, destination: Destination, ack: AckMode,
                 headers: dict[str, str], receipt: str | None = None) -> None:
        self.subscription_id = subscription_id
        self.destination = destination
        self.ack = ack
        self.headers = headers
        self.receipt = receipt


class UnsubscribeReceived(Record):
    """By ``subscription_id`` or, when absent, by ``destination`` (the raw header)."""

    __slots__ = ("destination", "headers", "receipt", "subscription_id")
    _FIELDS = ("subscription_id", "destination", "headers", "receipt")

    def __init__(self, subscription_id: str | None, destination: str | None,
                 headers: dict[str, str], receipt: str | None = None) -> None:
        self.subscription_id = subscription_id
        self.destination = destination
        self.headers = headers
        self.receipt = receipt


class SettleFrame(Record):
    """ACK or NACK (each its own subclass). ``ack_id`` is the 1.2 ``id`` header
    or the 1.0/1.1 ``message-id``."""

    __slots__ = ("ack_id", "receipt", "subscription", "transaction")
    _FIELDS: ClassVar[tuple[str, ...]] = ("ack_id", "subscription", "transaction", "receipt")

    def __init__(self, ack_id: str, subscription: str | None, transaction: str | None = None,
                 receipt: str | None = None) -> None:
        self.ack_id = ack_id
        self.subscription = subscription
        self.transaction = transaction
        self.receipt = receipt


class AckReceived(SettleFrame):
    __slots__ = ()


class NackReceived(SettleFrame):
    """``requeue`` is None when the client did not say (the server's default applies)."""

    __slots__ = ("requeue",)
    _FIELDS = ("ack_id", "subscription", "transaction", "receipt", "requeue")

    def __init__(self, ack_id: str, subscription: str | None, transaction: str | None = None,
                 receipt: str | None = None, requeue: bool | None = None) -> None:
        super().__init__(ack_id, subscription, transaction, receipt)
        self.requeue = requeue


class TransactionFrame(Record):
    """BEGIN, COMMIT or ABORT; each is its own subclass."""

    __slots__ = ("receipt", "transaction")
    _FIELDS = ("transaction", "receipt")

    def __init__(self, transaction: str, receipt: str | None = None) -> None:
        self.transaction = transaction
        self.receipt = receipt


class BeginReceived(TransactionFrame):
    __slots__ = ()


class CommitReceived(TransactionFrame):
    __slots__ = ()


class AbortReceived(TransactionFrame):
    __slots__ = ()


class DisconnectReceived(Record):
    """The client is leaving: the shell settles what is pending, sends the
    RECEIPT if ``receipt`` is set, then calls ``close``."""

    __slots__ = ("receipt",)
    _FIELDS = ("receipt",)

    def __init__(self, receipt: str | None = None) -> None:
        self.receipt = receipt


class ProtocolError(Record):
    """A frame broke a rule: the ERROR frame is queued and the connection closed."""

    __slots__ = ("detail", "message")
    _FIELDS = ("message", "detail")

    def __init__(self, message: str, detail: str) -> None:
        self.message = message
        self.detail = detail


StompEvent = (
    ConnectRequested | SendReceived | SubscribeReceived | UnsubscribeReceived | AckReceived
    | NackReceived | BeginReceived | CommitReceived | AbortReceived | DisconnectReceived
    | ProtocolError
)
