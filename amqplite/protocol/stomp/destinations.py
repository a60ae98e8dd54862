"""RabbitMQ's STOMP destinations: parsing the ``destination`` header and rebuilding it.

The grammar is rabbitmq_stomp's (rabbit_stomp_processor:parse_endpoint):
``/queue/<name>``, ``/topic/<key>``, ``/exchange/<name>[/<pattern>]``,
``/amq/queue/<name>``, ``/temp-queue/<name>``, ``/reply-queue/<name>`` (the
one kind whose name may hold slashes) and a bare name without a leading
slash, which is a queue. ``%2F`` in a segment stands for ``/``. The errors
carry RabbitMQ 3.10.8's ERROR texts (message header and body).
"""

from __future__ import annotations

import enum

import attrs
from mypy_extensions import mypyc_attr

from amqplite.protocol.stomp.errors import StompError

# in the order RabbitMQ lists them in its "Unknown destination" error
PREFIXES = ("/temp-queue", "/exchange", "/topic", "/queue", "/amq/queue", "/reply-queue/")


class Kind(enum.Enum):
    QUEUE = "queue"
    TOPIC = "topic"
    EXCHANGE = "exchange"
    AMQ_QUEUE = "amqqueue"
    TEMP_QUEUE = "temp_queue"
    REPLY_QUEUE = "reply_queue"


@mypyc_attr(native_class=False)
@attrs.frozen
class Destination:
    """A parsed destination. ``name`` is the queue, topic key, exchange or
    temp-queue id (unescaped); ``pattern`` is an exchange destination's
    routing key or binding pattern (None when absent)."""

    kind: Kind
    name: str
    pattern: str | None = None

    def routing(self, default_topic_exchange: str = "amq.topic") -> tuple[str, str]:
        """(exchange, routing key) a SEND publishes with, or a SUBSCRIBE binds with.

        Temp queues have none: the session layer maps them to a reply queue.
        """
        kind = self.kind
        if kind is Kind.TOPIC:
            return default_topic_exchange, self.name
        if kind is Kind.EXCHANGE:
            return self.name, self.pattern or ""
        if kind is Kind.TEMP_QUEUE:
            raise ValueError("a temp-queue destination has no routing of its own")
        return "", self.name


def _unknown(header: str) -> StompError:
    return StompError(
        "Unknown destination",
        f"'{header}' is not a valid destination.\n"
        f"Valid destination types are: {', '.join(PREFIXES)}.\n",
    )


def _invalid(kind: Kind, rest: list[str]) -> StompError:
    shown = "/" + "/".join(rest) if rest else ""
    return StompError("Invalid destination", f"'{shown}' is not a valid {kind.value} destination\n")


def _unescape(segment: str) -> str:
    return segment.replace("%2F", "/")


_SEGMENT_KINDS = {"queue": Kind.QUEUE, "topic": Kind.TOPIC, "temp-queue": Kind.TEMP_QUEUE}


def parse_destination(header: str) -> Destination:
    """Parse a ``destination`` header; StompError with RabbitMQ's texts when malformed."""
    parts = header.split("/")
    if len(parts) == 1:
        if not header:
            raise StompError("Invalid destination", "Destination cannot be blank")
        return Destination(Kind.QUEUE, _unescape(header))
    if parts[0]:
        raise _unknown(header)
    head = parts[1]
    if head == "exchange":
        rest = parts[2:]
        if not rest or not rest[0] or len(rest) > 2:
            raise _invalid(Kind.EXCHANGE, rest)
        pattern = _unescape(rest[1]) if len(rest) == 2 else None
        return Destination(Kind.EXCHANGE, _unescape(rest[0]), pattern)
    if head == "amq" and len(parts) > 2 and parts[2] == "queue":
        kind, rest = Kind.AMQ_QUEUE, parts[3:]
    elif head == "reply-queue" and len(parts) > 2:
        # reply queue names may hold slashes: everything after the prefix
        return Destination(Kind.REPLY_QUEUE, _unescape(header[len("/reply-queue/") :]))
    elif head in _SEGMENT_KINDS:
        kind, rest = _SEGMENT_KINDS[head], parts[2:]
    else:
        raise _unknown(header)
    if len(rest) != 1 or not rest[0]:
        raise _invalid(kind, rest)
    return Destination(kind, _unescape(rest[0]))


def check_direction(destination: Destination, header: str, command: str) -> None:
    """Temp queues exist only in ``reply-to``: RabbitMQ refuses them as a SEND
    or SUBSCRIBE destination."""
    if destination.kind is Kind.TEMP_QUEUE:
        raise StompError("Invalid destination", f"'{header}' is not a valid destination for '{command}'\n")


def _escape(text: str) -> str:
    """%-escape as RabbitMQ rebuilds a destination: ``/`` and ``%`` and every
    byte outside printable ASCII (of the UTF-8 encoding)."""
    if text.isascii() and text.isprintable() and "/" not in text and "%" not in text:
        return text
    out = []
    for byte in text.encode():
        if byte == 0x2F:
            out.append("%2F")
        elif byte == 0x25:
            out.append("%25")
        elif byte < 32 or byte > 127:
            out.append(f"%{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


def format_destination(exchange: str, routing_key: str) -> str:
    """The ``destination`` a MESSAGE carries, rebuilt from where it was published."""
    if exchange == "":
        return "/queue/" + _escape(routing_key)
    if exchange == "amq.topic":
        return "/topic/" + _escape(routing_key)
    if routing_key == "":
        return "/exchange/" + _escape(exchange)
    return f"/exchange/{_escape(exchange)}/{_escape(routing_key)}"


def reply_to_header(value: str) -> str:
    """A MESSAGE's ``reply-to``: an AMQP reply-to that is no destination gets the
    ``/reply-queue/`` prefix, so a STOMP client can answer to it."""
    if value.startswith(("/exchange", "/topic", "/queue", "/amq/queue", "/reply-queue/")):
        return value
    return "/reply-queue/" + value
