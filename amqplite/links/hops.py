"""Delivery-log rows for the hops links make, so ``amqplite trace`` follows a message
from one broker to the next (by its message id)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from amqplite.protocol.errors import FrameSyntaxError
from amqplite.protocol.properties import message_id_of

#: (event, vhost, exchange, routing key, properties, body size, reason)
Recorder = Callable[[str, str, str, str, bytes, int, str], None]


class _Log(Protocol):
    def log_hop(self, event: str, vhost: str, exchange: str, routing_key: str,
                message_id: str, size: int, reason: str) -> None: ...


def recorder(broker: _Log) -> Recorder:
    """Rows through ``broker.log_hop``; the message id is the publisher's, if any."""

    def record(event: str, vhost: str, exchange: str, routing_key: str, properties: bytes,
               size: int, reason: str) -> None:
        try:
            mid = message_id_of(properties) or ""
        except FrameSyntaxError:
            mid = ""
        broker.log_hop(event, vhost, exchange, routing_key, mid, size, reason)

    return record
