"""x-lvc: a direct exchange that keeps the last message of every routing key.

The ``rabbitmq-lvc-exchange`` plugin's semantics: routes as direct; every
publish replaces the cached message of its routing key (routed or not); a
new binding with key K receives the cached message for K, if any.

Publish on request (amqplite's, the "Request Update" of retained
publications): a binding with argument ``x-publish-on-request: true``
receives nothing when it is made and nothing when messages are published;
re-issuing the same ``queue.bind`` (same key and arguments) asks for an
update and delivers the current cached message for K, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import PUBLISH_ON_REQUEST, Binding, Destination, HeadersGetter
from amqplite.broker.exchanges.direct import DirectExchange
from amqplite.broker.exchanges.retaining import (
    MAX_BYTES,
    MAX_LENGTH,
    erlang_term,
    int_arg_error,
    limits_of,
    owner_of,
)
from amqplite.broker.model import Message
from amqplite.broker.retained import RetainedSet, RetainedStore


def on_request(binding: Binding) -> bool:
    return binding.args_dict.get(PUBLISH_ON_REQUEST) is True


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class LvcExchange(DirectExchange):
    type_name = "x-lvc"
    retains = True

    def __init__(self, name: str, **kw: object) -> None:
        super().__init__(name, **kw)
        #: routing index of the bindings that receive live publishes; on-request
        #: bindings stay in ``bindings`` only (listed, persisted, never routed to)
        self._live = DirectExchange(name)

    @classmethod
    def argument_error(cls, args: Mapping[str, Any]) -> str | None:
        return (int_arg_error(args, MAX_LENGTH, positive=False)
                or int_arg_error(args, MAX_BYTES, positive=False))

    def binding_error(self, args: Mapping[str, Any] | None) -> str | None:
        v = (args or {}).get(PUBLISH_ON_REQUEST, True)
        if isinstance(v, bool):
            return None
        return f"Invalid argument {erlang_term(v)}, '{PUBLISH_ON_REQUEST}' must be a boolean"

    def _index_add(self, binding: Binding) -> None:
        if not on_request(binding):
            self._live.add_binding(binding)

    def _index_remove(self, binding: Binding) -> None:
        self._live.remove_binding(binding)

    def route(self, routing_key: str, headers: HeadersGetter) -> set[Destination]:
        return self._live.route(routing_key, headers)

    def retained_set(self, store: RetainedStore, vhost: str) -> RetainedSet:
        return store.open(owner_of(vhost, self.name), keyed=True, durable=self.durable,
                          limits=limits_of(self.arguments, MAX_LENGTH, None))

    def retain(self, store: RetainedStore, vhost: str, msg: Message) -> bool:
        """``msg`` becomes its key's value; True when a store write must commit."""
        return store.put(self.retained_set(store, vhost), msg.routing_key, msg)

    def replay(self, store: RetainedStore, vhost: str, binding: Binding,
               new: bool) -> list[Message]:
        """The cached message for the binding's key: at a new live binding, or
        when an on-request binding is re-issued (its Request Update)."""
        if new == on_request(binding):
            return []
        rs = store.find(owner_of(vhost, self.name))
        r = None if rs is None else rs.get(binding.routing_key)
        return [] if r is None else [r.message]
