"""Moving deliveries from a source connection to a destination one, acked at the
source as the ack mode says. Shovels and federation links both pump this way.

``on-confirm`` acks a source message once the destination confirmed its publish
(at least once: a destination that fails between its confirm and our ack gets
it again); ``on-publish`` once the publish is written; ``no-ack`` never (the
consume was made without acks). ``shape`` turns a delivery into the publish
that forwards it, or None to drop it (it is acked at the source: a federation
link drops what already made its hops).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from amqplite.links import client as C
from amqplite.links.client_protocol import ContentIn, ProtocolFailure
from amqplite.protocol.methods import BasicAck, BasicDeliver, BasicNack, BasicPublish

#: (exchange, routing key, properties) of the publish forwarding a delivery, or None
Shape = Callable[[BasicDeliver, bytes], "tuple[str, str, bytes] | None"]


async def pump(src: C.Connection, dest: C.Connection, *, ack_mode: str, shape: Shape,
               forwarded: Callable[[ContentIn, tuple[str, str, bytes]], None],
               written: Callable[[], None] | None = None,
               remaining: int | None = None, channel: int = 1) -> None:
    """Forward deliveries from ``src`` channel ``channel`` to ``dest`` (whose channel
    ``channel`` is in confirm mode for on-confirm) until ``remaining`` were
    forwarded (None: until a connection ends, raising ProtocolFailure).
    ``forwarded(delivery, publish)`` follows each publish; ``written`` each time
    the publishes so far are about to be written out (a link hands its hop rows
    over then)."""
    #: destination publish seq -> source delivery tag, oldest first (on-confirm)
    pending: dict[int, int] = {}
    seq = 0
    finished = trio.Event()
    outstanding = [remaining]  # messages still to forward (None: no limit)
    ch = channel

    async def on_confirms() -> None:
        # publishes follow deliveries in order, so a confirm covers the oldest
        # pending ones; they are the source's oldest unacked deliveries too, and
        # one ``multiple`` ack or nack at the source settles them all
        async for c in dest.confirms:
            if c.multiple:
                seqs = []
                for s in pending:
                    if s > c.delivery_tag:
                        break
                    seqs.append(s)
            else:
                seqs = [c.delivery_tag] if c.delivery_tag in pending else []
            if not seqs:
                continue
            tags = [pending.pop(s) for s in seqs]
            multiple = len(tags) > 1
            if c.ack:
                await src.send(ch, BasicAck(tags[-1], multiple), flush=False)
            else:  # the destination refused them: back to the source queue
                await src.send(ch, BasicNack(tags[-1], multiple, True), flush=False)
            if not dest.confirms.statistics().current_buffer_used:
                await src.flush()
            if outstanding[0] == 0 and not pending:
                await src.flush()
                finished.set()

    async with trio.open_nursery() as n:
        if ack_mode == "on-confirm":
            n.start_soon(on_confirms)

        published = [0]  # on-publish: the newest delivery tag written, not yet acked

        async def write_out() -> None:
            """Publishes first, then (on-publish) one ack for all of them. The hop rows
            go just before the publishes: a broker's log shows the hop, then the
            publish it made."""
            if written is not None:
                written()
            await dest.flush()
            if published[0]:
                await src.send(ch, BasicAck(published[0], True), flush=False)
                published[0] = 0
            await src.flush()

        async def next_delivery() -> ContentIn:
            """The next delivery; what is buffered is written first when none is
            waiting (one write for a run of publishes, one for their acks)."""
            try:
                return src.deliveries.receive_nowait()
            except trio.WouldBlock:
                await write_out()
                return await src.deliveries.receive()

        async def forward() -> None:
            nonlocal seq
            while True:
                try:
                    d = await next_delivery()
                except trio.EndOfChannel:
                    raise ProtocolFailure("the source connection ended") from None
                if not isinstance(d.method, BasicDeliver):
                    continue
                out = shape(d.method, d.properties)
                if out is None:  # dropped: settled at the source now
                    if ack_mode != "no-ack":
                        await src.send(ch, BasicAck(d.method.delivery_tag, False), flush=False)
                    continue
                exchange, key, props = out
                seq += 1
                if ack_mode == "on-confirm":
                    pending[seq] = d.method.delivery_tag
                await dest.publish(ch, BasicPublish(exchange, key), props, d.body,
                                   flush=False)
                if ack_mode == "on-publish":
                    published[0] = d.method.delivery_tag
                forwarded(d, out)
                if outstanding[0] is not None:
                    outstanding[0] -= 1
                    if outstanding[0] == 0:
                        await write_out()
                        if ack_mode != "on-confirm" or not pending:
                            finished.set()
                        return

        n.start_soon(forward)
        try:
            await finished.wait()
        finally:
            if written is not None:
                written()
        n.cancel_scope.cancel()
