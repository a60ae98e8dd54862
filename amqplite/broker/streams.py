"""Streams (``x-queue-type: stream``): append-only logs read through per-consumer cursors.

RabbitMQ's semantics over AMQP 0-9-1. A publish appends at the next offset
(``AppendStream``); nothing is removed by consuming. Each consumer has a
cursor; it reads ahead in bounded batches through the store (``ReadStream``,
after every earlier submission has committed, so only committed entries are
delivered), and acks only free its prefetch window. A consumer at the end of
the log is woken by the next append: it asks for a read then, never polls.
Retention drops whole oldest segments, checked when a segment rolls over
(as RabbitMQ does); the open segment is never dropped.

Consumer groups (an amqplite extension, RabbitMQ 3.10 has no single active
consumer on streams over AMQP): consumers with the same
``x-stream-consumer-group`` (or ``x-single-active-consumer: true``, the stream
itself as one group) read one at a time; the next in registration order takes
over where the group's acks stopped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from amqplite.broker import errors as E
from amqplite.broker import persist as P
from amqplite.broker.base import STORED, Counters, DeliveryLog
from amqplite.broker.commands import BASIC_CONSUME, QUEUE_DECLARE
from amqplite.broker.effects import ReadStream, StreamDeliver
from amqplite.broker.model import ChannelState, Consumer, Delivery, Message
from amqplite.broker.outbox import Outbox
from amqplite.broker.policy import NOT_FOR_STREAMS
from amqplite.broker.queue import Queue
from amqplite.broker.streamlog import Cursor, Group, Segment, StreamEntry, StreamLog
from amqplite.protocol import streamrecord
from amqplite.protocol.codec import Timestamp
from amqplite.protocol.properties import long_header_splice, with_header
from amqplite.protocol.streamrecord import OFFSET_HEADER

#: the hot path's callables, looked up once
_AppendStreams = P.ops.AppendStreams
_new_tuple = tuple.__new__

#: the consume argument saying where a consumer starts: the offset header's name
OFFSET_ARG = OFFSET_HEADER
#: consumer arguments of amqplite's stream consumer groups (RabbitMQ ignores them)
GROUP_ARG = "x-stream-consumer-group"
SAC_ARG = "x-single-active-consumer"


def group_name(arguments: dict[str, Any] | None) -> str | None:
    """The consumer group a consumer's arguments name: ``x-stream-consumer-group``, or
    "" (the stream as one group) for ``x-single-active-consumer: true``; None if neither.
    ValueError when the group name is not a string."""
    args = arguments or {}
    g = args.get(GROUP_ARG)
    if g is not None:
        if isinstance(g, bytes | bytearray):
            g = g.decode("utf-8", "replace")
        if not isinstance(g, str):
            raise ValueError(GROUP_ARG)
        return g
    return "" if args.get(SAC_ARG) is True else None


def describe_spec(spec: Any) -> str:
    """An x-stream-offset value as the delivery log records it."""
    if spec is None:
        return "next"
    if isinstance(spec, bytes | bytearray):
        return spec.decode("utf-8", "replace")
    if isinstance(spec, Timestamp):
        return f"timestamp:{int(spec)}"
    return str(spec)

log = logging.getLogger("amqplite.broker")


def _invalid_property(prop: str, name: str, vhost: str) -> Exception:
    return E.precondition(f"invalid property '{prop}' for queue '{name}' in vhost '{vhost}'",
                          QUEUE_DECLARE)


class Streams:
    """Declare checks, appends, cursors, reads and retention of stream queues.

    Receives the clock, the outbox (segment rows, appends, ReadStream and
    StreamDeliver effects), the counters and the delivery log; it calls no
    other part.
    """

    def __init__(self, *, now: Callable[[], float], outbox: Outbox, counters: Counters,
                 log: DeliveryLog) -> None:
        self.now = now
        self.outbox = outbox
        self.effects = outbox.effects
        self.stats = counters.stats
        self._dlog = log
        self._log_on = log.on
        self.log_event = log.log_event

    @staticmethod
    def check_stream_declare(name: str, vhost: str, *, durable: bool, exclusive: bool,
                             auto_delete: bool, arguments: dict[str, Any]) -> None:
        """RabbitMQ's refusals for a new stream: durable only, no queue-only arguments."""
        if not durable:
            raise _invalid_property("non-durable", name, vhost)
        if exclusive:
            raise _invalid_property("exclusive-owner", name, vhost)
        if auto_delete:
            raise _invalid_property("auto-delete", name, vhost)
        for arg in NOT_FOR_STREAMS:
            if arg in arguments:
                raise E.precondition(
                    f"invalid arg '{arg}' for queue '{name}' in vhost '{vhost}' of queue type "
                    "rabbit_stream_queue", QUEUE_DECLARE)

    # ------------------------------------------------------------ appending
    def stream_append(self, q: Queue, msg: Message) -> int:
        """Append ``msg`` at the next offset; its confirm waits for the commit."""
        st = q.stream
        body = msg.body
        assert st is not None and body is not None
        ts = self._dlog.ts or self._dlog.log_time()  # one time per batch, as a chunk's
        props = msg.properties_raw
        size = len(body) + len(props)
        off, seg = self._place(q, st, ts, size, 1)
        # stored as it will be delivered: the offset header spliced in once, here
        exchange, routing_key = msg.exchange, msg.routing_key
        route = st.routes.get((exchange, routing_key))
        if route is None:
            if len(st.routes) >= 256:
                st.routes.clear()
            route = st.routes[(exchange, routing_key)] = streamrecord.route(exchange,
                                                                             routing_key)
        # a publisher sends the same properties again and again: where the offset
        # goes in them is worked out once per stream and properties
        sp = st.splice
        if sp is None or (sp[0] is not props and sp[0] != props):
            parts = long_header_splice(props, OFFSET_HEADER)
            sp = st.splice = None if parts is None else (props, *parts)
        key = msg.key
        record: Any
        if sp is not None:  # joined by the writer, off the event loop (see AppendStream)
            record = (route, sp[1], sp[2], body)
        else:
            record = streamrecord.pack(ts, key, route,
                                       with_header(props, OFFSET_HEADER, off, "l"), body)
        self._add_entry(q, (off, seg.number, ts, key, size, record))
        # "appended", not "routed": a stream entry is never settled, so the audit's
        # per-message states (in flight, stuck) must not count it
        if self._log_on:
            self._dlog.rows.append((ts, "appended", q.vhost, exchange, routing_key,
                             q.name, msg._mid if msg._mid is not None else msg.log_id,
                             key, None, None,
                             len(body), f"offset:{off}", None))
        if st.on_append is not None:
            st.on_append()
        return STORED

    def stream_append_batch(self, q: Queue, batch: bytes | memoryview, count: int, key: int,
                            protocol: str | None) -> int:
        """Append a Kafka record batch as one record spanning ``count`` offsets (see
        ``stream_publish_batch``); its first offset. The segment counts its bytes."""
        st = q.stream
        assert st is not None
        ts = self._dlog.ts or self._dlog.log_time()
        size = len(batch)
        off, seg = self._place(q, st, ts, size, count)
        self._add_entry(q, (off, seg.number, ts, key, size,
                            streamrecord.pack_batch(ts, key, count, batch)))
        if self._log_on:
            reason = f"offset:{off}-{off + count - 1} records:{count}"
            rows = self._dlog.rows
            rows.append((ts, "published", q.vhost, "", "", None, "", key, None, None, size,
                         f"records:{count}", protocol))
            rows.append((ts, "appended", q.vhost, "", "", q.name, "", key, None, None, size,
                         reason, None))
        if st.on_append is not None:
            st.on_append()
        return off

    def _place(self, q: Queue, st: StreamLog, ts: int, size: int, span: int,
               ) -> tuple[int, Segment]:
        """An entry's first offset and segment (``StreamLog.append``); a segment it seals
        or opens is stored, and opening one applies retention."""
        off, seg, sealed, opened = st.append(ts, size, q.segment_size, span)
        if sealed is not None:
            self._put_segment(q, sealed)
        if opened:
            self._put_segment(q, seg)
            self._apply_retention(q, ts)
        return off, seg

    def _add_entry(self, q: Queue, entry: P.ops.StreamEntryRow) -> None:
        """Appends to one stream in a row share one op (see AppendStreams), built as the
        NamedTuple's own __new__ does, minus its Python-level frame."""
        ops = self.outbox._ops  # the list: CPython specialises list.append
        last = ops[-1] if ops else None
        if type(last) is _AppendStreams and last.queue_id == q.id:
            last.entries.append(entry)
        else:
            ops.append(_new_tuple(_AppendStreams, (q.id, [entry])))

    def _put_segment(self, q: Queue, s: Segment) -> None:
        self.outbox.emit(P.ops.PutStreamSegment(q.id, *s.row(), s.size))

    def _apply_retention(self, q: Queue, now_us: int) -> None:
        """Drop the oldest segments beyond x-max-length-bytes / x-max-age: two range
        deletes in the store whatever their size, cursors moved past them."""
        st = q.stream
        assert st is not None
        n = st.over_retention(q.max_bytes, q.max_age, now_us)
        if not n:
            return
        first = st.drop(n)
        self.outbox.emit(P.ops.DeleteStreamSegments(q.id, st.segments[0].number, first))
        self.log_event("purged", q.vhost, None, q.name, reason=f"retention:segments={n}")

    # ------------------------------------------------------------ consuming
    def stream_attach(self, ch: ChannelState, q: Queue, no_ack: bool,
                      arguments: dict[str, Any] | None) -> tuple[int, int | None]:
        """basic.consume on a stream: RabbitMQ's checks, then where the consumer starts."""
        cm = BASIC_CONSUME
        st = q.stream
        assert st is not None
        if no_ack:
            raise E.not_implemented("automatic acknowledgement not supported by stream queues "
                                    f"queue '{q.name}' in vhost '{q.vhost}'", cm)
        if not ch.prefetch:
            raise E.precondition("consumer prefetch count is not set for "
                                 f"'queue '{q.name}' in vhost '{q.vhost}''", cm)
        spec = (arguments or {}).get(OFFSET_ARG)
        try:
            group_name(arguments)
        except ValueError:
            raise E.precondition(f"invalid arg '{GROUP_ARG}' for queue '{q.name}' in vhost "
                                 f"'{q.vhost}': expected a string", cm) from None
        try:
            return st.resolve(spec, self.now())
        except ValueError as exc:
            raise E.precondition(f"{exc} for queue '{q.name}' in vhost '{q.vhost}'", cm) \
                from None

    def stream_add_cursor(self, q: Queue, c: Consumer, start: tuple[int, int | None]) -> None:
        """A consumer reads from ``start``; a group member waits while another is
        active, and a group that read before goes on where it stopped."""
        st = q.stream
        assert st is not None
        spec = describe_spec(c.arguments.get(OFFSET_ARG))
        name = group_name(c.arguments)
        if name is None:
            st.cursors[c] = Cursor(c, *start)
            self.log_event("attached", q.vhost, None, q.name, consumer_tag=c.tag,
                           reason=f"offset:{start[0]} spec={spec}")
            return
        g = st.groups.get(name)
        if g is None:
            g = st.groups[name] = Group(name)
        g.members.append(c)
        st.member_of[c] = g
        if g.active is not None or g.leaving is not None:
            self.log_event("attached", q.vhost, None, q.name, consumer_tag=c.tag,
                           reason=f"waiting spec={spec} group={name}")
            return
        if g.offset is not None:
            start = (max(g.offset, st.first_offset), None)
        self._activate(q, g, c, start, f"spec={spec}")

    def _activate(self, q: Queue, g: Group, c: Consumer, start: tuple[int, int | None],
                  how: str) -> None:
        st = q.stream
        assert st is not None
        g.active = c
        g.offset = start[0]
        st.cursors[c] = Cursor(c, *start)
        self.log_event("attached", q.vhost, None, q.name, consumer_tag=c.tag,
                       reason=f"offset:{start[0]} {how} group={g.name}")

    def stream_detach(self, q: Queue, c: Consumer) -> bool:
        """``c`` stops reading (cancel, channel or connection closed). When it was its
        group's active member, the next member takes over at the group's resume point;
        True then (the caller dispatches)."""
        st = q.stream
        assert st is not None
        cur = st.cursors.pop(c, None)
        if not st.cursors:
            st.shed()
        g = st.member_of.pop(c, None)
        if g is None:
            return False
        g.members.remove(c)
        if g.active is not c:
            return False
        g.active = None
        if cur is None:
            return self._hand_over(q, g)
        if c.channel.open and c.unacked:
            g.leaving = (c, cur)  # cancelled: its successor waits for those to settle
            return False
        g.offset = st.resume_point(cur)
        return self._hand_over(q, g)

    def _hand_over(self, q: Queue, g: Group) -> bool:
        st = q.stream
        assert st is not None
        if not g.members or q.deleted:
            return False
        start = st.first_offset if g.offset is None else max(g.offset, st.first_offset)
        self._activate(q, g, g.members[0], (start, None), "takeover")
        return True

    def _settle_leaving(self, q: Queue) -> None:
        """Groups whose cancelled member's deliveries are now all acked (or its channel
        closed): the group goes on after what it acked, with the next member."""
        st = q.stream
        assert st is not None
        for g in st.groups.values():
            if g.leaving is None:
                continue
            c, cur = g.leaving
            if c.channel.open and c.unacked:
                continue
            g.leaving = None
            g.offset = st.resume_point(cur)
            self._hand_over(q, g)

    def stream_channel_closing(self, ch: ChannelState) -> None:
        """Before a closing channel's deliveries are forgotten: note each reading
        cursor's lowest unsettled offset (where its group resumes)."""
        for d in ch.unacked.values():
            st = d.queue.stream
            if st is None or d.consumer is None:
                continue
            cur = st.cursors.get(d.consumer)
            if cur is None:  # a cancelled group member its successor waits for
                cur = next((g.leaving[1] for g in st.groups.values()
                            if g.leaving is not None and g.leaving[0] is d.consumer), None)
            if cur is not None and (cur.unsettled is None or d.entry.position < cur.unsettled):
                cur.unsettled = d.entry.position

    def _stream_dispatch(self, q: Queue) -> None:
        """Deliver read-ahead entries to consumers with room; ask for the next batch
        of any cursor running low while the log has more."""
        st = q.stream
        assert st is not None
        if q.deleted:
            return
        if st.groups:
            self._settle_leaving(q)
        if not st.cursors:  # every append dispatches: no reader, nothing to do
            return
        limit = st.read_limit()
        for c, cur in st.cursors.items():
            buf = cur.buffer
            self._take_pending(st, cur, limit)
            if buf:
                self._stream_deliver(q, c, buf)
                if self._take_pending(st, cur, limit):
                    self._stream_deliver(q, c, buf)
            while (not cur.reading and cur.pending is None and len(buf) < limit
                   and cur.offset < st.next_offset):
                lo = max(cur.offset, st.first_offset)
                chunk = st.cached(lo) if st.cache else None
                if chunk is not None:  # another cursor's read has it: no store read
                    self._take_entries(st, cur, ((*chunk, 0),), limit - len(buf))
                    self._stream_deliver(q, c, buf)
                    continue
                owner = st.loading.get(lo)
                cur.reading = True
                if owner is not None:  # the same chunk is on its way for another cursor
                    if owner.waiters is None:
                        owner.waiters = []
                    owner.waiters.append(cur)
                else:
                    st.loading[lo] = cur
                    self.effects.append(ReadStream(q, cur, cur.offset, st.next_offset - 1,
                                                   limit))

    def _stream_deliver(self, q: Queue, c: Consumer, buf: deque[StreamEntry]) -> None:
        """As many read-ahead entries as ``c`` has room for, as one batch effect.

        What ``_deliver`` does per entry, minus what a stream never needs (no
        store row to mark, no message to pin, no log row): the unacked
        bookkeeping acks, channel closes and group hand-overs rely on stays.
        """
        ch = c.channel
        if not ch.flow or not ch.session.writable:
            return
        room = c.prefetch - c.unacked if c.prefetch else len(buf)
        if ch.global_prefetch:
            room = min(room, ch.global_prefetch - len(ch.unacked))
        n = min(room, len(buf))
        if n <= 0:
            return
        first = tag = ch.next_tag
        unacked = ch.unacked
        batch = [buf.popleft() for _ in range(n)]
        for se in batch:
            unacked[tag] = Delivery(tag, q, se, c)
            tag += 1
        ch.next_tag = tag
        c.unacked += n
        q.unacked += n
        self.stats["delivered"] += n
        self.stats["delivered_consume_manual_ack"] += n  # stream consumers must ack
        q.n_deliver += n
        ch.n_deliver += n
        self.effects.append(StreamDeliver(ch, c.tag, first, batch))

    def stream_loaded(self, q: Queue, cur: Cursor, chunks: list[tuple[int, int, bytes]],
                      hi: int, limit: int | None = None) -> None:
        """Chunks read for ``cur`` (as ``Store.fetch_stream`` gives them): their entries
        from the cursor's offset on, at most ``limit``, join its read-ahead.

        A chunk may start below the cursor: the entries before it are skipped here
        (RabbitMQ sends the whole chunk and leaves the skipping to the client), so
        a consumer never receives an offset below the one it asked for. The read ran
        after every append up to ``hi`` had committed (or failed), so an empty answer
        means nothing below ``hi`` is coming: the cursor moves on.
        """
        cur.reading = False
        st = q.stream
        if q.deleted or st is None:
            return
        st.loaded(cur, chunks)
        if st.cursors.get(cur.consumer) is not cur:  # gone meanwhile: its waiters read on
            self._stream_dispatch(q)
            return
        found = self._take_entries(st, cur, [(first, count, data, 0)
                                             for first, count, data in chunks], limit)
        if not found:
            cur.offset = max(cur.offset, hi + 1)
        self._stream_dispatch(q)

    def _take_pending(self, st: StreamLog, cur: Cursor, limit: int) -> bool:
        """Top the read-ahead up from the rest of the last chunk read, if it runs low
        (no store read: the chunk is in memory); True if entries were taken."""
        p = cur.pending
        if p is None or len(cur.buffer) >= limit:
            return False
        data, at, off, end = p
        return self._take_entries(st, cur, ((off, end - off, data, at),), limit)

    @staticmethod
    def _take_entries(st: StreamLog, cur: Cursor, chunks: Iterable[tuple[int, int, bytes, int]],
                      limit: int | None) -> bool:
        """Walk ``chunks`` (first offset, entries, data, start of the first record) into
        the cursor's read-ahead from its offset on, at most ``limit``; what is left of
        the chunk where it stops becomes ``cur.pending``. True if any entry was at or
        past the cursor. From a stored Kafka batch on, the rest of its chunk is walked
        by ``_take_batched`` (this loop stays the AMQP entries' fast path)."""
        cur.pending = None
        lo = max(cur.offset, st.first_offset)
        left = limit if limit is not None else -1
        buf = cur.buffer
        min_ts = cur.min_ts
        head = streamrecord.HEAD.unpack_from
        size = streamrecord.HEAD_SIZE
        batch_mark = streamrecord.BATCH
        found = False
        for first, count, data, at in chunks:
            end = first + count
            for off in range(first, end):
                ts, _key, rl, pl, bl = head(data, at)
                if rl == batch_mark:
                    got, left, stop = Streams._take_batched(st, cur, data, at, off, end, lo,
                                                            left)
                    found = found or got
                    if stop:
                        return True
                    min_ts = cur.min_ts
                    break
                if off >= lo:
                    found = True
                    cur.offset = off + 1
                    if min_ts is None:
                        buf.append(StreamEntry(off, data, at))
                    elif ts >= min_ts:
                        min_ts = cur.min_ts = None
                        buf.append(StreamEntry(off, data, at))
                    left -= 1
                    if not left:
                        if off + 1 < end:
                            cur.pending = (data, at + size + rl + pl + bl, off + 1, end)
                        return True
                at += size + rl + pl + bl
        return found

    @staticmethod
    def _take_batched(st: StreamLog, cur: Cursor, data: bytes, at: int, off: int, end: int,
                      lo: int, left: int) -> tuple[bool, int, bool]:
        """``_take_entries`` for the rest of a chunk from ``off`` (at ``at``) on, where
        stored Kafka batches lie: each is read as its expanded entries
        (``StreamLog.expansion``); stopping inside one, ``pending`` starts at the batch
        again and the entries already taken are skipped. (found, left, stopped)."""
        buf = cur.buffer
        head = streamrecord.HEAD.unpack_from
        size = streamrecord.HEAD_SIZE
        batch_mark = streamrecord.BATCH
        found = False
        while off < end:
            ts, _key, rl, pl, bl = head(data, at)
            min_ts = cur.min_ts
            if rl != batch_mark:
                pl, rl, exp, starts = 1, rl + pl, data, [at]
            elif off + pl > lo and (min_ts is None or ts >= min_ts):
                exp, starts = st.expansion(off, data, at)
                rl = 0
            else:
                exp, starts, rl = data, [], 0
            nxt = off + pl
            if nxt > lo:
                found = True
                cur.offset = nxt  # a batch older than the cursor's time is skipped whole
            for i in range(max(0, lo - off), len(starts)):
                if min_ts is not None and ts < min_ts:
                    break
                cur.min_ts = min_ts = None
                cur.offset = off + i + 1
                buf.append(StreamEntry(off + i, exp, starts[i]))
                left -= 1
                if not left:
                    if i + 1 < pl:
                        cur.pending = (data, at, off, end)
                    elif nxt < end:
                        cur.pending = (data, at + size + rl + bl, nxt, end)
                    return True, left, True
            off = nxt
            at += size + rl + bl
        return found, left, False

    def stream_load_failed(self, q: Queue, cur: Cursor) -> None:
        """The read failed (logged by the shell): the next dispatch asks again."""
        cur.reading = False
        if q.stream is not None:
            q.stream.loaded(cur, [])
        if not q.deleted:
            self._stream_dispatch(q)

    def restore_stream(self, q: Queue, segments: list[tuple[int, int, int, int, int, int]],
                       ) -> None:
        """Recovery: the segments the store kept, offsets continue after the last."""
        if q.stream is not None:
            q.stream.restore(segments)

    @staticmethod
    def stream_info(q: Queue) -> dict[str, Any] | None:
        """Admin figures of a stream (None for other queues)."""
        st = q.stream
        if st is None:
            return None
        return {"first_offset": st.first_offset, "last_offset": st.next_offset - 1,
                "messages": st.count, "segments": len(st.segments), "size_bytes": st.bytes,
                "consumer_groups": [
                    {"name": g.name, "members": len(g.members),
                     "active": g.active.tag if g.active is not None else None,
                     "offset": g.offset} for g in st.groups.values()]}
