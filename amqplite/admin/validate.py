"""One validation layer for what the admin API is asked to store.

Every value a write hands to the broker passes through here first, so what
the store or an AMQP field table cannot hold (a lone surrogate, an integer
beyond 64 bits, ``1e400``, a table nested 900 deep, a 256-byte queue name) is
refused with a 400 naming the field before anything changes, instead of
failing in the writer after the API answered. Field names are paths into
the request body (``queues[3].durable``) so a long definitions file points at
its bad line.

``lenient`` accepts booleans and numbers sent as strings (``"false"``,
``"5"``), as RabbitMQ's PUT endpoints do for rabbitmqadmin; its definitions
import does not (it answers 400 for ``"durable": "false"``), nor does this.
A string that is not one of those values is refused: never a silent wrong value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from amqplite.admin.plumbing import HTTPError

#: AMQP shortstr: queue and exchange names, routing keys, field-table keys
SHORTSTR_MAX = 255
#: signed 64-bit: what SQLite's INTEGER and an AMQP long-long hold
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
#: nesting of argument tables/arrays (RabbitMQ's own tables rarely pass 3)
MAX_DEPTH = 32


class Invalid(HTTPError):
    """A 400 in RabbitMQ's error shape whose reason starts with the field's path."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(400, "bad_request", f"{field} {why}")
        self.field = field


def text(value: Any, field: str, *, allow_empty: bool = True) -> str:
    """A string the store can encode (valid UTF-8: no lone surrogates)."""
    if not isinstance(value, str):
        raise Invalid(field, f"must be a string, not {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid(field, "is not valid UTF-8 (it holds a lone surrogate)") from None
    if not allow_empty and not value:
        raise Invalid(field, "must not be empty")
    return value


def shortstr(value: Any, field: str, *, allow_empty: bool = True) -> str:
    """A name AMQP carries as a shortstr: at most 255 bytes of UTF-8."""
    s = text(value, field, allow_empty=allow_empty)
    n = len(s.encode("utf-8"))
    if n > SHORTSTR_MAX:
        raise Invalid(field, f"is {n} bytes long; AMQP names hold at most {SHORTSTR_MAX}")
    return s


def pattern(value: Any, field: str, why: Callable[[str], str | None]) -> str:
    """A regular expression a user writes; ``why`` says why one is refused."""
    s = text(value, field)
    reason = why(s)
    if reason is not None:
        raise Invalid(field, f"is refused: {reason}")
    return s


def boolean(value: Any, field: str, *, lenient: bool = False) -> bool:
    """true or false (with ``lenient``, also the strings "true" and "false")."""
    if isinstance(value, bool):
        return value
    if lenient and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Invalid(field, "must be true or false")


def integer(value: Any, field: str, *, lo: int = I64_MIN, hi: int = I64_MAX,
            lenient: bool = False) -> int:
    """An integer in ``lo..hi`` (with ``lenient``, also one written as a string)."""
    v = value
    if lenient and isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise Invalid(field, f"must be an integer, not {value!r}") from None
    if isinstance(v, bool) or not isinstance(v, int):
        raise Invalid(field, f"must be an integer, not {_kind(value)}")
    if not lo <= v <= hi:
        raise Invalid(field, f"must be an integer in {lo}..{hi}")
    return v


def obj(value: Any, field: str) -> dict[str, Any]:
    """A JSON object (None reads as empty, as RabbitMQ's optional tables)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(field, f"must be a JSON object, not {_kind(value)}")
    return value


def arguments(value: Any, field: str) -> dict[str, Any]:
    """An argument table the store (CBOR) and AMQP field tables can both hold:
    shortstr keys, strings without surrogates, 64-bit integers, finite floats,
    nesting at most ``MAX_DEPTH`` deep."""
    table = obj(value, field)
    _check_value(table, field, 1)
    return table


def _check_value(v: Any, field: str, depth: int) -> None:
    if v is None or isinstance(v, bool):
        return
    if isinstance(v, int):
        integer(v, field)
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise Invalid(field, f"must be a finite number, not {v}")
    elif isinstance(v, str):
        text(v, field)
    elif isinstance(v, list | dict):
        if depth > MAX_DEPTH:
            raise Invalid(field, f"nests deeper than {MAX_DEPTH} levels")
        if isinstance(v, list):
            for i, item in enumerate(v):
                _check_value(item, f"{field}[{i}]", depth + 1)
        else:
            for k, item in v.items():
                shortstr(k, f"{field} key {k!r}")
                _check_value(item, f"{field}.{k}", depth + 1)
    else:
        raise Invalid(field, f"holds a value of type {type(v).__name__}")


def tags(value: Any, field: str) -> list[str]:
    """User tags: a list of strings or RabbitMQ's comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in text(value, field).replace(",", " ").split() if t.strip()]
    if not isinstance(value, list):
        raise Invalid(field, "must be a list of strings or a comma-separated string")
    out = []
    for i, t in enumerate(value):
        out.append(text(t, f"{field}[{i}]").strip())
    return [t for t in out if t]


# ------------------------------------------------- fields of a request body
def body_str(body: dict[str, Any], key: str, default: str | None = None) -> str | None:
    v = body.get(key, default)
    return None if v is None else text(v, key)


def body_bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    """RabbitMQ's PUT endpoints take "true"/"false" too (rabbitmqadmin sends strings)."""
    return boolean(body.get(key, default), key, lenient=True)


def body_int(body: dict[str, Any], key: str, default: int | None, lo: int = 0,
             lenient: bool = False) -> int | None:
    """With ``lenient``, "5" too: RabbitMQ's get takes count and truncate as strings
    (rabbitmqadmin sends ``"count": "1"``), though a policy's priority it does not."""
    v = body.get(key, default)
    return None if v is None else integer(v, key, lo=lo, lenient=lenient)


def body_obj(body: dict[str, Any], key: str) -> dict[str, Any]:
    return obj(body.get(key), key)


def body_args(body: dict[str, Any], key: str = "arguments") -> dict[str, Any]:
    """An argument table the store and AMQP can hold (see :func:`arguments`)."""
    return arguments(body.get(key), key)


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
            str: "a string", list: "a list", dict: "an object"}.get(type(value),
                                                                   type(value).__name__)
