"""Message handlers: get, peek, move and replay (dead letters), trace."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import trio

from amqplite.admin import moves, views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.messages import ACK_MODES, death_summary, matches, parse_filter
from amqplite.admin.plumbing import (
    HTTPError,
    Request,
    Response,
    _exchange_name,
    bad_request,
    from_amqp,
    not_found,
)
from amqplite.admin.validate import body_int, body_str
from amqplite.broker.effects import NeedPageIn
from amqplite.broker.paging import Pager, entry_from_row
from amqplite.protocol.errors import AMQPError

if TYPE_CHECKING:
    from amqplite.broker.model import Entry
    from amqplite.broker.queue import Queue


#: entries whose bodies one store read of a peek fetches
PEEK_PAGE = 200
#: entries (and body bytes) a filtered peek examines per step
FILTER_CHUNK = 500
FILTER_CHUNK_BYTES = 16 * 1024 * 1024


def _cost(e: Entry, truncate: int | None) -> int:
    """What showing ``e`` takes of a peek's byte cap: payload (cut to ``truncate``) and
    properties."""
    m = e.message
    return (m.body_size if truncate is None else min(m.body_size, truncate)) + len(
        m.properties_raw)


class MessageHandlers(HandlerBase):
    """Routes tagged ``messages``."""

    async def get_messages(self, req: Request) -> Response:
        vh, q = self._queue(req)
        body = req.json()
        # RabbitMQ: 0 gets nothing (an empty list), strings are numbers
        count = body_int(body, "count", 1, lenient=True)
        assert count is not None
        ackmode = body_str(body, "ackmode", "ack_requeue_true")
        if ackmode not in ACK_MODES:
            raise bad_request(f"ackmode must be one of {', '.join(ACK_MODES)}")
        encoding = body_str(body, "encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        truncate = body_int(body, "truncate", None, lenient=True)
        ch = self._channel(vh.name, self._actor(req))
        out: list[dict[str, Any]] = []
        try:
            for _ in range(count):
                for _attempt in range(20):
                    r = self.server.execute(self.broker.basic_get, ch, q.name, no_ack=False)
                    if not isinstance(r, NeedPageIn):
                        break
                    await self.server.wait_paged(vh.name, q.name)
                else:
                    raise HTTPError(503, "unavailable", "message body could not be paged in")
                if r is None:
                    break
                msg = r.message
                info = views.message_info(msg, msg.body, redelivered=r.redelivered,
                                          encoding=encoding or "auto", truncate=truncate,
                                          properties_raw=r.properties)  # x-delivery-count
                info["message_count"] = r.message_count
                out.append(info)
        except AMQPError as exc:
            self._close(ch)
            raise from_amqp(exc) from None
        except BaseException:
            self._close(ch)
            raise

        def settle() -> None:
            """Ack (the messages leave the queue) or requeue them; answered from this
            step's own commit."""
            try:
                if not out:
                    return
                if ackmode == "ack_requeue_false":
                    self.broker.basic_ack(ch, 0, multiple=True)
                else:
                    self.broker.basic_nack(ch, 0, multiple=True,
                                           requeue=ackmode.endswith("requeue_true"))
            finally:
                self.broker.close_channel(ch)
        await self._write(settle)
        return Response(out)

    async def peek_messages(self, req: Request) -> Response:
        """Ready messages without consuming them, bounded by count and by payload bytes
        (``admin_peek_max_bytes``): headers ``x-max-bytes-reached: true`` and ``x-max-bytes``
        say the answer stopped at the byte cap before ``limit``."""
        vh, q = self._queue(req)
        self._check_read(req, vh.name, q.name)
        limit = req.int_arg("limit", 100, 0, 100_000)
        offset = req.int_arg("offset", 0)
        truncate = req.int_arg("truncate", -1, -1)
        encoding = req.query.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        try:
            parts = [f for v in req.query_all.get("filter", []) for f in v.split(",") if f]
            flt = parse_filter(parts or None)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        total = q.message_count
        cap = self.server.settings.admin_peek_max_bytes_value
        shown = None if truncate < 0 else truncate
        if not flt:
            picked = await self._window(q, offset, limit, shown, cap)
        else:
            picked = await self._filtered(q, flt, offset, limit, shown, cap)
        out, cut = await self._render(picked, encoding, shown, cap)
        headers = {"x-total-count": str(total)}
        if cut:
            headers.update({"x-max-bytes-reached": "true", "x-max-bytes": str(cap)})
        return Response(out, headers=headers)

    async def _render(self, picked: list[tuple[int, Entry]], encoding: str,
                      truncate: int | None, cap: int) -> tuple[list[dict[str, Any]], bool]:
        """Peeked entries as JSON, at most ``cap`` payload and property bytes in all; True
        when entries were left out for it. Sizes are known without the bodies, so only
        the bodies shown are read, a page at a time off the event loop: a peek of a deep
        queue costs the broker one page of bodies, not the queue. A first entry larger
        than the cap is shown cut to it, so any message can be looked at."""
        out: list[dict[str, Any]] = []
        budget = cap
        for start in range(0, len(picked), PEEK_PAGE):
            take: list[tuple[int, Entry, int]] = []
            cut = False
            for i, e in picked[start:start + PEEK_PAGE]:
                m = e.message
                size = m.body_size if truncate is None else min(m.body_size, truncate)
                cost = _cost(e, truncate)
                if cost > budget:
                    if not out and not take:
                        take.append((i, e, max(0, budget - len(m.properties_raw))))
                        budget = 0
                    cut = True
                    break
                take.append((i, e, size))
                budget -= cost
            bodies = await self._read_bodies([e for _, e, _ in take])
            for i, e, shown in take:
                m = e.message
                body = m.body if m.body is not None else bodies.get(m.key)
                info = views.entry_info(e, i, body, encoding=encoding, truncate=shown)
                info["truncated"] = body is not None and shown < m.body_size
                out.append(info)
            del bodies
            if cut:
                return out, True
        return out, False

    async def _read_bodies(self, entries: list[Entry]) -> dict[int, bytes]:
        """Paged-out bodies of ``entries`` through the store's reads (off the loop)."""
        keys = [e.message.key for e in entries if e.message.body is None]
        p = self.server.persistence
        if not keys or p is None:
            return {}
        result: dict[int, bytes] = await p.read("fetch_bodies", keys)
        return result

    async def _walk(self, q: Queue, skip: int = 0, count: int | None = None,
                    ) -> AsyncGenerator[list[tuple[int, Entry]], None]:
        """The ready entries from index ``skip`` (``count`` of them, or all) in queue order,
        with their index, a chunk at a time: the head in RAM, then the run spilled to the
        store, then the tail in RAM (``ReadyList``). Spilled entries are read a page at a
        time (as the broker loads them back) through the store's reads, off the event
        loop, and come with their bodies; RAM entries may lack theirs (paged out). The
        layout is taken when the walk starts: a peek is a look, not a transaction."""
        r = q.ready
        end = None if count is None else skip + count
        if r.disk_count:
            head, tail = r.ram_parts()
        else:
            head, tail = deque(), deque()  # nothing spilled: one run, the iteration's
        n_head = len(head) if r.disk_count else len(r)
        n_disk, lo, hi = r.disk_count, r.disk_lo, r.disk_hi
        batch = Pager.load_batch(r) if n_disk else 0
        # RAM parts are copied (references) before the first await: they change meanwhile
        ram_head = list(itertools.islice(head if r.disk_count else r, skip, end))
        t0 = n_head + n_disk
        ram_tail = list(itertools.islice(tail, max(0, skip - t0),
                                         None if end is None else max(0, end - t0)))
        for start in range(0, len(ram_head), FILTER_CHUNK):
            yield list(enumerate(ram_head[start:start + FILTER_CHUNK], skip + start))
            await trio.lowlevel.checkpoint()
        p = self.server.persistence
        i = n_head
        while n_disk and p is not None and i < n_head + n_disk and (end is None or i < end):
            rows = await p.read("fetch_entries", q.id, lo, hi, batch)
            page = []
            for row in rows:
                if i >= skip and (end is None or i < end):
                    page.append((i, entry_from_row(row)))
                i += 1
            if page:
                yield page
            if len(rows) < batch:
                break
            lo = rows[-1][0] + 1
        for start in range(0, len(ram_tail), FILTER_CHUNK):
            yield list(enumerate(ram_tail[start:start + FILTER_CHUNK],
                                 max(skip, t0) + start))
            await trio.lowlevel.checkpoint()

    async def _window(self, q: Queue, offset: int, limit: int, truncate: int | None,
                      cap: int) -> list[tuple[int, Entry]]:
        """Entries ``offset..offset+limit`` in queue order, spilled ones too, no more than
        ``_render`` can show within ``cap`` (one past it, so it knows it stopped)."""
        out: list[tuple[int, Entry]] = []
        budget = cap
        async with aclosing(self._walk(q, offset, limit)) as chunks:
            async for chunk in chunks:
                for i, e in chunk:
                    out.append((i, e))
                    budget -= _cost(e, truncate)
                    if budget < 0:
                        return out
        return out

    async def _filtered(self, q: Queue, flt: dict[str, str], offset: int, limit: int,
                        truncate: int | None, cap: int) -> list[tuple[int, Entry]]:
        """Ready entries (with their index) matching ``flt``, after ``offset`` matches,
        spilled ones too, up to what ``_render`` can show within ``cap``.

        The scan goes a chunk at a time and lets other tasks run between chunks; a
        ``body`` filter reads the paged-out bodies of one chunk (at most
        FILTER_CHUNK entries and FILTER_CHUNK_BYTES) at a time."""
        out: list[tuple[int, Entry]] = []
        skipped = 0
        budget = cap
        async with aclosing(self._walk(q)) as chunks:
            async for walked in chunks:
                start = 0
                while start < len(walked):
                    end, size = start, 0
                    while end < len(walked) and end - start < FILTER_CHUNK and (
                            end == start or size < FILTER_CHUNK_BYTES):
                        size += walked[end][1].message.body_size
                        end += 1
                    chunk = walked[start:end]
                    bodies = (await self._read_bodies([e for _, e in chunk])
                              if "body" in flt else {})
                    for i, e in chunk:
                        m = e.message
                        headers = moves._headers(m)
                        body = m.body if m.body is not None else bodies.get(m.key)
                        if not matches(flt, views.filter_fields(m, death_summary(headers)),
                                       headers, body):
                            continue
                        if skipped < offset:
                            skipped += 1
                            continue
                        out.append((i, e))
                        budget -= _cost(e, truncate)
                        if len(out) >= limit or budget < 0:
                            return out
                    del bodies
                    start = end
                del walked
        return out

    def _move_args(self, body: dict[str, Any]) -> tuple[int | None, dict[str, str]]:
        limit = body_int(body, "limit", None, lo=1)
        try:
            flt = parse_filter(body.get("filter"))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return limit, flt

    async def move_messages(self, req: Request) -> Response:
        vh, q = self._queue(req)
        body = req.json()
        limit, flt = self._move_args(body)
        to_queue = body_str(body, "to_queue")
        to_exchange = body_str(body, "to_exchange")
        if (to_queue is None) == (to_exchange is None):
            raise bad_request("give exactly one of to_queue or to_exchange (+ routing_key)")
        # as a consumer and a publisher of that user would need: read here, write there
        self._check_perm(req, vh.name, "read", "queue", q.name)
        self._check_perm(req, vh.name, "write", "exchange",
                         "" if to_exchange is None else _exchange_name(to_exchange))
        if to_queue is not None:
            dst = vh.queues.get(to_queue)
            if dst is None:
                raise not_found(f"no queue '{to_queue}' in vhost '{vh.name}'")
            if dst is q:
                raise bad_request("source and destination queue are the same")

            def resolve(e: Entry, death: Any) -> list[Queue] | str:
                return [dst] if not dst.deleted else f"queue '{to_queue}' was deleted"

            res = await moves.move(self.server, vh, q, resolve, limit=limit, flt=flt,
                                   exchange_for=lambda e: "", routing_key_for=lambda e: to_queue)
        else:
            assert to_exchange is not None
            xname = _exchange_name(to_exchange)
            rk = body_str(body, "routing_key")
            ex = vh.exchanges.get(xname)
            if ex is None:
                raise not_found(f"no exchange '{xname}' in vhost '{vh.name}'")

            def resolve(e: Entry, death: Any) -> list[Queue] | str:
                key = e.message.routing_key if rk is None else rk
                qs = [t for t in self.broker.route(vh, ex, key, e.message) if t is not q]
                return qs or f"unroutable: exchange '{xname}' routing key '{key}'"

            res = await moves.move(
                self.server, vh, q, resolve, limit=limit, flt=flt,
                exchange_for=lambda e: xname,
                routing_key_for=lambda e: e.message.routing_key if rk is None else rk)
        return Response(res.as_dict())

    async def replay_messages(self, req: Request) -> Response:
        vh, q = self._queue(req)
        body = req.json()
        limit, flt = self._move_args(body)
        target = body_str(body, "queue")
        to = body_str(body, "to", "origin")
        if to not in ("origin", "exchange"):
            raise bad_request("to must be origin (the queue it died in) or exchange")
        self._check_perm(req, vh.name, "read", "queue", q.name)
        if target is not None or to == "origin":  # enqueued by name: the default exchange
            self._check_perm(req, vh.name, "write", "exchange", "")
        user = req.user.name if req.user is not None else None
        if target is not None:
            dst = vh.queues.get(target)
            if dst is None:
                raise not_found(f"no queue '{target}' in vhost '{vh.name}'")
            if dst is q:
                raise bad_request("source and destination queue are the same")

        def origin(death: Any) -> tuple[str, list[str]] | None:
            if not death or not death.get("origin_queue"):
                return None
            return death.get("origin_exchange") or "", death.get("origin_routing_keys") or []

        def resolve(e: Entry, death: Any) -> list[Queue] | str:
            if target is not None:
                return [vh.queues[target]] if target in vh.queues else f"no queue '{target}'"
            o = origin(death)
            if o is None:
                return "not a dead-lettered message (no x-death header)"
            if to == "origin":
                oq = vh.queues.get(death["origin_queue"])
                if oq is None:
                    return f"origin queue '{death['origin_queue']}' does not exist"
                if oq is q:
                    return "origin queue is this queue"
                return [oq]
            ex = vh.exchanges.get(o[0])
            if ex is None:
                return f"origin exchange '{o[0]}' does not exist"
            if user is not None and not self.broker.may(user, vh.name, "write", "exchange", o[0]):
                return f"access to exchange '{o[0] or 'amq.default'}' refused for user '{user}'"
            found: dict[str, Queue] = {}
            for key in o[1] or [e.message.routing_key]:
                for t in self.broker.route(vh, ex, key, e.message):
                    if t is not q:
                        found[t.name] = t
            return list(found.values()) or f"unroutable via exchange '{o[0]}'"

        def exchange_for(e: Entry) -> str:
            if target is not None or to == "origin":
                return ""
            d = death_summary(moves._headers(e.message)) or {}
            return d.get("origin_exchange") or ""

        def routing_key_for(e: Entry) -> str:
            if target is not None:
                return target
            d = death_summary(moves._headers(e.message)) or {}
            if to == "origin":
                return d.get("origin_queue") or e.message.routing_key
            keys = d.get("origin_routing_keys") or [e.message.routing_key]
            return keys[0]

        res = await moves.move(self.server, vh, q, resolve, limit=limit, flt=flt,
                               exchange_for=exchange_for, routing_key_for=routing_key_for)
        return Response(res.as_dict())

    async def trace_message(self, req: Request) -> Response:
        """A message's delivery-log rows, oldest first (``amqplite trace`` reads this).

        The read waits for pending store writes, so rows of what just happened
        are there, and runs in a thread on its own connection: SQLite readers do
        not block the writer (WAL).
        """
        from amqplite.audit.trace import TraceError, message_history

        store = self.server.store
        if store is None:
            raise HTTPError(503, "unavailable", "the store is not open")
        await moves.committed(self.server)
        try:
            rows = await trio.to_thread.run_sync(message_history, store.engine,
                                                 req.params["message"])
        except TraceError as exc:
            raise HTTPError(503, "unavailable", str(exc)) from None
        return Response(rows)  # a user other than an administrator: its vhosts' rows only
