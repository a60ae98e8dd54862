"""AMQP transactions: tx.select, tx.commit and tx.rollback."""

from __future__ import annotations

from amqplite.broker import errors as E
from amqplite.broker.base import BrokerBase
from amqplite.broker.commands import TX_COMMIT, TX_ROLLBACK, TX_SELECT
from amqplite.broker.model import ChannelState
from amqplite.protocol.errors import ChannelError


class Transactions(BrokerBase):
    """A transactional channel buffers publishes and acks until tx.commit."""

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
