"""The AMQP connection's per-message work, compiled: a read's publishes and a run of
deliveries each cross into native code once, not once per message.

A read from a publisher holds hundreds of publishes, and an outcome hundreds of
deliveries to one consumer. Walked by the connection's interpreted code, each
cost a Python frame, argument parsing and a dozen attribute lookups around the
compiled broker and codec: about a tenth of the event loop's time each in the
transient scenario (S2). The connection's shell (trio, interpreted) keeps
everything else, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

from amqplite.broker.core import Broker
from amqplite.broker.effects import Deliver
from amqplite.broker.model import ChannelState
from amqplite.protocol.connection import ServerConnection
from amqplite.protocol.errors import ChannelError


def publish_run(proto: ServerConnection, broker: Broker, channels: dict[int, ChannelState],
                on_error: Callable[[int, ChannelError], None]) -> bool:
    """Hand every publish at the head of ``proto``'s events to the broker; True when
    there was one. A refused publish closes its channel through ``on_error``."""
    publisher = broker.publisher
    published = False
    while (ev := proto.next_publish()) is not None:
        ch = channels.get(ev.channel)
        if ch is None:  # a channel closed earlier in this read: its publishes are moot
            continue
        published = True
        m = ev.method
        try:
            publisher.basic_publish(ch, m.exchange, m.routing_key, ev.properties_raw, ev.body,
                                    mandatory=m.mandatory, immediate=m.immediate)
        except ChannelError as exc:
            on_error(ev.channel, exc)
    return published


def write_deliveries(proto: ServerConnection, channels: dict[int, ChannelState],
                     run: list[Deliver]) -> None:
    """Queue basic.deliver for each of a run of deliveries to this connection, in order;
    one to a channel that is closed (or closing) on it is dropped."""
    for e in run:
        ch = e.channel
        if ch.number not in channels:
            continue
        msg = e.message
        body = msg.body
        assert body is not None, "delivered with its body paged out"  # the dispatcher pages in first
        proto.send_deliver(ch.number, e.consumer_tag, e.delivery_tag, e.redelivered,
                           msg.exchange, msg.routing_key, e.properties or msg.properties_raw,
                           body)
