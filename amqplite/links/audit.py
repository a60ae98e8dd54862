"""Delivery-log rows for hops between brokers: ``shovelled`` and ``federated``.

A link records one row per message it forwards, in the delivery log of the
broker that runs the link. The row carries the message's ``message-id``
property (forwarded unchanged, so ``amqplite trace ID`` on either broker finds
the same message), the link's consumer tag (the one on the source's
``acked`` rows), the source queue, where the copy was published (exchange and
routing key) and, as its reason, which link moved it from where to where
(URIs masked). Pure: rows are tuples in ``LOG_FIELDS`` order; the broker
running the link decides where they go (:data:`HopSink`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from amqplite.links.uri import mask
from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import message_id_of, printable

#: what takes a batch of hop rows into the broker's delivery log
HopSink = Callable[[list[tuple[Any, ...]]], None]

HOP_KINDS = ("shovelled", "federated")


def hop_reason(kind: str, link: str, src_uri: str, dest_uri: str) -> str:
    """The row's reason: which link moved the message from where to where."""
    if kind not in HOP_KINDS:
        raise ValueError(f"hop kind must be one of {HOP_KINDS}, not {kind!r}")
    return f"{kind} by '{link}' from {mask(src_uri)} to {mask(dest_uri)}"


def parse_hop_reason(reason: str | None) -> tuple[str, str, str, str] | None:
    """``(kind, link, from, to)`` of a :func:`hop_reason` text (what the audit groups
    hops by), None when ``reason`` is not one."""
    for kind in HOP_KINDS:
        head = f"{kind} by '"
        if reason and reason.startswith(head):
            link, sep, uris = reason[len(head):].rpartition("' from ")
            src, sep2, dest = uris.partition(" to ")
            if sep and sep2:
                return kind, link, src, dest
    return None


def record_hop(kind: str, *, vhost: str, link: str, consumer_tag: str, queue: str | None,
               exchange: str, routing_key: str, properties: bytes, size: int,
               src_uri: str, dest_uri: str, ts_us: int | None = None,
               reason: str | None = None) -> tuple[Any, ...]:
    """One delivery-log row of a forwarded message (``kind``: ``shovelled`` or
    ``federated``); ``message_id`` is "" when the publisher set none, as the
    broker's own rows have it. ``reason``: :func:`hop_reason`'s, when the caller
    keeps it (it parses both URIs)."""
    if reason is None:
        reason = hop_reason(kind, link, src_uri, dest_uri)
    try:
        mid = message_id_of(properties) or ""
    except FrameSyntaxError:  # properties a remote broker sent that we cannot walk
        mid = ""
    if mid and not mid.isascii():
        mid = printable(mid)[:255]
    ts = ts_us if ts_us is not None else int(time.time() * 1_000_000)
    return (ts, kind, vhost, exchange, routing_key, queue, mid, None, consumer_tag, None,
            size, reason)


class Hops:
    """One link's hop rows, buffered and handed to ``sink`` a batch at a time (the
    link flushes when it writes its publishes out, not once per message)."""

    def __init__(self, sink: HopSink | None, kind: str, vhost: str, link: str,
                 consumer_tag: str) -> None:
        self._sink = sink
        self._rows: list[tuple[Any, ...]] = []
        self.kind, self.vhost, self.link, self.consumer_tag = kind, vhost, link, consumer_tag
        self._reason = ("", "", hop_reason(kind, link, "", ""))

    def record(self, *, queue: str | None, exchange: str, routing_key: str,
               properties: bytes, size: int, src_uri: str, dest_uri: str) -> None:
        if self._sink is None:
            return
        if self._reason[:2] != (src_uri, dest_uri):  # a reconnect picked other URIs
            self._reason = (src_uri, dest_uri, hop_reason(self.kind, self.link, src_uri,
                                                          dest_uri))
        self._rows.append(record_hop(
            self.kind, vhost=self.vhost, link=self.link, consumer_tag=self.consumer_tag,
            queue=queue, exchange=exchange, routing_key=routing_key, properties=properties,
            size=size, src_uri=src_uri, dest_uri=dest_uri, reason=self._reason[2]))

    def flush(self) -> None:
        if self._rows and self._sink is not None:
            rows, self._rows = self._rows, []
            self._sink(rows)
