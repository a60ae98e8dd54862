"""Idempotent producers: InitProducerId's ids and per-partition sequence checks.

Why: kafka-python 3, librdkafka and franz-go are idempotent by default. Such a
producer numbers its records per partition (the batch's base sequence) and
resends a batch whose answer it lost; the broker must append it once and
answer the retry with the offset it got the first time. Kafka's rules
(``ProducerStateManager``/``ProducerAppendInfo``), followed here:

- a batch whose (first, last) sequence equals one of the last five appended
  for that producer, partition and epoch is a duplicate: not appended again,
  answered NONE with its original base offset (modern brokers send no
  DUPLICATE_SEQUENCE_NUMBER for an exact retry);
- otherwise its first sequence must follow the last one (wrapping after
  2**31 - 1) or it is OUT_OF_ORDER_SEQUENCE_NUMBER; a new, higher epoch must
  start at 0; an older epoch is INVALID_PRODUCER_EPOCH;
- a producer the partition has no state for is taken at any sequence (Kafka
  does so once retention removed its batches; here also after a restart).

Producer ids: in memory, never repeated across restarts because the counter
starts at the start time in seconds shifted left by 22 bits (4M ids per
second the broker ran; an id is a positive int64). A non-transactional
InitProducerId always gets a new id with epoch 0, as Kafka's coordinator does.
What is lost on restart: the sequence state, so a retry that crosses a restart
may append a batch twice (at least once); a producer's state idles out after
Kafka's ``producer.id.expiration.ms`` (1 day) when ``expire`` runs.
"""

from __future__ import annotations

from collections import deque

from amqplite.protocol.kafka.errors import ErrorCode

#: batches remembered per producer and partition (Kafka's NumBatchesToRetain)
BATCHES_KEPT = 5
#: Kafka's producer.id.expiration.ms, in seconds
PRODUCER_EXPIRY = 86_400.0
INT32_MAX = 2**31 - 1


def last_sequence(first: int, count: int) -> int:
    """The sequence of a batch's last record (sequences wrap after INT32_MAX)."""
    last = first + count - 1
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == INT32_MAX)


class ProducerEntry:
    """One producer's state on one partition."""

    __slots__ = ("batches", "epoch", "last_seq", "used")

    def __init__(self, epoch: int, used: float) -> None:
        self.epoch = epoch
        self.last_seq = -1
        #: (first sequence, last sequence, base offset) of the last batches
        self.batches: deque[tuple[int, int, int]] = deque(maxlen=BATCHES_KEPT)
        self.used = used


class Producers:
    """Producer ids and the sequence state, keyed by (stream queue id, producer id)."""

    def __init__(self, started: float) -> None:
        self._next_id = int(started) << 22
        self.entries: dict[tuple[int, int], ProducerEntry] = {}

    def init_producer_id(self, transactional_id: str | None) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch). Transactions are not offered: a transactional
        id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients treat as fatal
        (no retry loop) and report by name."""
        if transactional_id is not None:
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1
        pid = self._next_id
        self._next_id = pid + 1
        return ErrorCode.NONE, pid, 0

    def check(self, queue_id: int, producer_id: int, epoch: int, first_seq: int,
              count: int) -> tuple[ErrorCode, int | None]:
        """Whether a batch may be appended: (NONE, None) to append it, (NONE, base
        offset) for a duplicate, or (error, None)."""
        if producer_id < 0:
            return ErrorCode.NONE, None
        e = self.entries.get((queue_id, producer_id))
        if e is None:
            return ErrorCode.NONE, None
        if epoch < e.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if epoch > e.epoch:
            return (ErrorCode.NONE if first_seq == 0
                    else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER), None
        last = last_sequence(first_seq, count)
        for f, lst, base in e.batches:
            if f == first_seq and lst == last:
                return ErrorCode.NONE, base
        if not in_sequence(e.last_seq, first_seq):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def appended(self, queue_id: int, producer_id: int, epoch: int, first_seq: int, count: int,
                 base_offset: int, now: float) -> None:
        """A batch ``check`` allowed was appended at ``base_offset``."""
        if producer_id < 0:
            return
        key = (queue_id, producer_id)
        e = self.entries.get(key)
        if e is None or epoch != e.epoch:
            e = self.entries[key] = ProducerEntry(epoch, now)
        e.last_seq = last_sequence(first_seq, count)
        e.batches.append((first_seq, e.last_seq, base_offset))
        e.used = now

    def forget(self, queue_id: int, producer_id: int) -> None:
        """A batch of this producer did not commit: it starts afresh on that partition."""
        self.entries.pop((queue_id, producer_id), None)

    def forget_queue(self, queue_id: int) -> None:
        """The stream is gone (its topic deleted)."""
        for key in [k for k in self.entries if k[0] == queue_id]:
            del self.entries[key]

    def expire(self, now: float, idle: float = PRODUCER_EXPIRY) -> int:
        """Drop the state of producers idle for ``idle`` seconds; how many went."""
        gone = [k for k, e in self.entries.items() if now - e.used >= idle]
        for k in gone:
            del self.entries[k]
        return len(gone)
