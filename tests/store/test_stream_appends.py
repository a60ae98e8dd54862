"""Stream appends batched per stream (AppendStreams) store what one op per entry did."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol import streamrecord
from amqplite.store.apply import record_bytes, stream_chunks
from amqplite.storeops import AppendStream, AppendStreams, stream_appends


def _entry(qid: int, offset: int, segment: int, pieces: bool) -> AppendStream:
    route = streamrecord.route("", f"s{qid}")
    if pieces:
        record: bytes | tuple[bytes, bytes, bytes, bytes] = (route, b"\x00\x00", b"", b"body")
    else:
        record = streamrecord.pack(1000 + offset, offset + 1, route, b"\x00\x00", b"body")
    return AppendStream(qid, offset, segment, 1000 + offset, offset + 1, 4, record)


@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(1, 5), st.booleans(),
                          st.booleans()), max_size=12))
@settings(max_examples=100, deadline=None)
def test_batched_appends_make_the_same_chunks_as_single_ones(
        runs: list[tuple[int, int, bool, bool]]) -> None:
    """Runs of appends to streams 1 and 2 (some crossing into a new segment), sent
    as AppendStreams or one AppendStream each: the same chunk rows, in order."""
    singles: list[AppendStream] = []
    batched: list[AppendStream | AppendStreams] = []
    next_off = {1: 0, 2: 0}
    segment = {1: 1, 2: 1}
    for qid, n, new_segment, as_batch in runs:
        if new_segment:
            segment[qid] += 1
        run = []
        for _ in range(n):
            run.append(_entry(qid, next_off[qid], segment[qid], pieces=as_batch))
            next_off[qid] += 1
        singles.extend(run)
        if as_batch:
            batched.append(AppendStreams(qid, [tuple(a)[1:] for a in run]))  # type: ignore[misc]
        else:
            batched.extend(run)
    assert [record_bytes(a) for a in stream_appends(batched)] == [record_bytes(a) for a in singles]
    assert stream_chunks(batched, max_bytes=200, max_entries=3) == stream_chunks(
        singles, max_bytes=200, max_entries=3)
