"""Hostile Kafka input for the live fuzz runs (tests/server/test_fuzz_kafka.py, and
scripts/fuzz.py --kafka against a running broker): valid requests of every
supported API, pipelined and mutated (bytes flipped, cut, padded, the size prefix
lying), frame sizes that are negative, zero or past 100 MiB, API keys and versions
the broker does not know, and floods (thousands of pipelined requests, megabytes
of junk).

The oracle for one case: what the broker wrote is a run of whole, size-prefixed
responses (a prefix of one when the connection was still open at the deadline),
each answering a request of the case in the order they were sent, and the
connection ends in a close or silence. The broker's side (no traceback, at most
one log line per bad connection, other clients unharmed) is the caller's to check.
"""

from __future__ import annotations

import random
import socket
import struct

from amqplite.protocol.kafka.messages import ApiKey, encode_request
from tests.protocol.fuzz_harness import send_then_read
from tests.sessions.kafka.test_session_fuzz import REQUESTS

#: (api key, version) pairs no broker of this one's ranges answers
BAD_VERSIONS = [(ApiKey.PRODUCE, 0), (ApiKey.PRODUCE, 99), (ApiKey.FETCH, -1),
                (ApiKey.METADATA, 13), (999, 0), (-1, 0), (ApiKey.API_VERSIONS, 77),
                (ApiKey.API_VERSIONS, -3), (68, 0), (ApiKey.JOIN_GROUP, 200)]
SIZE = struct.Struct(">i")


def _request(rng: random.Random, corr: int) -> bytes:
    key, version, body = rng.choice(REQUESTS)
    return encode_request(key, version, corr, rng.choice(["fz", "", "x" * 300]), body)


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    """Flip bytes after the size prefix, cut the frame, pad it, or make the prefix lie."""
    b = bytearray(frame)
    kind = rng.randrange(5)
    if kind == 0:
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(4, len(b))] = rng.randrange(256)
    elif kind == 1:  # cut short, the prefix fixed to match: the body does not decode
        b = bytearray(SIZE.pack(len(b) - 4 - (cut := rng.randrange(1, len(b) - 4)))) + b[4:-cut]
    elif kind == 2:  # bytes past the known fields (ignored, as Kafka ignores them)
        pad = rng.randbytes(rng.choice([1, 7, 300]))
        b = bytearray(SIZE.pack(len(b) - 4 + len(pad))) + b[4:] + pad
    elif kind == 3:  # the size lies: longer than what follows, or shorter
        b[:4] = SIZE.pack(max(0, len(b) - 4 + rng.choice([-3, -1, 1, 50, 70_000])))
    else:  # the request header's version or key rewritten
        key, version = rng.choice(BAD_VERSIONS)
        b[4:8] = struct.pack(">hh", key, version)
    return bytes(b)


def case(rng: random.Random) -> tuple[str, list[bytes], list[int]]:
    """One connection's input: (kind, chunks, correlation ids of the requests sent
    intact, in order; empty when the case's answers cannot be predicted)."""
    roll = rng.random()
    if roll < 0.08:
        size = rng.choice([-1, -(1 << 31), (100 << 20) + 1, (1 << 31) - 1, 1 << 30])
        return "size", [SIZE.pack(size) + rng.randbytes(rng.choice([0, 10, 5000]))], []
    if roll < 0.13:
        return "junk", [rng.randbytes(rng.choice([3, 1000, 1 << 20]))], []
    if roll < 0.23:
        key, version = rng.choice(BAD_VERSIONS)
        head = struct.pack(">hhi", key, version, 7) + b"\x00\x02fz"
        return "version", [SIZE.pack(len(head)) + head], []
    if roll < 0.30:  # a flood: pipelined Metadata and ApiVersions, far past the reader's limits
        n = rng.choice([1500, 4000])
        reqs = [encode_request(ApiKey.API_VERSIONS if i % 2 else ApiKey.METADATA,
                               3 if i % 2 else 9, i + 1, "flood",
                               {} if i % 2 else {"topics": [], "allow_auto_topic_creation": False})
                for i in range(n)]
        return "flood", [b"".join(reqs[i:i + 500]) for i in range(0, n, 500)], []
    if roll < 0.33:
        return "empty", [SIZE.pack(0) * rng.randint(1, 50)], []
    frames = []
    intact: list[int] = []
    mutated = False
    for corr in range(1, rng.randint(1, 12) + 1):
        f = _request(rng, corr)
        if rng.random() < 0.35:
            f = _mutate(rng, f)
            mutated = True
        elif not mutated:
            intact.append(corr)
        frames.append(f)
    data = b"".join(frames)
    # a few bytes at a time or all at once: the frame splitter sees both
    if rng.random() < 0.3:
        chunks, at = [], 0
        while at < len(data):
            n = rng.randint(1, 64)
            chunks.append(data[at:at + n])
            at += n
        return "pipeline", chunks, intact
    return "pipeline", [data], intact


def check_output(data: bytes, outcome: str, intact: list[int]) -> int:
    """The responses in ``data``: whole frames (a cut last one only while open), their
    correlation ids in request order; the number of responses."""
    pos, corrs = 0, []
    while pos + 4 <= len(data):
        size = SIZE.unpack_from(data, pos)[0]
        assert 4 <= size <= 64 << 20, (size, data[pos:pos + 40])
        if pos + 4 + size > len(data):
            break
        corrs.append(SIZE.unpack_from(data, pos + 4)[0])
        pos += 4 + size
    assert pos == len(data) or outcome == "open", (outcome, len(data), pos)
    n = min(len(corrs), len(intact))  # the intact requests' answers first, in order
    assert corrs[:n] == intact[:n], (corrs, intact)
    return len(corrs)


def run_case(port: int, kind: str, chunks: list[bytes], intact: list[int],
             deadline: float = 1.0, host: str = "127.0.0.1") -> tuple[str, int]:
    """Send one case: ('<kind>:<closed|open>', the local port its log lines name)."""
    with socket.create_connection((host, port), timeout=5) as s:
        local = s.getsockname()[1]
        outcome, data = send_then_read(s, chunks, deadline)
    check_output(data, outcome, intact)
    return f"{kind}:{outcome}", local
