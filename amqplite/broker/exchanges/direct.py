"""Direct exchange: exact routing-key match, one dict lookup per publish.

With ``x-super-stream-routing: hash`` (amqplite's opt-in, see
``broker/superstream.py``) it routes by the routing key's hash over its
partitions instead.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Binding, Destination, Exchange, HeadersGetter
from amqplite.broker.superstream import PARTITION_ORDER_ARG, hash_partition, is_hash_routing


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class DirectExchange(Exchange):
    type_name = "direct"

    def __init__(self, name: str, **kw: object) -> None:
        super().__init__(name, **kw)  # type: ignore[arg-type]
        self._by_key: dict[str, dict[Destination, int]] = {}
        #: hash routing: destinations in partition order (None: to be rebuilt)
        self._partitions: list[Destination] | None = None
        if is_hash_routing(self.arguments):
            self.route = self._route_by_hash  # type: ignore[method-assign]

    def _index_add(self, binding: Binding) -> None:
        self._partitions = None
        dests = self._by_key.setdefault(binding.routing_key, {})
        dests[binding.destination] = dests.get(binding.destination, 0) + 1

    def _index_remove(self, binding: Binding) -> None:
        self._partitions = None
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

    def _route_by_hash(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        parts = self._partitions
        if parts is None:
            parts = self._partitions = self._partition_order()
        if not parts:
            return set()
        return {parts[hash_partition(routing_key, len(parts))]}

    def _partition_order(self) -> list[Destination]:
        """Bound destinations by ``x-stream-partition-order`` (then binding key)."""
        out: list[Destination] = []
        for b in sorted(self.bindings, key=_partition_key):
            if b.destination not in out:
                out.append(b.destination)
        return out


def _partition_key(b: Binding) -> tuple[int, str]:
    """A module function, not a closure: mypyc cannot compile a nested function
    in a method of a non-native class."""
    o = b.args_dict.get(PARTITION_ORDER_ARG)
    ok = isinstance(o, int) and not isinstance(o, bool)
    return (o if ok else 1 << 62, b.routing_key)  # type: ignore[return-value]
