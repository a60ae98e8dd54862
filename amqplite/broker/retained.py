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

from amqplite.broker.model import Message
from amqplite.store import ops

#: body bytes an owner keeps when its own limits name none (``retained_max_bytes``)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

#: an owner's identity: (vhost, kind, name); kind "exchange" (or "mqtt" later)
OwnerId = tuple[str, str, str]


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


@attrs.define(slots=True)
class Limits:
    """Per-owner bounds: entries and body bytes (None: unbounded)."""

    max_count: int | None = None
    max_bytes: int | None = None


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
        self.bytes = 0

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
                 default_max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        #: appends a store operation to the broker's outbox
        self._emit = emit
        #: the byte bound of an owner whose limits set none: retained bodies stay in
        #: RAM (pinned, never paged), so no owner may grow without one
        self.default_max_bytes = default_max_bytes
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
            if lim.max_bytes is None:
                lim = Limits(lim.max_count, self.default_max_bytes)
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
                         or (lim.max_bytes is not None and rs.bytes > lim.max_bytes)):
            _k, r = items.popitem(last=False)
            self._dropped(rs, r)

    def _hold(self, rs: RetainedSet, r: Retained) -> None:
        m = r.message
        rs.bytes += r.size
        m.pinned += 1
        held = self._held.get(m.key)
        self._held[m.key] = (m, 1 if held is None else held[1] + 1)

    def _release(self, m: Message) -> None:
        m.pinned -= 1
        _m, n = self._held[m.key]
        if n > 1:
            self._held[m.key] = (m, n - 1)
        else:
            del self._held[m.key]

    def _dropped(self, rs: RetainedSet, r: Retained) -> None:
        rs.bytes -= r.size
        self._release(r.message)
        if r.stored:
            self._emit(ops.DeleteRetained(*rs.owner, r.message.key))

    def _clear(self, rs: RetainedSet, *, persist: bool) -> None:
        for r in rs._items.values():
            self._release(r.message)
        stored = any(r.stored for r in rs._items.values())
        rs._items.clear()
        rs.bytes = 0
        if persist and stored:
            vhost, kind, name = rs.owner
            self._emit(ops.ClearRetained(vhost, kind, name))
