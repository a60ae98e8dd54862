"""Headers exchange: match message headers against binding arguments.

``x-match`` is ``all`` (default) or ``any``; ``all-with-x`` / ``any-with-x``
also compare keys starting with ``x-`` (RabbitMQ 3.10). A binding argument of
type void matches on the key's presence alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter
from amqplite.broker.exchanges.selected import SELECTED, SELECTOR_ARG

_MODES = {"all", "any", "all-with-x", "any-with-x"}
#: binding arguments that steer the binding rather than name a header to compare
_NOT_COMPARED = frozenset(("x-match", SELECTOR_ARG))


def match_mode(args: Mapping[str, Any]) -> str:
    mode = args.get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    return mode if mode in _MODES else "all"


def headers_match(args: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    mode = match_mode(args)
    with_x = mode.endswith("-with-x")
    wanted = [(k, v) for k, v in args.items()
              if k not in _NOT_COMPARED and (with_x or not k.startswith("x-"))]
    if mode.startswith("all"):
        return all(k in headers and (v is None or _eq(headers[k], v)) for k, v in wanted)
    return any(k in headers and (v is None or _eq(headers[k], v)) for k, v in wanted)


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, bytes) and isinstance(b, str):
        return a == b.encode()
    if isinstance(a, str) and isinstance(b, bytes):
        return a.encode() == b
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class HeadersExchange(Exchange):
    type_name = "headers"

    def _index_add(self, binding: Binding) -> None:
        pass

    def _index_remove(self, binding: Binding) -> None:
        pass

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        if not self.bindings:
            return set()
        h = headers() or {}
        tokens = self.selector_tokens
        if tokens:  # a selector binding routes to its token (see exchanges/selected.py)
            return {(SELECTED, tokens[b]) if b in tokens else b.destination
                    for b in self.bindings if headers_match(b.args_dict, h)}
        return {b.destination for b in self.bindings if headers_match(b.args_dict, h)}
