"""Sender-selected distribution: the ``CC`` and ``BCC`` headers add routing keys.

RabbitMQ (``rabbit_basic:header_routes``) routes a message by its routing key
and by every longstr in its ``CC`` and ``BCC`` arrays, through the same
exchange; elements of other types are skipped, a ``CC``/``BCC`` that is not an
array refuses the publish (406 ``invalid message:
{unacceptable_type_in_header,"CC",longstr}``). ``BCC`` is removed before the
message is stored or delivered; ``CC`` stays. Header names are case-sensitive.

Only messages whose properties carry headers and contain the bytes ``CC``
pay for a look: the hot path costs a flag test and a byte search.
"""

from __future__ import annotations

from typing import Any

from amqplite.protocol.codec import FieldTable
from amqplite.protocol.properties import decode_properties, encode_properties, headers_of

ROUTING_HEADERS = ("CC", "BCC")
HEADERS_FLAG = 0x20  # first flag octet: bit 13, headers

#: RabbitMQ's names of field types (rabbit_binary_parser), as its errors print them
TYPE_NAMES = {
    "t": "bool", "b": "byte", "B": "unsignedbyte", "s": "short", "u": "unsignedshort",
    "I": "signedint", "i": "unsignedint", "l": "long", "L": "long", "f": "float",
    "d": "double", "D": "decimal", "S": "longstr", "x": "binary", "A": "array",
    "T": "timestamp", "F": "table", "V": "void",
}


def bad_header(headers: FieldTable) -> str | None:
    """RabbitMQ's reason when a routing header is not an array, else None."""
    for name in ROUTING_HEADERS:
        if name in headers:
            tag = headers.tag_of(name)
            if tag != "A" and not (tag is None and isinstance(headers[name], list)):
                kind = TYPE_NAMES.get(tag or "", "longstr" if isinstance(
                    headers[name], str | bytes) else "void")
                return f'{{unacceptable_type_in_header,"{name}",{kind}}}'
    return None


def _keys(value: Any) -> list[str]:
    """The longstr elements of a ``CC``/``BCC`` array; other types are skipped."""
    out: list[str] = []
    if not isinstance(value, list):
        return out
    tag_at = getattr(value, "tag_at", None)
    for i, v in enumerate(value):
        tag = tag_at(i) if tag_at is not None else None
        if tag not in (None, "S"):
            continue
        if isinstance(v, bytes):
            out.append(v.decode("utf-8", "replace"))
        elif isinstance(v, str):
            out.append(v)
    return out


def header_routes(raw: bytes) -> tuple[list[str], bytes]:
    """(the extra routing keys, the properties without ``BCC``); ``raw`` itself when
    there is no ``BCC``. The headers passed the door (arrays where present)."""
    headers = headers_of(raw)
    if not headers:
        return [], raw
    keys = _keys(headers.get("CC"))
    if "BCC" not in headers:
        return keys, raw
    keys += _keys(headers["BCC"])
    props = decode_properties(raw)
    assert props.headers is not None
    kept = props.headers.copy()
    del kept["BCC"]
    props.headers = kept
    return keys, encode_properties(props)
