"""x-recent-history: a fanout that keeps its last N messages for new bindings.

RabbitMQ's ``rabbitmq_recent_history_exchange`` semantics (checked against
3.10.8): every publish is kept (``x-recent-history-length``, default 20),
routed or not, unless its header ``x-recent-history-no-store`` is true; a new
binding gets the kept messages oldest first, a queue directly, an exchange
through its own routing and, as the plugin does it, newest first. Re-issuing
an existing binding delivers nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from amqplite.broker.exchanges.base import Binding
from amqplite.broker.exchanges.fanout import FanoutExchange
from amqplite.broker.exchanges.retaining import (
    MAX_BYTES,
    int_arg_error,
    limits_of,
    owner_of,
)
from amqplite.broker.model import Message
from amqplite.broker.retained import RetainedSet, RetainedStore

LENGTH = "x-recent-history-length"
DEFAULT_LENGTH = 20
NO_STORE = "x-recent-history-no-store"


@mypyc_attr(native_class=False)  # as its base (exchanges/base.py)
class RecentHistoryExchange(FanoutExchange):
    type_name = "x-recent-history"
    retains = True

    @classmethod
    def argument_error(cls, args: Mapping[str, Any]) -> str | None:
        return (int_arg_error(args, LENGTH, positive=True)
                or int_arg_error(args, MAX_BYTES, positive=False))

    def retained_set(self, store: RetainedStore, vhost: str) -> RetainedSet:
        return store.open(owner_of(vhost, self.name), keyed=False, durable=self.durable,
                          limits=limits_of(self.arguments, LENGTH, DEFAULT_LENGTH))

    def retain(self, store: RetainedStore, vhost: str, msg: Message) -> bool:
        """Keep ``msg`` unless it asks not to be; True when a store write must commit."""
        headers = msg.headers()
        if headers is not None and headers.get(NO_STORE) is True:
            return False
        return store.put(self.retained_set(store, vhost), msg.routing_key, msg)

    def replay(self, store: RetainedStore, vhost: str, binding: Binding,
               new: bool) -> list[Message]:
        """A new binding's history: oldest first to a queue, newest first to an exchange."""
        if not new:
            return []
        rs = store.find(owner_of(vhost, self.name))
        if rs is None:
            return []
        msgs = [r.message for r in rs]
        return msgs[::-1] if binding.destination[0] == "exchange" else msgs
