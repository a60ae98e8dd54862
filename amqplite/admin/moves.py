"""Moving ready messages between queues: the admin ``move`` and dead-letter ``replay``.

Each chunk is one synchronous step on the event loop: the copy is enqueued
in its target(s) and the original entry leaves the source queue before
control returns to trio, so the store operations of both (PutMessage +
PutEntry for the copy, DeleteEntry for the original) are handed to the store
in the same submission and land in the same group-commit transaction. A
crash therefore never loses a message or leaves it in both places. The call
returns only after that transaction has committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from amqplite.admin.messages import death_summary, matches
from amqplite.admin.views import filter_fields
from amqplite.admin.writes import own_commit
from amqplite.broker.model import Entry, Message

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView
    from amqplite.broker.core import VHost
    from amqplite.broker.queue import Queue

#: entries moved per synchronous step (keeps the event loop responsive)
CHUNK = 500

#: A target resolver: (entry, death summary) -> list of queues, or an error text.
Resolver = Callable[[Entry, "dict[str, Any] | None"], "list[Queue] | str"]


@attrs.define
class MoveResult:
    moved: int = 0
    skipped: int = 0
    errors: list[dict[str, Any]] = attrs.field(factory=list)
    remaining: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"moved": self.moved, "skipped": self.skipped, "errors": self.errors[:100],
                "remaining": self.remaining}


def _headers(msg: Message) -> Any:
    try:
        return msg.properties.headers
    except Exception:  # malformed properties: treat as no headers
        return None


async def load_bodies(server: NodeView, entries: list[Entry]) -> dict[int, bytes]:
    """Bodies of entries whose body is paged out, read from the store in a thread."""
    keys = [e.message.key for e in entries if e.message.body is None]
    if not keys or server.store is None:
        return {}
    store = server.store
    return await trio.to_thread.run_sync(store.fetch_bodies, keys)


async def committed(server: NodeView) -> None:
    """Hand everything the broker holds to the store and wait for that submission
    (which also orders it after every earlier one); RuntimeError if it failed."""
    err = await own_commit(server)
    if err is not None:
        raise RuntimeError(f"store commit failed: {err!r}")


async def move(server: NodeView, vh: VHost, src: Queue, resolve: Resolver, *,
               limit: int | None, flt: dict[str, str], exchange_for: Callable[[Entry], str],
               routing_key_for: Callable[[Entry], str]) -> MoveResult:
    """Move up to ``limit`` ready messages of ``src`` that match ``flt`` to their targets.

    A message whose target cannot take it (missing queue, unroutable, queue
    full) stays where it is and is reported in ``errors``.
    """
    broker = server.broker
    res = MoveResult()
    failed: set[int] = set()
    want = limit if limit is not None else float("inf")
    # Only what is in the queue now: copies that a route brings back into the
    # source itself get later positions and are left alone (no endless move).
    last_position = src.next_position - 1
    chunk_errors: list[BaseException] = []

    def chunk_committed(err: BaseException | None) -> None:
        if err is not None:
            chunk_errors.append(err)
    while res.moved < want:
        # 1. pick the next chunk of candidates (no mutation)
        cand: list[Entry] = []
        needs_body = "body" in flt
        room = min(CHUNK, want - res.moved)
        for e in src.ready:
            if len(cand) >= room:
                break
            if id(e) not in failed and e.position <= last_position:
                cand.append(e)
        if not cand:
            break
        bodies = await load_bodies(server, cand)
        # 2. one synchronous step: re-check, enqueue copies, drop originals
        present = {id(e) for e in src.ready} if not src.deleted else set()
        moving: list[tuple[Entry, list[Queue], str, str, bytes]] = []
        progress = False
        for e in cand:
            if id(e) not in present:
                continue  # consumed meanwhile
            msg = e.message
            body = msg.body if msg.body is not None else bodies.get(msg.key)
            headers = _headers(msg)
            death = death_summary(headers)
            if flt and not matches(flt, filter_fields(msg, death), headers,
                                   body if needs_body else b""):
                failed.add(id(e))
                res.skipped += 1
                progress = True
                continue
            targets = resolve(e, death)
            if isinstance(targets, str):
                failed.add(id(e))
                res.skipped += 1
                res.errors.append({"message_id": msg.message_id, "position": e.position,
                                   "reason": targets})
                progress = True
                continue
            if body is None:
                failed.add(id(e))
                res.errors.append({"message_id": msg.message_id, "position": e.position,
                                   "reason": "message body not found in the store"})
                res.skipped += 1
                progress = True
                continue
            full = [q.name for q in targets if broker.would_reject(q, msg)]
            if full:
                failed.add(id(e))
                res.skipped += 1
                res.errors.append({"message_id": msg.message_id, "position": e.position,
                                   "reason": f"queue '{full[0]}' is full (x-overflow)"})
                progress = True
                continue
            moving.append((e, targets, exchange_for(e), routing_key_for(e), body))
            res.moved += 1
            progress = True
        # the copies and the originals' removal: one step, one store submission
        broker.move_entries(vh, src, moving)
        server.interpret(flush=False)
        if server.persistence is not None:
            # rides on the submission that carries this chunk's ops
            server.persistence.add_waiter(chunk_committed)
            server.persistence.flush()
        if not progress:
            break
        await trio.sleep(0)
    await committed(server)
    if chunk_errors:
        raise RuntimeError(f"store commit failed: {chunk_errors[0]!r}")
    res.remaining = src.message_count
    return res
