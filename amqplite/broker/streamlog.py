"""A stream's log as the broker sees it: segments, offsets, and consumer cursors.

Pure data with the arithmetic of offsets and retention; the entries
themselves live in the store (chunk rows of ``stream_chunks``) and are read
back in bounded batches per cursor, so a stream of any length costs RAM for
its segment list and each consumer's read-ahead only. The part that drives it
(commands in, effects out) is ``broker/streams.py``.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqplite.protocol import streamrecord
from amqplite.protocol.codec import Timestamp
from amqplite.protocol.kafka.stored import expand

if TYPE_CHECKING:
    from amqplite.broker.model import Consumer

#: x-stream-max-segment-size-bytes when neither argument nor policy sets it (RabbitMQ's)
DEFAULT_SEGMENT_SIZE = 500_000_000
#: most entries one store read brings back for a cursor
READ_BATCH = 2000
#: what one read aims at in bytes: a log of large entries reads fewer at a time, so a
#: cursor's read-ahead (at most two reads' worth) stays about 4 MiB whatever their size.
#: Each read is a round trip to the writer process: at 1 MiB three readers of 1 KiB
#: entries waited on it (the broker 70 % busy) and read 103-113k entries/s each;
#: at 2 MiB, 122-136k (session 19, compiled, alternating runs)
READ_BYTES = 2 * 1024 * 1024
#: fewest entries one read brings back
MIN_READ = 8
#: bytes of chunks a stream keeps after a read, for its other cursors (readers of one
#: log tend to read the same chunks close together: one store read serves them all),
#: and bytes of Kafka batches it keeps expanded; never more (a larger chunk or batch is
#: not kept), and nothing once the stream has no cursor
CACHE_BYTES = 4 * READ_BYTES

_AGE = re.compile(r"^([0-9]+)([YMDhms])$")
_UNIT_SECONDS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}
#: ages are clamped to 100,000 years (in µs still an int64): RabbitMQ takes
#: ``<5000 digits>s`` as a max-age and ``<300 digits>Y`` as an offset, meaning
#: "keep all" and "from the start"
MAX_AGE_SECONDS = 100_000 * 365 * 86400
_MAX_AGE_DIGITS = len(str(MAX_AGE_SECONDS))


def parse_age(value: Any) -> float | None:
    """Seconds in an x-max-age / interval string (``7D``, ``12h``, ``30m``, ``10s``),
    RabbitMQ's units Y M D h m s, at most MAX_AGE_SECONDS; None when it is not one."""
    if isinstance(value, bytes | bytearray):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    m = _AGE.match(value)
    if m is None:
        return None
    digits = m.group(1).lstrip("0")
    if len(digits) > _MAX_AGE_DIGITS:  # int() would refuse past 4300 digits
        return MAX_AGE_SECONDS
    return min(int(digits or "0") * _UNIT_SECONDS[m.group(2)], MAX_AGE_SECONDS)


class Segment:
    """A contiguous range of offsets, with its size and time span (µs)."""

    __slots__ = ("first", "first_ts", "last", "last_ts", "number", "size")

    def __init__(self, number: int, first: int, last: int, first_ts: int, last_ts: int,
                 size: int) -> None:
        self.number, self.first, self.last = number, first, last
        self.first_ts, self.last_ts, self.size = first_ts, last_ts, size

    def row(self) -> tuple[int, int, int, int, int]:
        """(segment, first_offset, last_offset, first_ts_us, last_ts_us) for the store."""
        return self.number, self.first, self.last, self.first_ts, self.last_ts


class StreamEntry:
    """One entry read ahead or delivered: its offset and where its record lies in the
    chunk read from the store (``amqplite.protocol.streamrecord``). The frames are
    written from those bytes as they are; nothing of the entry is decoded."""

    __slots__ = ("at", "data", "position")

    def __init__(self, position: int, data: bytes, at: int) -> None:
        self.position = position
        self.data = data
        self.at = at

    @property
    def body_size(self) -> int:
        return int(streamrecord.HEAD.unpack_from(self.data, self.at)[4])


class Cursor:
    """One consumer's place in a stream: the next offset to read from the store and
    the entries read ahead but not yet delivered."""

    __slots__ = ("buffer", "consumer", "min_ts", "offset", "pending", "reading", "unsettled",
                 "waiters")

    def __init__(self, consumer: Consumer, offset: int, min_ts: int | None = None) -> None:
        self.consumer = consumer
        self.offset = offset
        #: lowest offset delivered and not acked when its channel closed (a group's
        #: next member resumes there)
        self.unsettled: int | None = None
        #: attached by timestamp: entries older than this (µs) are skipped on reading
        self.min_ts = min_ts
        self.buffer: deque[StreamEntry] = deque()
        #: a store read for this cursor is outstanding
        self.reading = False
        #: the rest of the last chunk read, not yet taken into ``buffer``: (chunk, record
        #: start, its offset, end offset). Taken before the next store read, so a read
        #: ends at a chunk boundary and no chunk crosses the process boundary twice; it
        #: costs no memory of its own (the buffer's last entries hold the same chunk)
        self.pending: tuple[bytes, int, int, int] | None = None
        #: other cursors waiting for this one's store read (they asked for the same
        #: offset while it was out); None when none do
        self.waiters: list[Cursor] | None = None


class Group:
    """A consumer group (amqplite's single active consumer on streams): members in
    registration order, the one active reading, and where the group goes on.

    ``offset`` is None until a member first attached; after a hand-over it is the
    first offset the group has not seen acked (in memory only: a restart forgets it).
    ``leaving`` is an active member cancelled with deliveries outstanding: the
    next one waits until they are acked or its channel closes.
    """

    __slots__ = ("active", "leaving", "members", "name", "offset")

    def __init__(self, name: str) -> None:
        self.name = name
        self.members: list[Consumer] = []
        self.active: Consumer | None = None
        self.offset: int | None = None
        self.leaving: tuple[Consumer, Cursor] | None = None


class StreamLog:
    """Segments in offset order (the last one open), the next offset, the cursors."""

    __slots__ = ("bytes", "cache", "cache_bytes", "cache_starts", "cursors", "expanded",
                 "expanded_bytes", "groups", "loading", "member_of", "next_offset",
                 "on_append", "routes", "segments", "splice")

    def __init__(self) -> None:
        #: (exchange, routing key) -> its route bytes in a record (publishers repeat them)
        self.routes: dict[tuple[str, str], bytes] = {}
        #: the last properties appended and where the offset header goes in them
        #: (``properties.long_header_splice``), or None
        self.splice: tuple[bytes, bytes, bytes] | None = None
        self.segments: deque[Segment] = deque()
        self.next_offset = 0
        self.bytes = 0
        #: one per consumer reading; a waiting group member has none
        self.cursors: dict[Consumer, Cursor] = {}
        #: consumer groups by name ("" = the stream itself as one group)
        self.groups: dict[str, Group] = {}
        self.member_of: dict[Consumer, Group] = {}
        #: called after each append while set: a reader that pulls (a Kafka Fetch
        #: waiting for ``max_wait_ms``) is woken instead of polling; None costs an
        #: append one attribute test
        self.on_append: Callable[[], None] | None = None
        #: the chunks read last by first offset -> (first offset, count, data), oldest
        #: read first, up to CACHE_BYTES: committed and never rewritten, so any cursor
        #: may take entries from them
        self.cache: dict[int, tuple[int, int, bytes]] = {}
        #: the cache's first offsets in order (chunks never overlap): found by bisection
        self.cache_starts: list[int] = []
        self.cache_bytes = 0
        #: store reads out, by the offset they start at -> the cursor that asked
        self.loading: dict[int, Cursor] = {}
        #: stored Kafka batches expanded for AMQP readers, by first offset -> (records,
        #: their starts), least recently used first, up to CACHE_BYTES: readers of one
        #: log reach the same batches close together, and each expands them once
        self.expanded: dict[int, tuple[bytes, list[int]]] = {}
        self.expanded_bytes = 0

    def expansion(self, offset: int, data: bytes, at: int) -> tuple[bytes, list[int]]:
        """The AMQP entries of the stored batch at ``offset`` (``kafka.stored.expand``)."""
        cache = self.expanded
        e = cache.pop(offset, None)
        if e is not None:
            cache[offset] = e  # the most recently used now
            return e
        e = expand(data, at, offset)
        size = len(e[0])
        if size > CACHE_BYTES:  # its reader holds it; kept, it would break the bound
            return e
        cache[offset] = e
        self.expanded_bytes += size
        while self.expanded_bytes > CACHE_BYTES:
            self.expanded_bytes -= len(cache.pop(next(iter(cache)))[0])
        return e

    def cached(self, offset: int) -> tuple[int, int, bytes] | None:
        """The cached chunk holding ``offset``, if any."""
        starts = self.cache_starts
        i = bisect_right(starts, offset) - 1
        if i < 0:
            return None
        c = self.cache[starts[i]]
        return c if offset < c[0] + c[1] else None

    def _uncache(self, first: int) -> None:
        starts = self.cache_starts
        del starts[bisect_left(starts, first)]
        self.cache_bytes -= len(self.cache.pop(first)[2])

    def loaded(self, cur: Cursor, chunks: list[tuple[int, int, bytes]]) -> None:
        """``cur``'s store read came back (``chunks``, maybe none): they join the
        cache, and the cursors waiting for it may read again."""
        cache = self.cache
        keep = bool(self.cursors)  # none left: nobody would read from the cache
        for c in chunks:
            if keep and c[1] and len(c[2]) <= CACHE_BYTES and self.cached(c[0]) is None:
                cache[c[0]] = c
                starts = self.cache_starts
                starts.insert(bisect_left(starts, c[0]), c[0])
                self.cache_bytes += len(c[2])
        while self.cache_bytes > CACHE_BYTES:
            self._uncache(next(iter(cache)))
        for lo, owner in list(self.loading.items()):
            if owner is cur:
                del self.loading[lo]
        if cur.waiters is not None:
            for w in cur.waiters:
                w.reading = False
            cur.waiters = None

    def shed(self) -> None:
        """The last cursor left: the chunks and expansions kept for cursors go (a log
        nobody reads pins no memory until retention reaches it)."""
        self.cache.clear()
        self.cache_starts.clear()
        self.cache_bytes = 0
        self.expanded.clear()
        self.expanded_bytes = 0

    @property
    def first_offset(self) -> int:
        """The oldest offset still in the log (``next_offset`` when it is empty)."""
        for s in self.segments:
            if s.last >= s.first:
                return s.first
        return self.next_offset

    @property
    def count(self) -> int:
        return self.next_offset - self.first_offset

    def read_limit(self) -> int:
        """Entries per store read: about READ_BYTES of this log's average entry, within
        [MIN_READ, READ_BATCH]; a cursor asks for the next read when its read-ahead falls
        below this, so it holds at most twice as many."""
        n = self.count
        if n <= 0 or self.bytes <= 0:
            return READ_BATCH
        return max(MIN_READ, min(READ_BATCH, READ_BYTES * n // self.bytes))

    def restore(self, segments: list[tuple[int, int, int, int, int, int]]) -> None:
        """Segments as the store recovered them (in order)."""
        for number, first, last, first_ts, last_ts, size in segments:
            self.segments.append(Segment(number, first, last, first_ts, last_ts, size))
            self.bytes += size
            self.next_offset = max(self.next_offset, last + 1, first)

    def append(self, ts_us: int, size: int, segment_size: int, span: int = 1,
               ) -> tuple[int, Segment, Segment | None, bool]:
        """Place one entry (``span`` offsets for a stored Kafka batch): (its first
        offset, its segment, the segment it sealed or None, whether its segment opened
        with it). A segment is sealed once it holds ``segment_size`` bytes; an entry
        never spans two."""
        off = self.next_offset
        self.next_offset = off + span
        cur = self.segments[-1] if self.segments else None
        sealed: Segment | None = None
        opened = False
        if cur is None or (cur.size and cur.size + size > segment_size):
            if cur is not None:
                sealed = cur
            cur = Segment(cur.number + 1 if cur else 1, off, off - 1, ts_us, ts_us, 0)
            self.segments.append(cur)
            opened = True
        cur.last = off + span - 1
        cur.last_ts = ts_us
        cur.size += size
        self.bytes += size
        return off, cur, sealed, opened

    def over_retention(self, max_bytes: int | None, max_age: float | None,
                       now_us: int) -> int:
        """How many oldest segments retention removes; never the open (last) one."""
        n = 0
        total = self.bytes
        cutoff = now_us - int(max_age * 1_000_000) if max_age is not None else None
        for s in list(self.segments)[:-1]:
            if (max_bytes is not None and total > max_bytes) or (
                    cutoff is not None and s.last_ts < cutoff):
                n += 1
                total -= s.size
            else:
                break
        return n

    def resume_point(self, cur: Cursor) -> int:
        """Where a group goes on after its active member ``cur`` left and its deliveries
        settled: the lowest offset never acked, else the first entry it was not given
        (all it was given was acked); never below the log's first offset."""
        if cur.unsettled is not None:
            at = cur.unsettled
        elif cur.buffer:
            at = cur.buffer[0].position
        else:
            at = cur.offset
        return max(at, self.first_offset)

    def drop(self, n: int) -> int:
        """Remove the ``n`` oldest segments; cursors below move to the new first
        offset, which is returned."""
        for _ in range(n):
            self.bytes -= self.segments.popleft().size
        first = self.first_offset
        for lo in [lo for lo, c in self.cache.items() if c[0] + c[1] <= first]:
            self._uncache(lo)
        for k in [k for k, e in self.expanded.items() if k + len(e[1]) <= first]:
            self.expanded_bytes -= len(self.expanded.pop(k)[0])
        for cur in self.cursors.values():
            if cur.offset < first:
                cur.offset = first
            while cur.buffer and cur.buffer[0].position < first:
                cur.buffer.popleft()
        for g in self.groups.values():
            if g.offset is not None and g.offset < first:
                g.offset = first
        return first

    def resolve(self, spec: Any, now: float) -> tuple[int, int | None]:
        """Where ``x-stream-offset`` = ``spec`` attaches: (offset, skip-older-than µs).

        ``first``, ``last`` (the newest entry: amqplite skips to it inside its chunk,
        where RabbitMQ starts at the chunk), ``next``
        (default), an integer (clamped into the log, as RabbitMQ does), an AMQP
        timestamp or an interval string (``1h`` ago): from the first segment
        holding entries at or after that time, skipping older ones on reading.
        ValueError for anything else.
        """
        if spec is None or spec in ("next", b"next"):
            return self.next_offset, None
        if spec in ("first", b"first"):
            return self.first_offset, None
        if spec in ("last", b"last"):
            return max(self.first_offset, self.next_offset - 1), None
        if isinstance(spec, Timestamp):
            return self._at_time(int(spec) * 1_000_000)
        if isinstance(spec, int) and not isinstance(spec, bool):
            return min(max(spec, self.first_offset), self.next_offset), None
        age = parse_age(spec)
        if age is not None:
            return self._at_time(int((now - age) * 1_000_000))
        raise ValueError(f"invalid x-stream-offset {spec!r}")

    def _at_time(self, ts_us: int) -> tuple[int, int | None]:
        for s in self.segments:
            if s.last >= s.first and s.last_ts >= ts_us:
                return s.first, ts_us
        return self.next_offset, None
