"""Kafka codec micro-benchmarks; run from the repo root: python -m tests.protocol.kafka.bench_kafka

Not collected by pytest. Medians of timeit repeats in CPU time (process_time: other
processes on a shared machine do not count), in µs per operation.
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable

from amqplite.protocol.kafka import messages as m
from amqplite.protocol.kafka import records as rc


def _median_us(fn: Callable[[], object], number: int = 200, repeat: int = 7) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat,
                                               timer=time.process_time)) / number * 1e6


def _batch(n: int, size: int, codec: int = rc.NONE) -> bytes:
    return rc.encode_batch([rc.Record(i, i, b"key-%d" % i, bytes([i % 256]) * size,
                                      [("trace", b"abc")]) for i in range(n)],
                           base_timestamp=1_700_000_000_000, compression=codec,
                           producer_id=1, producer_epoch=0, base_sequence=0)


def main() -> None:
    batch = _batch(100, 1024)
    produce = m.encode_request(0, 9, 1, "bench", {
        "acks": -1, "timeout_ms": 1000,
        "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": batch}]}],
    })[4:]

    def decode_produce() -> object:
        return m.decode_request(produce)

    def decode_produce_check() -> object:
        req = m.decode_request(produce)
        recs = req.body["topic_data"][0]["partition_data"][0]["records"]
        return [rc.read_batch_header(b) for b in rc.split_batches(recs)]

    def decode_produce_records() -> object:
        req = m.decode_request(produce)
        recs = req.body["topic_data"][0]["partition_data"][0]["records"]
        return [rc.decode_batch(b) for b in rc.split_batches(recs)]

    stored = [_batch(10, 1024) for _ in range(10)]

    def encode_fetch() -> bytes:
        parts = [{"partition_index": i, "error_code": 0, "high_watermark": 1000,
                  "last_stable_offset": 1000, "log_start_offset": 0,
                  "records": rc.rebased_pieces(b, 100 * i)} for i, b in enumerate(stored)]
        return m.encode_response(1, 12, 1, {"responses": [{"topic": "bench",
                                                           "partitions": parts}]})

    def encode_fetch_one_partition() -> bytes:
        pieces = [x for i, b in enumerate(stored) for x in rc.rebased_pieces(b, 10 * i)]
        return m.encode_response(1, 11, 1, {"responses": [{"topic": "bench", "partitions": [
            {"partition_index": 0, "high_watermark": 100, "records": pieces}]}]})

    def encode_fetch_reencode() -> bytes:
        fresh = [_batch(10, 1024) for _ in range(10)]
        return m.encode_response(1, 12, 1, {"responses": [{"topic": "bench", "partitions": [
            {"partition_index": 0, "high_watermark": 100, "records": fresh}]}]})

    print(f"Produce v9 request, one 100-record batch of 1 KiB values "
          f"({len(produce)} bytes)")
    print(f"  decode_request:                        {_median_us(decode_produce):8.1f} µs")
    print(f"  + batch header and CRC-32C check:      {_median_us(decode_produce_check):8.1f} µs")
    print(f"  + every record decoded:                "
          f"{_median_us(decode_produce_records, number=50):8.1f} µs")
    print("Fetch response, 10 stored batches of 10 x 1 KiB records")
    print(f"  v12, 10 partitions, rebased pieces:    {_median_us(encode_fetch):8.1f} µs")
    print(f"  v11, one partition, rebased pieces:    {_median_us(encode_fetch_one_partition):8.1f} µs")
    print(f"  v12, the batches re-encoded instead:   "
          f"{_median_us(encode_fetch_reencode, number=50):8.1f} µs")


if __name__ == "__main__":
    main()
