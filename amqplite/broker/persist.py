"""Builds store operations from broker objects: the one place that knows both shapes.

``amqplite.storeops`` is plain attrs data (no SQLAlchemy), so importing it
keeps the broker free of SQL while avoiding a second set of effect classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite import storeops as ops
from amqplite.protocol.codec import to_plain

if TYPE_CHECKING:
    from amqplite.broker.exchanges import Binding, Exchange
    from amqplite.broker.model import Entry, Message
    from amqplite.broker.policy import Policy
    from amqplite.broker.queue import Queue


def plain_args(args: Any) -> dict[str, Any]:
    return to_plain(dict(args)) if args else {}


def put_exchange(vhost: str, ex: Exchange) -> ops.PutExchange:
    return ops.PutExchange(vhost, ex.name, ex.type_name, ex.durable, ex.auto_delete,
                           ex.internal, plain_args(ex.arguments))


def delete_exchange(vhost: str, name: str) -> ops.DeleteExchange:
    return ops.DeleteExchange(vhost, name)


def put_queue(q: Queue) -> ops.PutQueue:
    return ops.PutQueue(q.id, q.vhost, q.name, q.durable, q.exclusive, q.auto_delete,
                        plain_args(q.arguments))


def delete_queue(q: Queue) -> ops.DeleteQueue:
    return ops.DeleteQueue(q.id)


def delete_entries(q: Queue, lo: int, hi: int) -> ops.DeleteEntries:
    return ops.DeleteEntries(q.id, lo, hi)


def put_binding(vhost: str, b: Binding) -> ops.PutBinding:
    kind, name = b.destination
    return ops.PutBinding(vhost, b.source, name, kind, b.routing_key, plain_args(b.args_dict))


def delete_binding(vhost: str, b: Binding) -> ops.DeleteBinding:
    kind, name = b.destination
    return ops.DeleteBinding(vhost, b.source, name, kind, b.routing_key, plain_args(b.args_dict))


def put_message(m: Message) -> Any:
    if m.copy_of is not None and m.body is None:
        return ops.CopyMessage(m.key, m.copy_of, m.exchange, m.routing_key, m.properties_raw,
                               m.persistent)
    return ops.PutMessage(m.key, m.exchange, m.routing_key, m.properties_raw, m.body or b"",
                          m.persistent)


def put_policy(p: Policy) -> ops.PutPolicy:
    return ops.PutPolicy(p.vhost, p.name, p.pattern, p.apply_to, p.priority, dict(p.definition))


def delete_policy(vhost: str, name: str) -> ops.DeletePolicy:
    return ops.DeletePolicy(vhost, name)


def put_entry(q: Queue, e: Entry) -> ops.PutEntry:
    return ops.PutEntry(q.id, e.position, e.message.key, e.delivery_count, e.redelivered)


def delete_entry(q: Queue, e: Entry) -> ops.DeleteEntry:
    return ops.DeleteEntry(q.id, e.position, e.message.key)


def update_entry(q: Queue, e: Entry, redelivered: bool | None = None) -> ops.UpdateEntry:
    return ops.UpdateEntry(q.id, e.position, e.delivery_count,
                           e.redelivered if redelivered is None else redelivered)

