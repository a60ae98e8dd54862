"""Super streams: the partition layout, and hash routing as RabbitMQ's stream clients do it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqplite.broker.exchanges import Binding, DirectExchange
from amqplite.broker.exchanges.base import freeze_args
from amqplite.broker.superstream import HASH_SEED, hash_partition, layout

M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def murmur3_32_reference(data: bytes, seed: int) -> int:
    """MurmurHash3 x86_32 written out from the algorithm, to check the library's use."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & M32
    n = len(data) // 4
    for i in range(n):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = _rotl((k * c1) & M32, 15) * c2 & M32
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32
    tail = data[4 * n:]
    k = 0
    for i, byte in enumerate(tail):
        k |= byte << (8 * i)
    if tail:
        h ^= _rotl((k * c1) & M32, 15) * c2 & M32
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


@given(st.text(max_size=40), st.integers(1, 64))
def test_hash_partition_matches_the_stream_clients_formula(key: str, n: int) -> None:
    h = murmur3_32_reference(key.encode("utf-8"), HASH_SEED)
    assert hash_partition(key, n) == h % n  # unsigned, as the stream clients since 2022


def test_unsigned_remainder_where_it_differs_from_a_masked_one() -> None:
    # a key whose hash has the top bit set: a signed or masked remainder would differ
    key = next(k for k in (f"k{i}" for i in range(1000))
               if murmur3_32_reference(k.encode(), HASH_SEED) >> 31
               and murmur3_32_reference(k.encode(), HASH_SEED) % 3
               != (murmur3_32_reference(k.encode(), HASH_SEED) & 0x7FFFFFFF) % 3)
    assert hash_partition(key, 3) == murmur3_32_reference(key.encode(), HASH_SEED) % 3


def test_reference_agrees_with_published_murmur3_vectors() -> None:
    # MurmurHash3_x86_32 test vectors (seed 0 / 1)
    assert murmur3_32_reference(b"", 0) == 0
    assert murmur3_32_reference(b"", 1) == 0x514E28B7
    assert murmur3_32_reference(b"hello", 0) == 0x248BFA47
    assert murmur3_32_reference(b"The quick brown fox jumps over the lazy dog", 0) == 0x2E4FF723


def test_layout_is_rabbitmqs() -> None:
    assert layout("inv", 3) == [("inv-0", "0", 0), ("inv-1", "1", 1), ("inv-2", "2", 2)]
    assert layout("rk", routing_keys=["a", "b"]) == [("rk-a", "a", 0), ("rk-b", "b", 1)]
    for bad in ({}, {"partitions": 0}, {"partitions": 2, "routing_keys": ["a"]},
                {"routing_keys": ["a", "a"]}, {"routing_keys": [""]}):
        with pytest.raises(ValueError):
            layout("x", **bad)  # type: ignore[arg-type]


def test_hash_exchange_routes_in_partition_order() -> None:
    ex = DirectExchange("s", arguments={"x-super-stream": True, "x-super-stream-routing": "hash"})
    # bound out of order: partition order decides, not binding order or names
    for name, order in (("s-2", 2), ("s-0", 0), ("s-1", 1)):
        ex.add_binding(Binding("s", ("queue", name), name[-1],
                               freeze_args({"x-stream-partition-order": order})))
    for key in ("a", "order-17", "ünïcode", ""):
        assert ex.route(key, lambda: None) == {("queue", f"s-{hash_partition(key, 3)}")}
    plain = DirectExchange("p", arguments={"x-super-stream": True})
    plain.add_binding(Binding("p", ("queue", "p-0"), "0", ()))
    assert plain.route("0", lambda: None) == {("queue", "p-0")}
    assert plain.route("a", lambda: None) == set()
