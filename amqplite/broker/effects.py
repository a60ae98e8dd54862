"""Effects: what the pure broker asks the server shell to do.

The broker appends these to ``Broker.effects`` and store operations to
``Broker.store_ops``; the shell drains both after each command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from amqplite.broker.model import ChannelState, Entry, Message
    from amqplite.broker.queue import Queue


@attrs.define(slots=True)
class Deliver:
    """Send basic.deliver to a consumer."""

    channel: ChannelState
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    message: Message
    #: replacement property bytes (x-delivery-count on redeliveries), else None
    properties: bytes | None = None


@attrs.define(slots=True)
class Return:
    """Send basic.return for an unroutable mandatory message."""

    channel: ChannelState
    reply_code: int
    reply_text: str
    message: Message


@attrs.define(slots=True)
class CancelNotify:
    """Send a server-initiated basic.cancel (the consumed queue went away)."""

    channel: ChannelState
    consumer_tag: str


@attrs.define(slots=True)
class PageIn:
    """Load these paged-out bodies from the store, then call ``Broker.paged_in``."""

    queue: Queue
    entries: list[Entry]
