"""STOMP headers <-> AMQP 0-9-1 basic properties, as RabbitMQ's STOMP plugin maps them.

=====================  =====================================================
STOMP header           AMQP 0-9-1
=====================  =====================================================
content-type           content_type
content-encoding       content_encoding
persistent             delivery_mode (``true``: 2; back: ``true`` for 2)
priority               priority (an integer; anything else is refused)
correlation-id         correlation_id
reply-to               reply_to (``/temp-queue/`` is mapped by the session)
expiration             expiration
amqp-message-id        message_id (``message-id`` is the STOMP delivery's own)
timestamp              timestamp (seconds)
type, user-id, app-id  type, user_id, app_id
any other header       headers, as long strings (back: every value with a text form)
=====================  =====================================================

Frame-control headers (``destination``, ``receipt``, ``transaction``,
``content-length``) are not message headers and are not forwarded.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import BasicProperties, decode_properties, encode_properties
from amqplite.protocol.stomp.destinations import reply_to_header
from amqplite.protocol.stomp.errors import StompError

#: STOMP header -> BasicProperties field, for the text-valued ones
_TEXT = {
    "content-type": "content_type",
    "content-encoding": "content_encoding",
    "correlation-id": "correlation_id",
    "reply-to": "reply_to",
    "expiration": "expiration",
    "amqp-message-id": "message_id",
    "type": "type",
    "user-id": "user_id",
    "app-id": "app_id",
}
#: headers that steer the frame, not the message
_CONTROL = frozenset({"destination", "receipt", "transaction", "content-length", "message-id"})
_MAPPED = frozenset(_TEXT) | {"priority", "timestamp"}
_NOT_CUSTOM = _CONTROL | _MAPPED | {"persistent"}
_MAX_SHORT = 255
_PLAIN_PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))
_PLAIN = encode_properties(BasicProperties())


def _integer(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    text = value.strip()
    if not (text.lstrip("-").isdigit() and text.isascii()):
        raise StompError("Invalid header", f"'{name}' must be an integer, not '{value}'\n")
    return int(text)


def amqp_properties(headers: Mapping[str, str], reply_to: str | None = None) -> bytes:
    """The AMQP properties of a SEND; ``reply_to`` overrides the header (a temp
    queue mapped to its reply queue). The common SEND (nothing but
    ``destination`` and maybe ``persistent``/``receipt``) costs no encode."""
    custom = [k for k in headers if k not in _NOT_CUSTOM]
    persistent = headers.get("persistent") == "true"
    if not custom and reply_to is None and _MAPPED.isdisjoint(headers):
        return _PLAIN_PERSISTENT if persistent else _PLAIN
    fields: dict[str, Any] = {}
    for name, field in _TEXT.items():
        value = headers.get(name)
        if value is not None:
            if len(value.encode()) > _MAX_SHORT:
                raise StompError("Invalid header", f"'{name}' is longer than 255 bytes\n")
            fields[field] = value
    if reply_to is not None:
        fields["reply_to"] = reply_to
    table = None
    if custom:
        table = FieldTable()
        for name in custom:
            if len(name.encode()) <= _MAX_SHORT:
                table.set(name, headers[name], "S")
    priority = _integer(headers, "priority")
    if priority is not None and not 0 <= priority <= 255:
        raise StompError("Invalid header", f"'priority' must be 0 to 255, not {priority}\n")
    timestamp = _integer(headers, "timestamp")
    if timestamp is not None and not 0 <= timestamp < 1 << 64:  # AMQP's unsigned 64 bits
        raise StompError("Invalid header", f"'timestamp' must be 0 to 2^64-1, not {timestamp}\n")
    return encode_properties(BasicProperties(
        headers=table, delivery_mode=2 if persistent else None, priority=priority,
        timestamp=timestamp, **fields))


def _text(value: Any) -> str | None:
    """A header value's STOMP text; None for tables, arrays and non-UTF-8 bytes."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return None


_CACHE: dict[bytes, list[tuple[str, str]]] = {}


def stomp_headers(raw: bytes) -> list[tuple[str, str]]:
    """The MESSAGE headers of a message's AMQP properties: its headers table
    first, then the mapped properties (RabbitMQ's order). Cached for the
    common shapes: a fan-out maps one ``raw`` for many subscribers."""
    cached = _CACHE.get(raw)
    if cached is not None:
        return cached
    try:
        p = decode_properties(raw)
    except FrameSyntaxError:  # checked at publish: never expected here
        return []
    out: list[tuple[str, str]] = []
    for name, value in (p.headers or {}).items():
        text = _text(value)
        if text is not None and name not in _CONTROL:
            out.append((name, text))
    if p.reply_to is not None:
        out.append(("reply-to", reply_to_header(p.reply_to)))
    for header, field in _TEXT.items():
        value = getattr(p, field)
        if value is not None and field != "reply_to":
            out.append((header, value))
    if p.delivery_mode == 2:
        out.append(("persistent", "true"))
    if p.priority is not None:
        out.append(("priority", str(p.priority)))
    if p.timestamp is not None:
        out.append(("timestamp", str(int(p.timestamp))))
    if len(raw) <= 16 and len(_CACHE) < 1024:  # the header-less shapes only
        _CACHE[raw] = out
    return out
