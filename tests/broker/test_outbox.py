"""The broker's one outbox: emission, take_outcome, transactions (plain calls)."""

from __future__ import annotations

import pytest

from amqplite import storeops as ops
from amqplite.broker.core import Broker
from amqplite.broker.outbox import Outbox
from tests.broker.conftest import PERSISTENT, TRANSIENT, session_channel


class Refused(Exception):
    pass


def test_emit_take_and_pending() -> None:
    box = Outbox()
    box.emit(ops.DeleteVHost("a"))
    box.emit_all([ops.DeleteVHost("b"), ops.DeleteVHost("c")])
    assert box.pending() == 3
    assert box.take() == [ops.DeleteVHost("a"), ops.DeleteVHost("b"), ops.DeleteVHost("c")]
    assert box.pending() == 0 and box.peek() == ()
    box.emit(ops.DeleteVHost("d"))  # emit is rebound to the fresh list
    assert box.take() == [ops.DeleteVHost("d")]


def test_failing_transaction_drops_only_its_own_ops(broker: Broker) -> None:
    broker.add_vhost("before")
    with pytest.raises(Refused), broker.transaction() as tx:
        broker.add_vhost("inside")
        assert tx.ops == (ops.PutVHost("inside", ""),)
        raise Refused
    broker.add_vhost("after")
    assert broker.take_outcome().store_ops == [ops.PutVHost("before", ""),
                                               ops.PutVHost("after", "")]


def test_transaction_without_rollback_keeps_ops_and_shows_them(broker: Broker) -> None:
    with pytest.raises(Refused), broker.transaction(rollback=False) as tx:
        broker.add_vhost("kept")
        seen = tx.ops
        raise Refused
    assert seen == (ops.PutVHost("kept", ""),)
    assert broker.take_outcome().store_ops == [ops.PutVHost("kept", "")]


def test_nested_rollback_drops_the_inner_ops_only(broker: Broker) -> None:
    with broker.transaction() as outer:
        broker.add_vhost("outer")
        with pytest.raises(Refused), broker.transaction():
            broker.add_vhost("inner")
            raise Refused
        assert outer.ops == (ops.PutVHost("outer", ""),)
    assert broker.take_outcome().store_ops == [ops.PutVHost("outer", "")]


def test_ops_taken_inside_a_transaction_are_out_of_its_reach(broker: Broker) -> None:
    with pytest.raises(Refused), broker.transaction() as tx:
        broker.add_vhost("taken")
        assert broker.take_outcome().store_ops == [ops.PutVHost("taken", "")]
        broker.add_vhost("dropped")
        assert tx.ops == (ops.PutVHost("dropped", ""),)
        raise Refused
    assert broker.take_outcome().store_ops == []


def test_hot_path_ops_reach_the_outcome_after_a_take(broker: Broker) -> None:
    """Publish and ack emit through the bound append across takes."""
    _, ch = session_channel(broker)
    broker.queue_declare(ch, "q", durable=True)
    broker.take_outcome()
    broker.basic_publish(ch, "", "q", PERSISTENT, b"x")
    kinds = [type(o) for o in broker.take_outcome().store_ops]
    assert ops.PutEntry in kinds or ops.PutMessage in kinds


def test_confirm_after_commit_makes_the_confirm_wait(broker: Broker) -> None:
    """The MQTT shell's confirm mark: a transient publish's confirm waits for the commit."""
    _, ch = session_channel(broker)
    broker.confirm_select(ch)
    broker.basic_publish(ch, "amq.topic", "nobody", TRANSIENT, b"x")
    broker.confirm_after_commit(ch)
    confirms = [e for e in broker.take_outcome().effects if type(e).__name__ == "Confirm"]
    assert [c.after_commit for c in confirms] == [True]
