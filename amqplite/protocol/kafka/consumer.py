"""The consumer protocol's assignment, the bytes a group leader hands each member.

Why the broker reads them at all: Kafka's coordinator treats them as opaque, and so
does ours when it runs a group; but an operator asking "who reads partition 2 of
``orders``?" needs them decoded, as ``kafka-consumer-groups --describe`` decodes
them. Only ``protocol_type`` "consumer" carries this layout
(``ConsumerProtocolAssignment``, versions 0-3 share the fields read here: the
topics and their partitions; user data and anything after it are skipped).
"""

from __future__ import annotations

from amqplite.protocol.kafka.primitives import (
    Buf,
    CodecError,
    read_int16,
    read_int32,
    read_string,
    reading,
)

#: the protocol type whose assignments have this layout
CONSUMER = "consumer"


def decode_assignment(raw: Buf) -> list[tuple[str, list[int]]] | None:
    """(topic, partitions) in the leader's order, or None when ``raw`` is not a
    consumer assignment (empty, garbled, or of a version this does not know)."""
    if len(raw) < 2:
        return None
    try:
        with reading("consumer assignment"):
            version, pos = read_int16(raw, 0)
            if version < 0:
                return None
            n, pos = read_int32(raw, pos)
            if n < 0 or n > len(raw):
                return None
            out: list[tuple[str, list[int]]] = []
            for _ in range(n):
                topic, pos = read_string(raw, pos)
                count, pos = read_int32(raw, pos)
                if count < 0 or pos + 4 * count > len(raw):
                    return None
                parts = []
                for _ in range(count):
                    p, pos = read_int32(raw, pos)
                    parts.append(p)
                out.append((topic, parts))
            return out
    except CodecError:
        return None


def encode_assignment(topics: list[tuple[str, list[int]]], version: int = 0) -> bytes:
    """The bytes a consumer leader sends (tests build group states with it)."""
    out = [version.to_bytes(2, "big", signed=True), len(topics).to_bytes(4, "big")]
    for topic, parts in topics:
        name = topic.encode()
        out += [len(name).to_bytes(2, "big"), name, len(parts).to_bytes(4, "big")]
        out += [p.to_bytes(4, "big", signed=True) for p in parts]
    out.append(b"\xff\xff\xff\xff")  # no user data
    return b"".join(out)
