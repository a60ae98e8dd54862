"""Direct exchange: exact routing-key match, one dict lookup per publish."""

from __future__ import annotations

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter


class DirectExchange(Exchange):
    type_name = "direct"

    def __init__(self, name: str, **kw: object) -> None:
        super().__init__(name, **kw)  # type: ignore[arg-type]
        self._by_key: dict[str, dict[Destination, int]] = {}

    def _index_add(self, binding: Binding) -> None:
        dests = self._by_key.setdefault(binding.routing_key, {})
        dests[binding.destination] = dests.get(binding.destination, 0) + 1

    def _index_remove(self, binding: Binding) -> None:
        dests = self._by_key.get(binding.routing_key)
        if dests is None:
            return
        n = dests.get(binding.destination, 0) - 1
        if n > 0:
            dests[binding.destination] = n
        else:
            dests.pop(binding.destination, None)
            if not dests:
                del self._by_key[binding.routing_key]

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        dests = self._by_key.get(routing_key)
        return set(dests) if dests else set()
