"""The broker's one outbox: store operations, wire effects and evictable entries.

Commands and the broker's parts emit store operations here; ``take`` (called
by ``Broker.take_outcome`` only) hands them to the shell as one submission.
Nothing outside ``amqplite/broker/`` sees the list itself: the shell asks for
broker commands, queries ``pending``, and groups all-or-nothing work in a
:meth:`Outbox.transaction`, whose ops vanish if it raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any


class Transaction:
    """The ops emitted since a transaction began, read-only (``ops``)."""

    __slots__ = ("_outbox", "mark")

    def __init__(self, outbox: Outbox, mark: int) -> None:
        self._outbox = outbox
        #: where the outbox's list stood when the transaction began
        self.mark = mark

    @property
    def ops(self) -> tuple[Any, ...]:
        """The store operations emitted inside this transaction so far."""
        return tuple(self._outbox._ops[self.mark:])


class Outbox:
    """Store operations awaiting the next outcome, in emission order.

    ``emit`` is the list's bound ``append`` (rebound by ``take``). The per-message
    paths inside broker/ (publish, ack, paging) append to ``_ops`` itself: a
    call through a bound builtin misses CPython's specialised ``list.append``,
    3% of a persistent publish-deliver-ack in scripts/bench_core.py.
    """

    __slots__ = ("_open", "_ops", "effects", "emit", "evictable")

    def __init__(self) -> None:
        self._ops: list[Any] = []
        #: wire effects, in order; parts hold this list itself (never rebound:
        #: ``take_outcome`` copies and clears it)
        self.effects: list[Any] = []
        #: (queue, entry) pairs whose bodies may leave RAM once committed (as ``effects``)
        self.evictable: list[Any] = []
        self.emit = self._ops.append
        #: transactions not yet closed, innermost last
        self._open: list[Transaction] = []

    def emit_all(self, ops: Iterable[Any]) -> None:
        """Emit several operations, in order."""
        self._ops.extend(ops)

    def pending(self) -> int:
        """How many operations wait for the next outcome (0: none)."""
        return len(self._ops)

    def peek(self) -> tuple[Any, ...]:
        """The pending operations, read-only (tests and checks; ``take`` hands them over)."""
        return tuple(self._ops)

    def take(self) -> list[Any]:
        """Hand over the pending operations and start an empty list (``take_outcome``'s part).

        Ops taken while a transaction is open are out of its reach: its mark
        moves to the new list's start.
        """
        ops = self._ops
        self._ops = []
        self.emit = self._ops.append
        for tx in self._open:
            tx.mark = 0
        return ops

    @contextmanager
    def transaction(self, rollback: bool = True) -> Iterator[Transaction]:
        """Group the ops emitted inside; if the body raises they are dropped
        (with ``rollback``), so none of a half-done change reaches the store.
        Transactions nest: an inner rollback drops only its own ops."""
        tx = Transaction(self, len(self._ops))
        self._open.append(tx)
        try:
            yield tx
        except BaseException:
            if rollback:
                del self._ops[tx.mark:]
            raise
        finally:
            self._open.remove(tx)
