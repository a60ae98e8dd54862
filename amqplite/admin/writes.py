"""Admin writes that answer from their own commit, and undo themselves when it fails.

A write runs as one synchronous step on the event loop (so its store
operations form one submission), then waits on a waiter attached to *that*
submission: the answer is that commit's result, never a later batch's. When
the commit fails, the :class:`Undo` journal recorded before each change puts
memory back as it was, so the API, the broker and the store agree (the
failed rows never reached the database). Undo only restores memory: what it
deletes was created by the failed write and has no row; what it restores
still has its old row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from amqplite.admin.plumbing import HTTPError

if TYPE_CHECKING:
    from amqplite.broker.core import Broker
    from amqplite.server.app import Server

_R = TypeVar("_R")


async def own_commit(server: Server) -> BaseException | None:
    """Hand what the broker holds to the store as one submission and wait for it:
    that submission's error, or None once it has committed."""
    p = server.persistence
    server.interpret(flush=False)
    if p is None:
        return None
    done = trio.Event()
    box: list[BaseException | None] = []

    def waiter(err: BaseException | None) -> None:
        box.append(err)
        done.set()

    p.add_waiter(waiter)  # rides on the submission carrying this step's ops
    p.flush()
    await done.wait()
    return box[0]


def commit_failed(err: BaseException, undone: bool) -> HTTPError:
    """The answer to a write whose commit failed (``undone``: its journal ran)."""
    what = ("so nothing was changed" if undone else
            "it holds until a restart, which forgets it")
    return HTTPError(500, "internal_error",
                     f"the store did not commit this change, {what}: {err!r}")


class Undo:
    """A journal of how to put memory back, recorded before each change."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._steps: list[Callable[[], None]] = []
        #: where the broker's pending store ops stood when the journal began
        self._ops_mark = len(broker.store_ops)

    def vhost(self, name: str) -> None:
        b = self.broker
        old = b.vhosts.get(name)
        desc = old.description if old is not None else ""

        def undo() -> None:
            if old is None:
                b.delete_vhost(name)
            else:
                old.description = desc
        self._steps.append(undo)

    def user(self, name: str) -> None:
        b = self.broker
        old = b.users.get(name)

        def undo() -> None:
            if old is None:
                if b.users.get(name) is not None:
                    b.delete_user(name)
            else:
                b.users.users[name] = old
        self._steps.append(undo)

    def user_and_permissions(self, name: str) -> None:
        """A user about to be deleted: it and every permission it holds."""
        self.user(name)
        for u, v in list(self.broker.permissions):
            if u == name:
                self.permission(u, v)

    def permission(self, user: str, vhost: str) -> None:
        b = self.broker
        old = b.permissions.get((user, vhost))

        def undo() -> None:
            if old is None:
                b.permissions.pop((user, vhost), None)
            else:
                b.permissions[(user, vhost)] = old
            b.permissions_epoch += 1
        self._steps.append(undo)

    def policy(self, vhost: str, name: str) -> None:
        b = self.broker
        old = b.policies.get(vhost, {}).get(name)

        def undo() -> None:
            if vhost not in b.vhosts:
                return
            table = b.policies.setdefault(vhost, {})
            if old is None:
                table.pop(name, None)
            else:
                table[name] = old
            b.apply_policies(vhost)
        self._steps.append(undo)

    def exchange(self, vhost: str, name: str) -> None:
        self._created(vhost, name, "exchanges", self.broker._delete_exchange)

    def queue(self, vhost: str, name: str) -> None:
        self._created(vhost, name, "queues", self.broker.delete_queue)

    def _created(self, vhost: str, name: str, table: str,
                 remove: Callable[[Any, Any], Any]) -> None:
        """Journal an object the step may create; an existing one is only checked for
        equivalence by a declare, never changed, so there is nothing to undo."""
        b = self.broker
        vh = b.vhosts.get(vhost)
        if vh is None or name in getattr(vh, table):
            return

        def undo() -> None:
            v = b.vhosts.get(vhost)
            obj = getattr(v, table).get(name) if v is not None else None
            if obj is not None:
                remove(v, obj)
        self._steps.append(undo)

    def binding(self, vhost: str, binding: Any) -> None:
        """A bind or an unbind of ``binding``: whichever it does is undone."""
        b = self.broker
        vh = b.vhosts.get(vhost)
        if vh is None:
            return
        was = vh.bound(binding)

        def undo() -> None:
            v = b.vhosts.get(vhost)
            if v is None or v.bound(binding) == was:
                return
            if not was:
                b._drop_binding(v, binding)
            elif binding.source in v.exchanges:  # its row is still in the store
                b.restore_binding(v, v.exchanges[binding.source], binding)
        self._steps.append(undo)

    def discard_ops(self) -> None:
        """Before the journal runs on a step that failed half-way: its store ops
        are dropped too (nothing of them may reach the store)."""
        del self.broker.store_ops[self._ops_mark:]

    def run(self) -> None:
        """Undo every recorded change, newest first."""
        steps, self._steps = self._steps, []
        for step in reversed(steps):
            step()


async def write(server: Server, step: Callable[[], _R], undo: Undo | None = None) -> _R:
    """Run ``step`` (synchronous: one store submission), answer from its commit.

    A refusal raised by ``step`` propagates after its journal has put memory
    back; a failed commit runs the journal and becomes a 500."""
    try:
        result = step()
    except BaseException:
        if undo is not None:
            undo.discard_ops()
            undo.run()
        server.interpret()
        raise
    err = await own_commit(server)
    if err is not None:
        if undo is not None:
            server.execute(undo.run)
        raise commit_failed(err, undo is not None)
    return result
