"""Hot-path micro-benchmarks; run from the repo root: python -m tests.protocol.bench_protocol

Not collected by pytest (file name does not start with test_).
"""

from __future__ import annotations

import time

from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.events import ContentReceived
from amqplite.protocol.frames import encode_frame, write_deliver
from amqplite.protocol.methods import BasicPublish, ChannelOpen, encode_method
from amqplite.protocol.properties import BasicProperties, encode_properties
from tests.protocol.client import open_connection

BODY = b"x" * 1024
PROPS = encode_properties(BasicProperties(content_type="text/plain", delivery_mode=2))


def publish_triple(routing_key: str = "bench") -> bytes:
    method = encode_frame(1, 1, encode_method(BasicPublish(exchange="", routing_key=routing_key)))
    header = encode_frame(2, 1, b"\x00\x3c\x00\x00" + len(BODY).to_bytes(8, "big") + PROPS)
    return method + header + encode_frame(3, 1, BODY)


def bench_parse(n: int = 200_000, batch: int = 100, distinct_keys: bool = False) -> float:
    conn: ServerConnection = open_connection()
    conn.receive_data(encode_frame(1, 1, encode_method(ChannelOpen())))
    list(conn.events())
    conn.data_to_send()
    if distinct_keys:
        chunks = [b"".join(publish_triple(f"key.{i}.{j}") for j in range(batch))
                  for i in range(n // batch)]
    else:
        chunk = publish_triple() * batch
        chunks = [chunk] * (n // batch)
    start = time.process_time()
    got = 0
    for data in chunks:
        conn.receive_data(data)
        while (ev := conn.next_event()) is not None:
            assert type(ev) is ContentReceived
            got += 1
    elapsed = time.process_time() - start
    assert got == n, got
    return n / elapsed


def bench_deliver(n: int = 200_000) -> float:
    out = bytearray()
    start = time.process_time()
    for tag in range(1, n + 1):
        write_deliver(out, 1, "amq.ctag-abcdefgh", tag, False, "amq.direct", "bench", PROPS,
                      BODY, 131072)
        if len(out) > 1 << 20:
            out.clear()
    return n / (time.process_time() - start)


def bench_send_deliver(n: int = 200_000) -> float:
    conn = open_connection()
    conn.receive_data(encode_frame(1, 1, encode_method(ChannelOpen())))
    list(conn.events())
    conn.data_to_send()
    start = time.process_time()
    for tag in range(1, n + 1):
        conn.send_deliver(1, "amq.ctag-abcdefgh", tag, False, "amq.direct", "bench", PROPS, BODY)
        if tag % 100 == 0:
            conn.data_to_send()
    return n / (time.process_time() - start)


if __name__ == "__main__":
    print(f"parse publish triples (same key):    {bench_parse():>10,.0f} /s")
    print(f"parse publish triples (distinct key): {bench_parse(distinct_keys=True):>10,.0f} /s")
    print(f"write_deliver:                        {bench_deliver():>10,.0f} /s")
    print(f"ServerConnection.send_deliver+drain:  {bench_send_deliver():>10,.0f} /s")
