"""Binding selectors: an ``x-selector`` binding argument filters what the binding routes.

A STOMP subscription with a ``selector`` header binds its own queue with the
selector's text as ``x-selector``; an AMQP ``queue.bind``/``exchange.bind``
may carry it too. The exchange compiles it once, when the binding is added,
and indexes the binding under a destination of its own kind (``SELECTED``,
a token), so an exchange without selector bindings routes exactly as before;
the vhost's walk evaluates the selector of each such destination it meets,
against the headers the message would carry as a STOMP MESSAGE (built once
per message, and only when a selector binding is on its route).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from amqplite.broker.selector import Selector, SelectorError, parse
from amqplite.broker.superstream import is_hash_routing
from amqplite.protocol.stomp.mapping import stomp_headers

if TYPE_CHECKING:
    from amqplite.broker.exchanges.base import Binding, Exchange
    from amqplite.broker.model import Message

#: the binding argument holding a selector's text
SELECTOR_ARG = "x-selector"
#: destination kind of a selector binding in an exchange's routing index
SELECTED = "selector"


def selector_text(args: Mapping[str, Any] | None) -> str | None:
    """The ``x-selector`` text of a binding's arguments (None when absent)."""
    if not args:
        return None
    v = args.get(SELECTOR_ARG)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) or v is None else str(v)


def selector_error(ex: Exchange, args: Mapping[str, Any] | None) -> str | None:
    """Why a binding's ``x-selector`` is refused (406 text), or None."""
    if not args or SELECTOR_ARG not in args:
        return None
    v = args[SELECTOR_ARG]
    if not isinstance(v, str | bytes):
        return f"Invalid argument '{SELECTOR_ARG}': must be a string"
    if is_hash_routing(ex.arguments):  # routes by hash over its partitions, not by binding
        return (f"Invalid argument '{SELECTOR_ARG}': exchange '{ex.name}' routes by hash, "
                f"its bindings cannot filter")
    try:
        parse(selector_text(args) or "")
    except SelectorError as exc:
        return str(exc)
    return None


def compile_selector(b: Binding) -> Selector:
    """The binding's selector. A stored text that no longer parses (it did at
    bind) matches nothing rather than everything: a selector is never ignored."""
    text = selector_text(b.args_dict) or ""
    try:
        return parse(text)
    except SelectorError:
        return Selector(text, lambda headers: False)


def message_headers(msg: Message) -> dict[str, str]:
    """What a selector sees: the headers ``msg`` would carry as a STOMP MESSAGE
    (custom AMQP headers, then the mapped properties; the first of a name wins,
    as in STOMP). ``message-id``, ``destination`` and ``subscription`` belong to
    a delivery and do not exist yet at routing."""
    out: dict[str, str] = {}
    for k, v in stomp_headers(msg.properties_raw):
        out.setdefault(k, v)
    return out
