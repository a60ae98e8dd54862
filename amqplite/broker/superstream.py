"""Super streams: RabbitMQ's layout of a partitioned stream, and hash routing over it.

A super stream NAME is a durable direct exchange with ``x-super-stream: true``
and one stream per partition, bound with the partition's routing key and
``x-stream-partition-order`` (RabbitMQ's ``rabbitmq-streams add_super_stream``
builds exactly this, so its tooling sees the same shape). Publishers route by
routing key as through any direct exchange. amqplite adds an opt-in exchange
argument, ``x-super-stream-routing: hash``, for AMQP publishers that cannot
pick a partition: the exchange routes each message to partition
``murmur3_32(utf8(routing_key), seed 104729) mod N`` (the hash as an unsigned
32-bit integer) in partition order, which is what RabbitMQ's stream clients
compute on their side (the Java client's ``HashRoutingStrategy`` with
``Integer.remainderUnsigned`` since 2022, the Go client's ``HashRoutingStrategy``),
so one key always lands in one partition and its order holds there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mmh3

SUPER_STREAM_ARG = "x-super-stream"
PARTITION_ORDER_ARG = "x-stream-partition-order"
ROUTING_ARG = "x-super-stream-routing"
#: the seed RabbitMQ's stream clients hash routing keys with
HASH_SEED = 104729


def is_hash_routing(arguments: Mapping[str, Any]) -> bool:
    v = arguments.get(ROUTING_ARG)
    return v in ("hash", b"hash")


def hash_partition(routing_key: str | bytes, partitions: int) -> int:
    """The partition index a stream client's hash strategy picks for ``routing_key``."""
    data = routing_key.encode("utf-8") if isinstance(routing_key, str) else routing_key
    return int(mmh3.hash(data, HASH_SEED, signed=False)) % partitions


def layout(name: str, partitions: int | None = None,
           routing_keys: Sequence[str] | None = None) -> list[tuple[str, str, int]]:
    """(stream name, binding key, partition order) of each partition, as RabbitMQ names
    them: ``NAME-0..NAME-(N-1)`` with keys "0".."N-1", or ``NAME-<key>`` per routing
    key. ValueError for neither, both, or nothing to create."""
    if (partitions is None) == (routing_keys is None):
        raise ValueError("give either partitions or routing keys")
    if partitions is not None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        keys = [str(i) for i in range(partitions)]
    else:
        keys = [k.strip() for k in routing_keys or []]
        if not keys or any(not k for k in keys):
            raise ValueError("routing keys must be non-empty")
        if len(set(keys)) != len(keys):
            raise ValueError("routing keys must be distinct")
    return [(f"{name}-{k}", k, i) for i, k in enumerate(keys)]
