"""The retained store: the current publications the broker keeps past routing.

One store, several indexes over it. Each owner (an ``x-recent-history`` or
``x-lvc`` exchange today; MQTT's retained topics of a vhost later) has one
:class:`RetainedSet`: either *ordered* (the last N messages, oldest first) or
*keyed* (one message per key, a new one replacing the old). An MQTT index is
a keyed set whose lookups go through :meth:`RetainedStore.matching` with a
topic-filter predicate; nothing here knows exchanges or topics.

The store keeps the very :class:`Message` object the publish routed (bodies
are shared with the queues, never copied) and pins it so the queues' paging
never drops a body the store still hands out. Each owner has count and byte
limits; the oldest entry goes first. Store operations for durable owners go
out through ``emit`` (the broker's outbox), so a retained message of a
durable exchange is committed like a queue entry is.

Pure: no trio, no SQL. Dependencies come in through the constructor.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs
from mypy_extensions import mypyc_attr

from amqplite import storeops as ops
from amqplite.broker.model import Message

#: RAM an owner may hold when its own limits name no body bytes (``retained_max_bytes``):
#: bodies, properties, keys and the overheads below, so empty bodies count too
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: entries an owner keeps when its own limits name no count (``retained_max_length``;
#: an x-lvc's ``x-max-length`` overrides it): every set is bounded in keys as well
DEFAULT_MAX_COUNT = 100_000
#: RAM one retained entry costs beyond its key's characters: the Retained object, its
#: slot in the set's OrderedDict and the key string's header. Measured with tracemalloc
#: (tests/broker/test_retained_store.py): 200,000 keys of 18 characters put into a
#: second owner of the same messages grew 223 bytes each
ENTRY_OVERHEAD = 200
#: RAM one held message costs beyond its body and properties: the Message object,
#: the properties' bytes header, its ``_held`` slot. Measured likewise: 499 bytes per
#: entry for an empty body and 20 bytes of properties, less the entry's 223
MESSAGE_OVERHEAD = 256

#: an owner's identity: (vhost, kind, name); kind "exchange" (or "mqtt" later)
OwnerId = tuple[str, str, str]


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class Retained:
    """One retained publication: its index key and the message (shared, pinned)."""

    key: str
    message: Message
    #: a PutRetained row exists (durable owner, persistent message)
    stored: bool = False

    @property
    def size(self) -> int:
        return self.message.body_size

    @property
    def memory(self) -> int:
        """The RAM this entry holds, its message's included (see ENTRY_OVERHEAD)."""
        return len(self.key) + ENTRY_OVERHEAD + message_memory(self.message)


def message_memory(m: Message) -> int:
    """The RAM a held message costs: body, properties, object (MESSAGE_OVERHEAD)."""
    return m.body_size + len(m.properties_raw) + MESSAGE_OVERHEAD


@mypyc_attr(native_class=False)
@attrs.define(slots=True)
class Limits:
    """Per-owner bounds: entries and body bytes (None: unbounded); ``max_memory``
    bounds the RAM the entries hold (bodies, properties, keys, overheads): the
    store's default when an owner names no body bytes."""

    max_count: int | None = None
    max_bytes: int | None = None
    max_memory: int | None = None


class RetainedSet:
    """The retained messages of one owner, in one of two orders.

    ``keyed``: one entry per key, replaced in place and moved to the newest
    end (last value cache, MQTT). Otherwise one entry per message, oldest
    first (recent history). Either way limits evict from the oldest end.
    """

    def __init__(self, owner: OwnerId, *, keyed: bool, durable: bool, limits: Limits) -> None:
        self.owner = owner
        self.keyed = keyed
        self.durable = durable
        self.limits = limits
        #: key (keyed) or message key (ordered) -> entry, oldest first
        self._items: OrderedDict[Any, Retained] = OrderedDict()
        #: body bytes of the entries
        self.bytes = 0
        #: RAM the entries hold (Retained.memory), what ``max_memory`` bounds
        self.memory = 0

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Retained]:
        return iter(self._items.values())

    def get(self, key: str) -> Retained | None:
        if self.keyed:
            return self._items.get(key)
        for r in reversed(self._items.values()):  # the newest with that key
            if r.key == key:
                return r
        return None


class RetainedStore:
    """Every owner's retained set; the one place retained messages are added or dropped."""

    def __init__(self, *, emit: Callable[[Any], None],
                 default_max_bytes: int = DEFAULT_MAX_BYTES,
                 default_max_count: int = DEFAULT_MAX_COUNT) -> None:
        #: appends a store operation to the broker's outbox
        self._emit = emit
        #: the RAM bound of an owner whose limits set no byte bound: retained bodies
        #: stay in RAM (pinned, never paged), so no owner may grow without one
        self.default_max_bytes = default_max_bytes
        #: the entry bound of an owner whose limits set no count
        self.default_max_count = default_max_count
        #: RAM every retained message and entry holds, each message once
        self.memory = 0
        self._sets: dict[OwnerId, RetainedSet] = {}
        #: message key -> (message, how many entries hold it): a queue entry of the
        #: same message read back from the store (recovery, spilled entries) takes
        #: this object, so its body sits in RAM once
        self._held: dict[int, tuple[Message, int]] = {}

    # ------------------------------------------------------------- owners
    def open(self, owner: OwnerId, *, keyed: bool, durable: bool,
             limits: Limits | None = None) -> RetainedSet:
        """The owner's set, created empty the first time."""
        rs = self._sets.get(owner)
        if rs is None:
            lim = limits or Limits()
            lim = Limits(self.default_max_count if lim.max_count is None else lim.max_count,
                         lim.max_bytes,
                         self.default_max_bytes if lim.max_bytes is None else lim.max_memory)
            rs = self._sets[owner] = RetainedSet(owner, keyed=keyed, durable=durable,
                                                 limits=lim)
        return rs

    def find(self, owner: OwnerId) -> RetainedSet | None:
        return self._sets.get(owner)

    def owners(self, vhost: str | None = None) -> list[RetainedSet]:
        return [rs for o, rs in self._sets.items() if vhost is None or o[0] == vhost]

    def close(self, owner: OwnerId, *, persist: bool = True) -> None:
        """The owner is gone (exchange deleted): its messages go, unpinned.

        ``persist=False`` when the owner's own deletion removes the rows
        (DeleteExchange does, in the same transaction)."""
        rs = self._sets.pop(owner, None)
        if rs is not None:
            self._clear(rs, persist=persist)

    # ----------------------------------------------------------- content
    def put(self, rs: RetainedSet, key: str, msg: Message) -> bool:
        """Retain ``msg`` under ``key``; True when a store write must commit first."""
        if rs.keyed:
            old = rs._items.pop(key, None)
            if old is not None:
                self._dropped(rs, old)
        store = rs.durable and msg.persistent
        r = Retained(key, msg, store)
        rs._items[key if rs.keyed else msg.key] = r
        self._hold(rs, r)
        if store:
            vhost, kind, name = rs.owner
            self._emit(ops.PutRetained(msg.key, vhost, kind, name, key, msg.exchange,
                                       msg.routing_key, msg.properties_raw, msg.body or b""))
        self._enforce(rs)
        return store

    def restore(self, rs: RetainedSet, key: str, msg: Message) -> None:
        """Recovery: a stored retained message comes back (nothing is written)."""
        r = Retained(key, msg, True)
        rs._items[key if rs.keyed else msg.key] = r
        self._hold(rs, r)
        self._enforce(rs)  # a limit lowered since (retained_max_bytes) applies now

    def message(self, key: int) -> Message | None:
        """The retained message with this key, if any (to share it, never copy it)."""
        held = self._held.get(key)
        return None if held is None else held[0]

    def totals_all(self) -> tuple[int, int]:
        """(messages, body bytes) of every retained message, each message once, however
        many owners keep it (the node's memory figures)."""
        return len(self._held), sum(m.body_size for m, _n in self._held.values())

    def memory_all(self) -> int:
        """The RAM the whole store holds: each held message once (body, properties,
        MESSAGE_OVERHEAD) and each entry (key, ENTRY_OVERHEAD); ``mem_retained``."""
        return self.memory

    def remove(self, rs: RetainedSet, key: str | None = None) -> int:
        """Drop the entries under ``key`` (every entry when None); how many went."""
        if key is None:
            n = len(rs)
            self._clear(rs, persist=True)
            return n
        gone = [k for k, r in rs._items.items() if r.key == key]
        for k in gone:
            self._dropped(rs, rs._items.pop(k))
        return len(gone)

    def commit_failed(self, failed: Iterable[Any]) -> int:
        """A submission failed for good: its retained messages were never stored and
        their publishers get basic.nack, so they are withdrawn (never handed out)."""
        ids: dict[OwnerId, set[int]] = {}
        for op in failed:
            if type(op) is ops.PutRetained:
                ids.setdefault((op.vhost, op.kind, op.owner), set()).add(op.message_id)
        n = 0
        for owner, keys in ids.items():
            rs = self._sets.get(owner)
            if rs is None:
                continue
            gone = [k for k, r in rs._items.items() if r.stored and r.message.key in keys]
            for k in gone:
                r = rs._items.pop(k)
                r.stored = False  # no row to delete
                self._dropped(rs, r)
            n += len(gone)
        return n

    def matching(self, rs: RetainedSet, pred: Callable[[str], bool]) -> list[Retained]:
        """Entries whose key satisfies ``pred`` (MQTT: a topic filter), oldest first."""
        return [r for r in rs if pred(r.key)]

    def totals(self, owner: OwnerId) -> tuple[int, int]:
        """(messages, body bytes) retained by ``owner``."""
        rs = self._sets.get(owner)
        return (0, 0) if rs is None else (len(rs), rs.bytes)

    # ----------------------------------------------------------- internal
    def _enforce(self, rs: RetainedSet) -> None:
        lim = rs.limits
        items = rs._items
        while items and ((lim.max_count is not None and len(items) > lim.max_count)
                         or (lim.max_bytes is not None and rs.bytes > lim.max_bytes)
                         or (lim.max_memory is not None and rs.memory > lim.max_memory)):
            _k, r = items.popitem(last=False)
            self._dropped(rs, r)

    def _hold(self, rs: RetainedSet, r: Retained) -> None:
        m = r.message
        rs.bytes += r.size
        rs.memory += r.memory
        m.pinned += 1
        held = self._held.get(m.key)
        self._held[m.key] = (m, 1 if held is None else held[1] + 1)
        self.memory += len(r.key) + ENTRY_OVERHEAD + (
            message_memory(m) if held is None else 0)

    def _release(self, r: Retained) -> None:
        m = r.message
        m.pinned -= 1
        _m, n = self._held[m.key]
        self.memory -= len(r.key) + ENTRY_OVERHEAD
        if n > 1:
            self._held[m.key] = (m, n - 1)
        else:
            del self._held[m.key]
            self.memory -= message_memory(m)

    def _dropped(self, rs: RetainedSet, r: Retained) -> None:
        rs.bytes -= r.size
        rs.memory -= r.memory
        self._release(r)
        if r.stored:
            self._emit(ops.DeleteRetained(*rs.owner, r.message.key))

    def _clear(self, rs: RetainedSet, *, persist: bool) -> None:
        for r in rs._items.values():
            self._release(r)
        stored = any(r.stored for r in rs._items.values())
        rs._items.clear()
        rs.bytes = 0
        rs.memory = 0
        if persist and stored:
            vhost, kind, name = rs.owner
            self._emit(ops.ClearRetained(vhost, kind, name))
