"""Observers of the binding graph: told when a binding is added or removed, or when
what exchanges there are (or which policy applies to them) may have changed.

Exchange federation (``links/``) propagates a federated exchange's bindings to
its upstreams as they change; the core only says what changed, synchronously
and without I/O, and the observer decides what to do (queue work for its own
trio tasks). With no observer registered the hooks cost one list check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amqplite.broker.exchanges import Binding


class TopologyObserver(Protocol):
    def binding_changed(self, vhost: str, binding: Binding, added: bool) -> None:
        """``binding`` (its ``source`` is the exchange) was added or removed."""

    def exchanges_changed(self, vhost: str) -> None:
        """An exchange was declared or deleted, or the vhost's policies changed."""


class Topology:
    """The registered observers; the broker calls ``binding`` and ``exchanges``."""

    def __init__(self) -> None:
        self.observers: list[TopologyObserver] = []

    def watch(self, observer: TopologyObserver) -> None:
        self.observers.append(observer)

    def unwatch(self, observer: TopologyObserver) -> None:
        if observer in self.observers:
            self.observers.remove(observer)

    def binding(self, vhost: str, binding: Binding, added: bool) -> None:
        for o in list(self.observers):
            o.binding_changed(vhost, binding, added)

    def exchanges(self, vhost: str) -> None:
        for o in list(self.observers):
            o.exchanges_changed(vhost)
