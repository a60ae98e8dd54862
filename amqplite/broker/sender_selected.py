"""Sender-selected distribution: the ``CC`` and ``BCC`` headers add routing keys.

RabbitMQ (``rabbit_basic:header_routes``) routes a message by its routing key
and by every longstr in its ``CC`` and ``BCC`` arrays, through the same
exchange; elements of other types are skipped, a ``CC``/``BCC`` that is not an
array refuses the publish (406 ``invalid message:
{unacceptable_type_in_header,"CC",longstr}``). ``BCC`` is removed before the
message is stored or delivered; ``CC`` stays. Header names are case-sensitive.
A dead letter keeps them as RabbitMQ's does: without a dead-letter routing key
it is routed by its key, its CC and its BCC keys (kept on the Message in memory,
not in the store); with one, by that key alone and without its CC header;
x-death ``routing-keys`` lists the key and the CC keys.

Only messages whose properties carry headers and contain the bytes ``CC``
pay for a look: the hot path costs a flag test and a byte search.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from amqplite.broker.vhost import RouteResult
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.properties import decode_properties, encode_properties, headers_of

if TYPE_CHECKING:
    from amqplite.broker.exchanges import Exchange
    from amqplite.broker.model import Message
    from amqplite.broker.vhost import VHost

ROUTING_HEADERS = ("CC", "BCC")
HEADERS_FLAG: Final = 0x20  # first flag octet: bit 13, headers

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


def header_routes(raw: bytes) -> tuple[list[str], list[str], bytes]:
    """(the CC keys, the BCC keys, the properties without ``BCC``); ``raw`` itself
    when there is no ``BCC``. The headers passed the door (arrays where present)."""
    headers = headers_of(raw)
    if not headers:
        return [], [], raw
    cc = _keys(headers.get("CC"))
    if "BCC" not in headers:
        return cc, [], raw
    bcc = _keys(headers["BCC"])
    props = decode_properties(raw)
    assert props.headers is not None
    kept = props.headers.copy()
    del kept["BCC"]
    props.headers = kept
    return cc, bcc, encode_properties(props)


def cc_keys(raw: bytes) -> list[str]:
    """The CC keys of stored properties (BCC is gone by then); [] without a look when
    there are no headers or no ``CC`` bytes."""
    if not (len(raw) > 2 and raw[0] & HEADERS_FLAG and b"CC" in raw):
        return []
    try:
        headers = headers_of(raw)
    except Exception:  # stored by a version that did not check: the caller drops it
        return []
    return _keys(headers.get("CC")) if headers else []


def route_all(vh: VHost, ex: Exchange, routing_key: str, keys: Iterable[str],
              msg: Message) -> RouteResult:
    """Where ``routing_key`` and each of ``keys`` lead, as one RouteResult: each
    queue and each retaining exchange once, in the order first reached."""
    first = vh.route(ex, routing_key, msg)
    queues = {id(q): q for q in first.queues}
    retainers = {id(e): e for e in first.retainers}
    for k in keys:
        r = vh.route(ex, k, msg)
        for q in r.queues:
            queues.setdefault(id(q), q)
        for e in r.retainers:
            retainers.setdefault(id(e), e)
    return RouteResult(list(queues.values()), tuple(retainers.values()))
