"""Fuzzed wire input: ServerConnection answers garbage with a proper close, never a crash.

The oracle lives in :mod:`tests.protocol.fuzz_harness` (shared with
scripts/fuzz.py, which runs millions of cases outside CI).
"""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amqplite.protocol.events import ConnectionState
from tests.protocol.fuzz_harness import (
    HANDSHAKE,
    SESSION,
    feed,
    handshake,
    mutate,
    one_case,
    random_frame,
)

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


def test_the_valid_session_is_valid() -> None:
    conn = feed([HANDSHAKE, *SESSION])
    assert conn.state is ConnectionState.CLOSED  # the client's close, answered


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=5))
def test_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    feed(_chunks(data, cuts))


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(0, 2000), max_size=5))
@example(b"\x01\x00\x01\xff\xff\xff\xff\xce", [])  # a 4 GiB frame announced
@example(b"\x03\x00\x01\x00\x00\x00\x00\xce", [])  # a body without a header
def test_arbitrary_bytes_after_a_valid_handshake(data: bytes, cuts: list[int]) -> None:
    feed(_chunks(HANDSHAKE + data, cuts))


@FUZZ
@given(st.integers(0, len(SESSION) + 4), st.randoms(use_true_random=False),
       st.lists(st.integers(0, 10**6), max_size=6))
def test_one_mutated_frame_in_a_valid_stream(k: int, rng: random.Random, cuts: list[int]) -> None:
    frames = handshake() + SESSION
    k %= len(frames)
    frames[k] = mutate(frames[k], rng)
    feed(_chunks(b"".join(frames), cuts))


@FUZZ
@given(st.randoms(use_true_random=False), st.integers(1, 8))
def test_well_framed_random_methods(rng: random.Random, n: int) -> None:
    feed([HANDSHAKE + b"".join(random_frame(rng) for _ in range(n))])


@FUZZ
@given(st.randoms(use_true_random=False))
def test_long_run_generator(rng: random.Random) -> None:
    """The generator scripts/fuzz.py uses, a few hundred cases per CI run."""
    feed(one_case(rng))


@FUZZ
@given(st.randoms(use_true_random=False), st.randoms(use_true_random=False))
def test_with_a_reacting_server(client: random.Random, server: random.Random) -> None:
    """Replies, deliveries, channel errors and forced closes interleaved with bad input."""
    feed(one_case(client), react=server)
