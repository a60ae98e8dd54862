"""Per-publish cost of the pure core; run from the repo root: python -m tests.broker.bench_publish

Publishes to one durable queue with the default delivery log, purging every
1000 messages, for property shapes that hit and miss the publish-time check's
fast paths (same properties as last time on the channel; a header table seen
lately). Not collected by pytest (file name does not start with test_).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from amqplite.broker.core import Broker
from amqplite.protocol.codec import FieldTable
from amqplite.protocol.properties import BasicProperties, encode_properties

HEADERS = FieldTable({"a": 1, "trace-id": "abc-123", "retry": True})
CASES: dict[str, Callable[[int], bytes]] = {
    "no properties": lambda i: encode_properties(BasicProperties()),
    "ct+dm (same every time)": lambda i: encode_properties(
        BasicProperties(content_type="application/json", delivery_mode=2)),
    "ct+dm+msg id+ts (unique)": lambda i: encode_properties(BasicProperties(
        content_type="application/json", delivery_mode=2, message_id=f"{i:036d}",
        timestamp=1_700_000_000 + i)),
    "3 headers (same)": lambda i: encode_properties(BasicProperties(
        content_type="text/plain", delivery_mode=1, headers=HEADERS)),
    "3 headers + msg id (unique)": lambda i: encode_properties(BasicProperties(
        content_type="text/plain", delivery_mode=1, headers=HEADERS, message_id=f"m-{i}")),
    "unique 3 headers": lambda i: encode_properties(BasicProperties(
        content_type="text/plain", delivery_mode=1,
        headers=FieldTable({"a": i, "trace-id": f"t-{i}", "retry": True}))),
}


def bench(make: Callable[[int], bytes], n: int = 100_000) -> float:
    """Best of five, in ns per publish."""
    b = Broker()
    ch = b.open_channel(b.open_session("guest", "/"), 1)
    b.queue_declare(ch, "q", durable=True)
    q = b.vhost("/").queues["q"]
    props = [make(i) for i in range(n)]
    body = b"x" * 64
    best = float("inf")
    for _ in range(5):
        elapsed = 0.0
        for start in range(0, n, 1000):
            chunk = props[start:start + 1000]
            t = time.perf_counter()
            for p in chunk:
                b.basic_publish(ch, "", "q", p, body)
            elapsed += time.perf_counter() - t
            b.purge(q)
            b.outbox.take()
        best = min(best, elapsed)
    return best / n * 1e9


if __name__ == "__main__":
    for name, make in CASES.items():
        print(f"{name:30s} {bench(make):7.0f} ns/publish")
