"""Typed checks of link parameter values, as AMQP will carry them: pure, no I/O.

A shovel or federation value is JSON; what a link makes of it travels in AMQP
fields (names and routing keys are shortstrs of at most 255 bytes, priority
an octet, a timestamp an unsigned 64-bit integer, arguments and headers field
tables). A value the link could not encode would fail on every attempt, so
each is refused when the parameter is PUT, the ValueError naming its field
(``dest-publish-properties.priority: ...``); the admin API answers 400 with it.
"""

from __future__ import annotations

import math
from typing import Any

from amqplite.protocol.codec import MAX_NESTING, FieldTable, check_table, encode_table
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import BasicProperties, encode_properties

SHORTSTR_MAX = 255
I64_MAX = (1 << 63) - 1
U64_MAX = (1 << 64) - 1
#: the longest reconnect-delay (seconds; a year): beyond it a number is a mistake
MAX_RECONNECT_DELAY = 365 * 86400

#: RabbitMQ's shovel publish properties (``rabbit_shovel_parameters``), by AMQP kind:
#: s shortstr, o octet, d delivery mode, T timestamp; no ``headers`` (it sets none)
PROPERTY_KINDS = {
    "content_type": "s", "content_encoding": "s", "delivery_mode": "d", "priority": "o",
    "correlation_id": "s", "reply_to": "s", "expiration": "e", "message_id": "s",
    "timestamp": "T", "type": "s", "user_id": "s", "app_id": "s", "cluster_id": "s",
}


#: JSON's kinds of value, for "must be X, not Y" (bool before int: it is one)
_KINDS: tuple[tuple[Any, str], ...] = ((bool, "a boolean"), (int | float, "a number"),
                                       (str, "a string"), (list, "a list"),
                                       (dict, "an object"))


def _kind(v: Any) -> str:
    return next((name for t, name in _KINDS if isinstance(v, t)), "null")


def text(v: Any, field: str) -> str:
    """A string valid as UTF-8 (no lone surrogates)."""
    if not isinstance(v, str):
        raise ValueError(f"{field}: must be a string, not {_kind(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field}: is not valid UTF-8 (a lone surrogate)") from None
    return v


def shortstr(v: Any, field: str) -> str:
    """A string AMQP carries as a shortstr (a name, a routing key): at most 255 bytes."""
    n = len(text(v, field).encode("utf-8"))
    if n > SHORTSTR_MAX:
        raise ValueError(f"{field}: is {n} bytes long; AMQP short strings hold at most "
                         f"{SHORTSTR_MAX}")
    return str(v)


def integer(v: Any, field: str, lo: int, hi: int = I64_MAX) -> int:
    """An integer in ``lo..hi`` (JSON's ``5.0`` is not one)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{field}: must be an integer, not {_kind(v)}")
    if not lo <= v <= hi:
        raise ValueError(f"{field}: must be an integer in {lo}..{hi}")
    return v


def boolean(v: Any, field: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{field}: must be true or false, not {_kind(v)}")
    return v


def reconnect_delay(v: Any, field: str = "reconnect-delay") -> float:
    """Seconds, finite, ``0..MAX_RECONNECT_DELAY`` (0: a shovel is not restarted)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{field}: must be a number of seconds, not {_kind(v)}")
    if not 0 <= v <= MAX_RECONNECT_DELAY:  # (NaN and infinity fail this too)
        raise ValueError(f"{field}: must be a number of seconds in 0..{MAX_RECONNECT_DELAY}")
    return float(v)


def depth_of(v: Any) -> int:
    """How deep lists and objects nest in ``v`` (a scalar is 0), without recursion:
    a value too deep for Python's stack must be measured to be refused."""
    deepest = 0
    stack = [(v, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, d)
        if d > MAX_NESTING + 1:  # deep enough to refuse: stop walking
            return d
        stack.extend((c, d + 1) for c in children)
    return deepest


def table(v: Any, field: str) -> FieldTable:
    """A JSON object as the AMQP field table it becomes: keys shortstrs, values
    encodable by the codec, nested no deeper than a decoder accepts
    (``codec.MAX_NESTING``, the table itself counting 1)."""
    if not isinstance(v, dict):
        raise ValueError(f"{field}: must be a JSON object (a field table), not {_kind(v)}")
    if depth_of(v) > MAX_NESTING:
        raise ValueError(f"{field}: nests deeper than {MAX_NESTING} levels "
                         "(AMQP field tables)")
    _plain_json(v, field)
    try:
        raw = encode_table(FieldTable(v))
        check_table(raw)
    except (ValueError, OverflowError, TypeError, FrameSyntaxError) as exc:
        raise ValueError(f"{field}: cannot be an AMQP field table: {exc}") from None
    return FieldTable(v)


def _plain_json(v: Any, field: str) -> None:
    """Keys shortstrs, strings UTF-8, integers 64-bit, numbers finite (bounded depth
    already checked, so recursion is safe)."""
    if isinstance(v, dict):
        for k, item in v.items():
            shortstr(k, f"{field} key {k[:40]!r}" if isinstance(k, str) else field)
            _plain_json(item, f"{field}.{k}")
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _plain_json(item, f"{field}[{i}]")
    elif isinstance(v, str):
        text(v, field)
    elif isinstance(v, bool) or v is None:
        return
    elif isinstance(v, int):
        integer(v, field, -I64_MAX - 1)
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{field}: must be a finite number, not {v}")
    else:
        raise ValueError(f"{field}: holds a value of type {type(v).__name__}")


def publish_properties(v: Any, field: str) -> dict[str, Any]:
    """A shovel's ``dest-publish-properties``: each key one of RabbitMQ's, typed as
    the content header carries it (13 shortstrs at most: the header stays small)."""
    if not isinstance(v, dict):
        raise ValueError(f"{field}: must be a JSON object, not {_kind(v)}")
    for key, value in v.items():
        f = f"{field}.{key}"
        kind = PROPERTY_KINDS.get(key)
        if kind is None:
            hint = " (a shovel sets no headers, as in RabbitMQ)" if key == "headers" else ""
            raise ValueError(f"{f}: is not a publish property{hint}; known: "
                             f"{', '.join(sorted(PROPERTY_KINDS))}")
        if kind == "s":
            shortstr(value, f)
        elif kind == "o":
            integer(value, f, 0, 255)
        elif kind == "d":
            integer(value, f, 1, 2)
        elif kind == "T":
            integer(value, f, 0, U64_MAX)
        elif not (isinstance(value, str) and value.isascii() and value.isdigit()
                  and int(value) <= 0xFFFFFFFF):  # expiration: a TTL in ms, as text
            raise ValueError(f"{f}: must be a whole number of milliseconds as a string "
                             "(0..4294967295)")
    try:
        encode_properties(BasicProperties(**v))
    except (ValueError, OverflowError, TypeError) as exc:  # checked above: a safety net
        raise ValueError(f"{field}: cannot be encoded: {exc}") from None
    return dict(v)
