"""``x-federation-upstream``: the exchange a downstream's federation link declares on
its upstream (RabbitMQ's federation plugin declares it here when a RabbitMQ
federates from amqplite, and amqplite's own links declare it on either).

It is bound to the real exchange with the downstream's binding keys and routes
like a fanout to the link's queue, except a message that already made
``x-max-hops`` hops (entries in ``x-received-from``) or already passed through the
downstream (an entry naming its ``x-downstream-name`` and ``x-downstream-vhost``)
goes nowhere: that is what stops two brokers that federate each other from
echoing. The argument check and the filter follow
``rabbit_federation_upstream_exchange`` (3.10).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Destination, HeadersGetter
from amqplite.broker.exchanges.fanout import FanoutExchange

#: the header each hop prepends an entry to
RECEIVED_FROM = "x-received-from"
MAX_HOPS = "x-max-hops"
DOWNSTREAM_NAME = "x-downstream-name"
DOWNSTREAM_VHOST = "x-downstream-vhost"


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else v


def should_forward(headers: Mapping[str, Any] | None, max_hops: int,
                   downstream: str | None, downstream_vhost: str | None) -> bool:
    """False for a message that made ``max_hops`` hops or already passed through
    ``downstream`` (its cluster name) in ``downstream_vhost``."""
    if not headers:
        return True
    hops = headers.get(RECEIVED_FROM)
    if not isinstance(hops, list | tuple):
        return True
    if len(hops) >= max_hops:
        return False
    return not already_seen(downstream, downstream_vhost, hops)


def already_seen(name: str | None, vhost: str | None, hops: Any) -> bool:
    """An entry of ``hops`` (x-received-from, or x-bound-from) names cluster ``name``
    in ``vhost``."""
    if name is None or not isinstance(hops, list | tuple):
        return False
    return any(isinstance(h, Mapping) and _text(h.get("cluster-name")) == name
               and _text(h.get("vhost")) == vhost for h in hops)


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class FederationUpstreamExchange(FanoutExchange):
    type_name = "x-federation-upstream"

    @classmethod
    def argument_error(cls, args: Mapping[str, Any]) -> str | None:
        if MAX_HOPS not in args:
            return f"Argument {MAX_HOPS} missing"
        v = args[MAX_HOPS]
        if isinstance(v, bool) or not isinstance(v, int):
            return f"Argument {MAX_HOPS} must be of type long"
        return None

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self.max_hops = int(self.arguments.get(MAX_HOPS, 1))
        name_ = _text(self.arguments.get(DOWNSTREAM_NAME))
        vhost = _text(self.arguments.get(DOWNSTREAM_VHOST))
        self.downstream = name_ if isinstance(name_, str) else None
        self.downstream_vhost = vhost if isinstance(vhost, str) else None

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        if not self._dests or not should_forward(headers(), self.max_hops, self.downstream,
                                                 self.downstream_vhost):
            return set()
        return set(self._dests)
