"""What the retaining exchange types (x-recent-history, x-lvc) share: their
arguments, their limits, and the retained store's owner id of an exchange.

The retention itself lives in the broker's retained store
(``broker/retained.py``); a type only says what to keep and what a binding gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amqplite.broker.retained import Limits, OwnerId

#: per-exchange byte limit on retained bodies (RabbitMQ's queue argument name)
MAX_BYTES = "x-max-length-bytes"
#: per-exchange count limit on an x-lvc exchange's keys
MAX_LENGTH = "x-max-length"
#: the header every delivery from the retained store carries ("Inform if Retained")
RETAINED_HEADER = "x-retained"


def owner_of(vhost: str, exchange: str) -> OwnerId:
    return (vhost, "exchange", exchange)


def erlang_term(v: Any) -> str:
    """A value as RabbitMQ's ``~p`` prints it in an argument error."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'<<"{v}">>'
    if isinstance(v, bytes):
        return f'<<"{v.decode("utf-8", "replace")}">>'
    if v is None:
        return "undefined"
    return str(v)


def int_arg_error(args: Mapping[str, Any], name: str, *, positive: bool) -> str | None:
    """The plugin's wording for an integer argument that is not one (or not > 0)."""
    if name not in args:
        return None
    v = args[name]
    ok = isinstance(v, int) and not isinstance(v, bool) and (v > 0 if positive else v >= 0)
    if ok:
        return None
    want = "a positive integer" if positive else "a non-negative integer"
    return f"Invalid argument {erlang_term(v)}, '{name}' must be {want}"


def limits_of(args: Mapping[str, Any], count_arg: str, default_count: int | None) -> Limits:
    """The exchange's retained limits (its arguments were checked at declare)."""
    count = args.get(count_arg, default_count)
    size = args.get(MAX_BYTES)
    return Limits(count if isinstance(count, int) else default_count,
                  size if isinstance(size, int) else None)
