"""A virtual host: its exchanges, queues and bindings, and routing through them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges import EXCHANGE_TYPES, Binding, DirectExchange, Exchange
from amqplite.broker.exchanges.base import Destination
from amqplite.broker.exchanges.selected import SELECTED, message_headers
from amqplite.broker.model import CHANNEL_STATS, ChannelState, channel_counts

if TYPE_CHECKING:
    from amqplite.broker.model import Message
    from amqplite.broker.queue import Queue


class RouteResult:
    """Where a route led: the queues reached (each once) and the retaining
    exchanges (x-recent-history, x-lvc) passed on the way, the first one
    included, each once; they keep the message whether or not a queue is reached.

    A slotted class rather than a NamedTuple: made per routed message, and its
    plain ``__init__`` costs about half a NamedTuple's ``__new__``. Read-only
    by convention (``NO_ROUTE`` and each queue's ``route_to`` are shared)."""

    __slots__ = ("queues", "retainers")

    def __init__(self, queues: Sequence[Queue], retainers: tuple[Exchange, ...]) -> None:
        self.queues = queues
        self.retainers = retainers

    def __repr__(self) -> str:
        return f"RouteResult(queues={self.queues!r}, retainers={self.retainers!r})"


#: no retaining exchange passed: shared, so the common route allocates nothing for it
NO_RETAINERS: Final[tuple[Exchange, ...]] = ()
#: reached nothing, passed no retaining exchange
NO_ROUTE: Final = RouteResult((), NO_RETAINERS)


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class DefaultExchange(DirectExchange):
    """The nameless exchange: every queue is bound to it by its own name."""

    def __init__(self, vhost: VHost) -> None:
        super().__init__("", durable=True)
        self._vhost = vhost

    def route(self, routing_key: str, headers: Any) -> set[Destination]:
        return {("queue", routing_key)} if routing_key in self._vhost.queues else set()


class VHost:
    """A namespace of exchanges, queues and bindings."""

    def __init__(self, name: str, description: str = "") -> None:
        self.name = name
        self.description = description
        self.exchanges: dict[str, Exchange] = {"": DefaultExchange(self)}
        self.queues: dict[str, Queue] = {}
        #: bindings by destination, so deleting a queue finds its bindings fast
        self.bindings_to: dict[Destination, set[Binding]] = {}
        #: the message counters (CHANNEL_STATS) of its channels that have closed: the
        #: vhost's message_stats are these plus its open channels' (channels count;
        #: a closing one hands its counts over once, nothing per message)
        self.closed_stats = [0] * len(CHANNEL_STATS)
        for name_, kind in (
            ("amq.direct", "direct"),
            ("amq.fanout", "fanout"),
            ("amq.topic", "topic"),
            ("amq.headers", "headers"),
            ("amq.match", "headers"),
        ):
            self.exchanges[name_] = EXCHANGE_TYPES[kind](name_, durable=True)

    def channel_closed(self, ch: ChannelState) -> None:
        """Keep a closing channel's counts in the vhost's totals."""
        self.closed_stats = [a + b for a, b in zip(self.closed_stats, channel_counts(ch),
                                                   strict=True)]

    def bound(self, b: Binding) -> bool:
        src = self.exchanges.get(b.source)
        return src is not None and b in src.bindings

    def route(self, ex: Exchange, routing_key: str, msg: Message) -> RouteResult:
        """Follow exchange-to-exchange bindings and alternate exchanges to queues,
        noting the retaining exchanges passed (see RouteResult)."""
        if type(ex) is DefaultExchange:  # by name, no bindings, no alternate
            q = self.queues.get(routing_key)
            return NO_ROUTE if q is None else q.route_to
        dests = ex.route(routing_key, msg.headers)
        if dests:  # one hop to queues only (the common case): no walk
            queues = self.queues
            found: list[Queue] = []
            for kind, name in dests:  # a set: each queue name once
                if kind != "queue":
                    return self._walk(ex, routing_key, msg)
                q = queues.get(name)
                if q is not None:
                    found.append(q)
            return RouteResult(found, (ex,) if ex.retains else NO_RETAINERS)
        return self._walk(ex, routing_key, msg)

    def _walk(self, ex: Exchange, routing_key: str, msg: Message) -> RouteResult:
        """The general route: a walk over exchange bindings, selector bindings
        and alternate exchanges."""
        seen: set[str] = set()
        found: dict[str, Queue] = {}
        retainers: list[Exchange] = []
        stack = [ex]
        headers = msg.headers
        view: dict[str, str] | None = None  # what selectors see, built at the first one
        while stack:
            e = stack.pop()
            if e.name in seen:
                continue
            seen.add(e.name)
            if e.retains:
                retainers.append(e)
            dests = e.route(routing_key, headers)
            routed = False
            for kind, name in dests:
                if kind == SELECTED:
                    (kind, name), selector = e.selected[name]
                    if view is None:
                        view = message_headers(msg)
                    if not selector.matches(view):
                        continue
                if kind == "queue":
                    q = self.queues.get(name)
                    if q is not None:
                        found[name] = q
                else:
                    nxt = self.exchanges.get(name)
                    if nxt is not None:
                        stack.append(nxt)
                routed = True
            if not routed:  # nothing bound matched (or no selector did): the alternate
                ae_name = e.alternate_exchange
                if ae_name is not None:
                    ae = self.exchanges.get(ae_name)
                    if ae is not None:
                        stack.append(ae)
        if not found and not retainers:
            return NO_ROUTE
        return RouteResult(list(found.values()), tuple(retainers) if retainers else NO_RETAINERS)
