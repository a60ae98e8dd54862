"""Fanout exchange: every bound destination, routing key ignored."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class FanoutExchange(Exchange):
    type_name = "fanout"

    def __init__(self, name: str, **kw: object) -> None:
        super().__init__(name, **kw)  # type: ignore[arg-type]
        self._dests: dict[Destination, int] = {}

    def _index_add(self, binding: Binding) -> None:
        self._dests[binding.destination] = self._dests.get(binding.destination, 0) + 1

    def _index_remove(self, binding: Binding) -> None:
        n = self._dests.get(binding.destination, 0) - 1
        if n > 0:
            self._dests[binding.destination] = n
        else:
            self._dests.pop(binding.destination, None)

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        return set(self._dests)
