"""The delivery log's storage: events packed by the hundred into ``log_batches`` rows.

Why batches: the log writes about three events per message, and SQLite spends
about 4 µs binding and inserting each 12-column row, the largest part of the
writer's work for transient traffic and the difference between amqplite's and
RabbitMQ's CPU on a trickle of messages. One row per group of events, the
events a JSON array of arrays in :data:`~amqplite.storeops.LOG_FIELDS` order,
costs about 0.2 µs per event (orjson). Each event still has its own id: a
batch holds the consecutive ids ``first_id .. last_id`` (``first_id`` plus
the event's index), assigned by the one writer, never reused (``meta``
keeps the high-water mark across pruning). The ``delivery_log`` view shows one
row per event for ad-hoc SQL; programs read the batches (``iter_log_rows``)
so that a range of ids touches only the batches that hold it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import orjson

from amqplite.storeops import LOG_FIELDS, EncodedLog

__all__ = [
    "BATCH_EVENTS",
    "LogBuffer",
    "batch_rows",
    "decode_events",
    "encode_events",
    "encode_log",
    "with_message_ids",
]

#: at most this many events per batch row: pruning and paging work in batches
BATCH_EVENTS = 1000
#: where an event keeps its time (LOG_FIELDS[0] is ``ts_us``)
_TS = 0


def encode_events(rows: Sequence[Sequence[Any]]) -> str:
    """The events as JSON text. Never fails on what a client can put in a row:
    if orjson refuses one (a string with lone surrogates, an integer beyond 64
    bits), every value is made storable first, as ``storable_value`` says."""
    return _dumps(rows).decode()


_INT64 = 1 << 63


def storable_value(v: Any) -> Any:
    """A log value any reader can take: text that is valid UTF-8 (lone surrogates
    written as ``\\udcff``), integers in 64 bits (else None), other types as text."""
    if v is None or type(v) is bool:
        return v
    if isinstance(v, int):
        return v if -_INT64 <= v < _INT64 else None
    text = v if isinstance(v, str) else str(v)
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()


def decode_events(text: str | bytes) -> list[list[Any]]:
    """A batch's events, each a list in LOG_FIELDS order, as stored (see
    ``with_message_ids``)."""
    return orjson.loads(text)  # type: ignore[no-any-return]


#: where an event keeps its message id and key (LOG_FIELDS order)
_MID = LOG_FIELDS.index("message_id")
_MKEY = LOG_FIELDS.index("message_key")


_FIELDS = len(LOG_FIELDS)


def with_message_ids(events: list[list[Any]]) -> list[list[Any]]:
    """``events`` with the broker-assigned message ids written out: a row stores
    "" for ``amq-KEY`` (the broker then makes no string per message); readers
    show the id every other part of amqplite shows. An event stored before a
    column was added (``protocol``) gets None for it."""
    for e in events:
        if e[_MID] == "" and e[_MKEY] is not None:
            e[_MID] = f"amq-{e[_MKEY]}"
        if len(e) < _FIELDS:
            e.extend([None] * (_FIELDS - len(e)))
    return events


def batch_rows(first_id: int, rows: Sequence[Sequence[Any]]) -> list[tuple[int, int, int, int, int, str]]:
    """``log_batches`` rows (``BATCH_COLS`` order) for ``rows``, ids from ``first_id``."""
    out = []
    for i in range(0, len(rows), BATCH_EVENTS):
        part = rows[i : i + BATCH_EVENTS]
        ts = [r[_TS] for r in part]
        lo_ts, hi_ts = _ts_bounds(ts)
        out.append((first_id + i, first_id + i + len(part) - 1, lo_ts, hi_ts, len(part),
                    encode_events(part)))
    return out


_ts_of = itemgetter(_TS)
_key_of = itemgetter(LOG_FIELDS.index("message_key"))


def encode_log(rows: Sequence[tuple[Any, ...]], key_mark: int | None = None) -> list[EncodedLog]:
    """The broker's row tuples as batches ready to store (at most BATCH_EVENTS each),
    encoded where the rows are made; the writer adds the ids. See EncodedLog.
    ``key_mark``: at least every message key in ``rows`` (the broker's highest),
    which saves looking; else each batch's highest key is found."""
    out = []
    for i in range(0, len(rows), BATCH_EVENTS):
        part = rows[i : i + BATCH_EVENTS]
        try:
            lo_ts, hi_ts = min(map(_ts_of, part)), max(map(_ts_of, part))
            key = (max(filter(None, map(_key_of, part)), default=0) if key_mark is None
                   else key_mark)
        except TypeError:  # not the broker's rows (its times and keys are ints)
            lo_ts, hi_ts = _ts_bounds([r[_TS] for r in part])
            key = _INT64
        if key >= _INT64:  # a key that is not storable must not raise the mark
            key = max((k for k in map(_key_of, part)
                       if type(k) is int and 0 < k < _INT64), default=0)
        out.append(EncodedLog(encode_events(part), len(part), lo_ts, hi_ts, key))
    return out


class LogBuffer:
    """Log rows encoded as they come, a few hundred at a time, and handed over
    later as EncodedLog batches.

    Why not hold the row tuples until the hand-over: a few thousand of them
    (twelve fields each) held for up to 100 ms push the event loop's working
    set out of the CPU caches, and freeing them in bulk later costs as much
    again. Encoded at once, each batch's tuples die young and are reused
    while warm; what waits is compact JSON. In the core's transient publish
    this took the log's cost from about 4 to 3 µs per message.
    """

    __slots__ = ("_parts", "_pending", "rows")

    #: rows gathered before they are encoded together: a trickle (a few rows per
    #: batch of commands) must not pay an encoder call per batch
    ENCODE_EVERY = 256

    def __init__(self) -> None:
        #: (JSON of the rows without the enclosing brackets, count, first ts, last ts)
        self._parts: list[tuple[bytes, int, int, int]] = []
        #: rows not encoded yet
        self._pending: list[tuple[Any, ...]] = []
        #: rows held
        self.rows = 0

    def add(self, rows: Sequence[tuple[Any, ...]]) -> None:
        pending = self._pending
        pending.extend(rows)
        self.rows += len(rows)
        if len(pending) >= self.ENCODE_EVERY:
            self._encode_pending()

    def _encode_pending(self) -> None:
        rows = self._pending
        self._pending = []
        for i in range(0, len(rows), BATCH_EVENTS):
            self._encode(rows[i : i + BATCH_EVENTS])

    def _encode(self, rows: Sequence[tuple[Any, ...]]) -> None:
        n = len(rows)
        if not n:
            return
        try:
            lo_ts, hi_ts = min(map(_ts_of, rows)), max(map(_ts_of, rows))
        except TypeError:
            lo_ts, hi_ts = _ts_bounds([r[_TS] for r in rows])
        self._parts.append((_dumps(rows)[1:-1], n, lo_ts, hi_ts))

    def take(self, key_mark: int) -> list[EncodedLog]:
        """Everything held, as batches of at most BATCH_EVENTS rows, and empty the
        buffer. ``key_mark``: at least every message key in the rows (the
        broker's highest so far), for the writer's mark."""
        if self._pending:
            self._encode_pending()
        key_mark = key_mark if 0 <= key_mark < _INT64 else 0
        out: list[EncodedLog] = []
        texts: list[bytes] = []
        n = 0
        lo_ts = hi_ts = 0
        for text, count, lo, hi in self._parts:
            if n + count > BATCH_EVENTS:
                out.append(EncodedLog(_joined(texts), n, lo_ts, hi_ts, key_mark))
                texts, n = [], 0
            if n:
                lo_ts, hi_ts = min(lo_ts, lo), max(hi_ts, hi)
            else:
                lo_ts, hi_ts = lo, hi
            texts.append(text)
            n += count
        if n:
            out.append(EncodedLog(_joined(texts), n, lo_ts, hi_ts, key_mark))
        self._parts = []
        self.rows = 0
        return out


def _dumps(rows: Sequence[Sequence[Any]]) -> bytes:
    """``encode_events`` as bytes."""
    try:
        return orjson.dumps(rows)
    except orjson.JSONEncodeError:
        return orjson.dumps([[storable_value(v) for v in r] for r in rows])


def _joined(texts: list[bytes]) -> str:
    return (b"[" + b",".join(texts) + b"]").decode()


def _ts_bounds(ts: list[Any]) -> tuple[int, int]:
    """Min and max time of a batch; a row's time is the broker's clock, always an int,
    but a hand-made row may lack one (0 keeps the batch prunable)."""
    try:
        return min(ts), max(ts)
    except TypeError:
        ints = [t for t in ts if isinstance(t, int)] or [0]
        return min(ints), max(ints)


#: ``log_batches`` columns in the order ``batch_rows`` builds them
BATCH_COLS = ("first_id", "last_id", "first_ts_us", "last_ts_us", "count", "events")


#: meta key: the highest log id assigned when the newest batch was pruned
MAX_LOG_ID_KEY = "max_log_id"
