"""Admin writes that answer from their own commit, and undo themselves when it fails.

A write runs as one synchronous step on the event loop (so its store
operations form one submission), then waits on a waiter attached to *that*
submission: the answer is that commit's result, never a later batch's. When
the commit fails, the :class:`Undo` journal recorded before each change puts
memory back as it was, so the API, the broker and the store agree.

Every undo step writes what it restores (a delete for what the write created,
a put of the old value for what it replaced or removed), through the broker's
own commands. A failed commit's metadata may still reach the store: the
failed submission may have landed (a writer killed before it answered), and
``server.persistence`` writes the metadata of failed submissions again. The
undo's ops are submitted after that re-submission, so the store ends as
memory does either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from amqplite.admin.plumbing import HTTPError
from amqplite.storeops import REPLAYABLE

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView
    from amqplite.broker.core import Broker

_R = TypeVar("_R")


async def own_commit(server: NodeView) -> BaseException | None:
    """Hand what the broker holds to the store as one submission and wait for it:
    that submission's error, or None once it has committed."""
    p = server.persistence
    server.interpret(flush=False)
    return None if p is None else await p.own_commit()


def commit_failed(err: BaseException, undone: bool, given_up: bool = False) -> HTTPError:
    """The answer to a write whose commit failed (``undone``: its journal ran;
    ``given_up``: the store refused its re-submissions too)."""
    what = ("so nothing was changed" if undone else
            "even when written again: it holds in memory only, until a restart"
            if given_up else "so it may be undone at a restart (look the object up)")
    return HTTPError(500, "internal_error",
                     f"the store did not commit this change, {what}: {err!r}")


class Undo:
    """A journal of how to put memory back, recorded before each change."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._steps: list[Callable[[], None]] = []

    def vhost(self, name: str) -> None:
        b = self.broker
        old = b.vhosts.get(name)
        desc = old.description if old is not None else ""

        def undo() -> None:
            if old is None:
                b.delete_vhost(name)
            elif b.vhosts.get(name) is old:
                b.add_vhost(name, desc)
        self._steps.append(undo)

    def user(self, name: str) -> None:
        b = self.broker
        old = b.users.get(name)

        def undo() -> None:
            if old is None:
                if b.users.get(name) is not None:
                    b.delete_user(name)
            else:
                b.put_user(old.name, old.password_hash, list(old.tags))
        self._steps.append(undo)

    def user_and_permissions(self, name: str) -> None:
        """A user about to be deleted: it and every permission it holds (journalled
        first, so they are undone after the user is back)."""
        for u, v in list(self.broker.permissions):
            if u == name:
                self.permission(u, v)
        for u, v in {(u, v) for u, v, _ in self.broker.topic_permissions.items(user=name)}:
            self.topic_permissions(u, v)
        self.user(name)

    def permission(self, user: str, vhost: str) -> None:
        b = self.broker
        old = b.permissions.get((user, vhost))

        def undo() -> None:
            if old is None:
                b.clear_permissions(user, vhost)
            elif user in b.users.users and vhost in b.vhosts:
                b.set_permissions(user, vhost, old.configure, old.write, old.read,
                                  stored=True)
        self._steps.append(undo)

    def topic_permissions(self, user: str, vhost: str) -> None:
        """A user's topic permissions in a vhost, all of them put back as they were."""
        b = self.broker
        old = dict(b.topic_permissions.of(user, vhost) or {})

        def undo() -> None:
            current = b.topic_permissions.of(user, vhost) or {}
            for exchange in [x for x in current if x not in old]:
                b.clear_topic_permissions(user, vhost, exchange)
            if user in b.users.users and vhost in b.vhosts:
                for tp in old.values():
                    if current.get(tp.exchange) != tp:
                        b.set_topic_permission(user, vhost, tp.exchange, tp.write, tp.read,
                                               stored=True)
        self._steps.append(undo)

    def policy(self, vhost: str, name: str) -> None:
        b = self.broker
        old = b.policies.get(vhost, {}).get(name)

        def undo() -> None:
            if vhost not in b.vhosts:
                return
            if old is None:
                b.clear_policy(vhost, name)
            else:
                b.set_policy(vhost, name, old.pattern, old.definition, old.priority,
                             old.apply_to, stored=True)
        self._steps.append(undo)

    def parameter(self, component: str, vhost: str, name: str) -> None:
        params = self.broker.parameters
        old = params.get(component, vhost, name)
        owner = params.defined_by(component, vhost, name)

        def undo() -> None:
            if vhost not in self.broker.vhosts:
                return
            if old is None:
                params.delete(component, vhost, name)
            else:
                params.put(component, vhost, name, old, defined_by=owner)
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
                b.drop_binding(v, binding)
            elif binding.source in v.exchanges:
                b._add_binding(v, v.exchanges[binding.source], binding,
                               durable=b._binding_durable(v, binding))
        self._steps.append(undo)

    def run(self) -> None:
        """Undo every recorded change, newest first."""
        steps, self._steps = self._steps, []
        for step in reversed(steps):
            step()


async def write(server: NodeView, step: Callable[[], _R], undo: Undo | None = None) -> _R:
    """Run ``step`` (synchronous: one store submission), answer from its commit.

    A refusal raised by ``step`` propagates after its journal has put memory
    back; a failed commit runs the journal and becomes a 500. A step with no
    journal (a delete: what it removed cannot be put back) whose ops are all
    written again by the repair answers from the repair: success once they
    committed, 500 if the store gave them up (and memory undid them)."""
    p = server.persistence
    abandoned = p.abandoned if p is not None else 0
    try:
        # with a journal, a step failing half-way drops its store ops (nothing of
        # them may reach the store) before the journal puts memory back; without
        # one, what it did stays done and its ops go to the store
        with server.broker.transaction(rollback=undo is not None) as tx:
            result = step()
    except BaseException:
        if undo is not None:
            undo.run()
        server.interpret()
        raise
    replayable = all(type(op) in REPLAYABLE for op in tx.ops)
    err = await own_commit(server)
    if err is not None:
        if undo is not None:
            server.execute(undo.run)
        elif replayable and p is not None:
            await p.repaired()
            if p.abandoned == abandoned:
                return result  # the re-submission stored it
            raise commit_failed(err, False, given_up=True)
        raise commit_failed(err, undo is not None)
    return result
