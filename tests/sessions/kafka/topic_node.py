"""A pure broker with a real SQLite store, the Kafka topic commands over it, and the
shell's part done by hand (tests/broker/test_spill.py's ``Shell``): every Fetch and
ListOffsets by time reads the store, as the Kafka shell will."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amqplite.broker.core import Broker
from amqplite.broker.model import ChannelState
from amqplite.protocol.kafka import records as rb
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.mapping import Record
from amqplite.sessions.kafka.topics import (
    Fetched,
    FetchRead,
    OffsetAnswer,
    OffsetScan,
    Produced,
    StoredBatch,
    Topics,
)
from amqplite.store.engine import Store
from tests.broker.conftest import FakeClock
from tests.broker.test_spill import Shell, _store


class Node:
    def __init__(self, path: Path, *, access_control: bool = False, user: str = "guest",
                 **topics: Any) -> None:
        self.path = path
        self.clock = FakeClock()
        self.b = Broker(now=self.clock, access_control=access_control)
        if access_control:
            self.b.put_user("guest", "", "administrator", persist=False)
            self.b.set_permissions("guest", "/", ".*", ".*", ".*", persist=False)
        self.store: Store = _store(path)
        self.shell = Shell(self.b, self.store)
        self.topics = Topics(self.b, **topics)
        self.ch = self.channel(user)

    def channel(self, user: str = "guest", vhost: str = "/", confirm: bool = True,
                ) -> ChannelState:
        s = self.b.open_session(user, vhost)
        s.protocol = "Kafka"
        ch = self.b.open_channel(s, 1)
        if confirm:
            self.b.confirm_select(ch)
        return ch

    def produce(self, topic: str, values: list[bytes], partition: int = 0,
                ch: ChannelState | None = None, ts: int | None = None, **kw: Any,
                ) -> Produced:
        """Records stamped ``ts`` (ms) each, or 1_700_000_000_000 + their index."""
        recs = [Record(i, 1_700_000_000_000 + i if ts is None else ts, b"k%d" % i, v)
                for i, v in enumerate(values)]
        out = self.topics.produce(ch or self.ch, topic, partition, recs, **kw)
        self.shell.settle()
        return out

    def fetch(self, topic: str, offset: int, partition: int = 0, max_bytes: int = 1 << 20,
              ch: ChannelState | None = None) -> Fetched | FetchRead:
        self.shell.settle()
        r = self.topics.fetch(ch or self.ch, topic, partition, offset, max_bytes)
        if not r.read:
            return r
        return self.topics.fetched(r, self.store.fetch_stream(r.queue_id, r.lo, r.limit))

    def values(self, topic: str, offset: int = 0, partition: int = 0) -> list[bytes | None]:
        got = self.fetch(topic, offset, partition)
        if isinstance(got, FetchRead) and got.error == ErrorCode.NONE:
            return []  # at the high watermark: nothing to read
        assert isinstance(got, Fetched), got
        out: list[bytes | None] = []
        for r in got.records:
            if isinstance(r, StoredBatch):  # as the client reads it: whole, offsets rebased
                out.extend(x.value for i, x in enumerate(rb.decode_batch(r.data).records or [])
                           if r.offset + i >= offset)
            else:
                out.append(r.value)
        return out

    def list_offset(self, topic: str, timestamp: int, partition: int = 0) -> OffsetAnswer:
        self.shell.settle()
        r = self.topics.list_offset(self.ch, topic, partition, timestamp)
        while isinstance(r, OffsetScan):
            r = self.topics.scanned(r, self.store.fetch_stream(r.queue_id, r.lo, r.limit))
        return r

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.close(timeout=10)
