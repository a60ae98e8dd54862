"""A queue: ready entries in position order, its consumers, and its counters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite.broker.model import Consumer, ReadyList

if TYPE_CHECKING:
    from amqplite.broker.model import Session


class Queue:
    __slots__ = (
        "arguments",
        "auto_delete",
        "consumers",
        "deleted",
        "durable",
        "exclusive_owner",
        "had_consumer",
        "id",
        "name",
        "next_position",
        "paging",
        "ready",
        "rr",
        "unacked",
        "vhost",
    )

    def __init__(
        self,
        qid: int,
        vhost: str,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: Session | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.id = qid
        self.vhost = vhost
        self.name = name
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.ready = ReadyList()
        self.consumers: list[Consumer] = []
        self.rr = 0
        self.unacked = 0
        self.next_position = 1
        self.had_consumer = False
        self.deleted = False
        #: True while a PageIn for this queue's head is outstanding.
        self.paging = False

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready)

    def take_position(self) -> int:
        p = self.next_position
        self.next_position = p + 1
        return p

    def pick_consumer(self) -> Consumer | None:
        """Round-robin: the next consumer after the last one served that has room."""
        cs = self.consumers
        n = len(cs)
        if n == 1:
            return cs[0] if cs[0].has_room() else None
        start = self.rr
        for i in range(n):
            c = cs[(start + i) % n]
            if c.has_room():
                self.rr = (start + i + 1) % n
                return c
        return None
