"""Observers of the binding graph: told when a binding is added or removed, or when
what exchanges there are (or which policy applies to them) may have changed; and
watchers of vhosts, told when one is deleted.

Exchange federation (``links/``) propagates a federated exchange's bindings to
its upstreams as they change; the core only says what changed, synchronously
and without I/O, and the observer decides what to do (queue work for its own
trio tasks). With no observer registered the hooks cost one list check. A front
keeping per-vhost state outside the core (Kafka's consumer groups) drops it when
told the vhost is deleted, before a vhost of the same name can be created again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amqplite.broker.exchanges import Binding


class TopologyObserver(Protocol):
    def binding_changed(self, vhost: str, binding: Binding, added: bool) -> None:
        """``binding`` (its ``source`` is the exchange) was added or removed."""

    def exchanges_changed(self, vhost: str) -> None:
        """An exchange was declared or deleted, or the vhost's policies changed."""


class Topology:
    """The registered observers; the broker calls ``binding``, ``exchanges`` and
    ``vhost_deleted``."""

    def __init__(self) -> None:
        self.observers: list[TopologyObserver] = []
        #: called with a vhost's name once it is deleted
        self.vhost_watchers: list[Callable[[str], None]] = []

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

    def watch_vhosts(self, deleted: Callable[[str], None]) -> None:
        self.vhost_watchers.append(deleted)

    def unwatch_vhosts(self, deleted: Callable[[str], None]) -> None:
        if deleted in self.vhost_watchers:
            self.vhost_watchers.remove(deleted)

    def vhost_deleted(self, vhost: str) -> None:
        for w in list(self.vhost_watchers):
            w(vhost)
