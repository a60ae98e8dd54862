"""AMQP transactions: tx.select, tx.commit and tx.rollback."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amqplite.broker import errors as E
from amqplite.broker.commands import TX_COMMIT, TX_ROLLBACK, TX_SELECT
from amqplite.broker.model import ChannelState
from amqplite.broker.vhost import VHost
from amqplite.protocol.errors import ChannelError

if TYPE_CHECKING:
    from amqplite.broker.dispatch import Dispatcher
    from amqplite.broker.publish import Publisher


class Transactions:
    """A transactional channel buffers publishes and acks until tx.commit.

    Receives the vhost table, the publisher (``publish``) and the dispatcher
    (``basic_ack``, ``basic_nack``): a commit replays the buffered commands.
    """

    def __init__(self, *, vhosts: dict[str, VHost], publisher: Publisher,
                 dispatcher: Dispatcher) -> None:
        self.vhosts = vhosts
        self.publish = publisher.publish
        self.basic_ack = dispatcher.basic_ack
        self.basic_nack = dispatcher.basic_nack

    def tx_select(self, ch: ChannelState) -> None:
        if ch.confirm:
            raise E.precondition("cannot switch from confirm to tx mode", TX_SELECT)
        ch.tx = True

    def tx_commit(self, ch: ChannelState) -> bool:
        """Apply the transaction; True when it wrote to the store (commit-ok waits)."""
        if not ch.tx:
            raise E.precondition("channel is not transactional", TX_COMMIT)
        vh = self.vhosts[ch.session.vhost]
        pubs, acks = ch.tx_publishes, ch.tx_acks
        ch.tx_publishes, ch.tx_acks = [], []
        stored = False
        ch.tx = False  # apply for real
        try:
            for exchange, rk, props, body, mandatory in pubs:
                ex = vh.exchanges.get(exchange)
                if ex is None:
                    continue
                if self.publish(vh, ex, rk, props, body, mandatory, ch).stored:
                    stored = True
            for kind, tag, multiple, requeue in acks:
                try:
                    if kind == "ack":
                        self.basic_ack(ch, tag, multiple)
                    else:
                        self.basic_nack(ch, tag, multiple, requeue)
                except ChannelError:
                    continue  # already settled inside this transaction
        finally:
            ch.tx = True
        return stored

    def tx_rollback(self, ch: ChannelState) -> None:
        if not ch.tx:
            raise E.precondition("channel is not transactional", TX_ROLLBACK)
        ch.tx_publishes.clear()
        ch.tx_acks.clear()
