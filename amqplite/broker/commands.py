"""The (class_id, method_id) of each command the broker answers, for its error replies.

Derived from the method classes of :mod:`amqplite.protocol.methods`, which own
the numbers; a channel.close names the method that failed with these.
"""

from __future__ import annotations

from typing import Final

from amqplite.protocol import methods as M


def command_id(method: type[M.Method]) -> tuple[int, int]:
    return method.CLASS_ID, method.METHOD_ID


EXCHANGE_DECLARE = command_id(M.ExchangeDeclare)
EXCHANGE_DELETE = command_id(M.ExchangeDelete)
EXCHANGE_BIND = command_id(M.ExchangeBind)
EXCHANGE_UNBIND = command_id(M.ExchangeUnbind)
QUEUE_DECLARE = command_id(M.QueueDeclare)
QUEUE_BIND = command_id(M.QueueBind)
QUEUE_PURGE = command_id(M.QueuePurge)
QUEUE_DELETE = command_id(M.QueueDelete)
QUEUE_UNBIND = command_id(M.QueueUnbind)
BASIC_QOS = command_id(M.BasicQos)
BASIC_CONSUME = command_id(M.BasicConsume)
BASIC_GET = command_id(M.BasicGet)
BASIC_ACK: Final = command_id(M.BasicAck)
BASIC_REJECT = command_id(M.BasicReject)
BASIC_RECOVER = command_id(M.BasicRecover)
BASIC_NACK = command_id(M.BasicNack)
CHANNEL_FLOW = command_id(M.ChannelFlow)
BASIC_PUBLISH: Final = command_id(M.BasicPublish)
TX_SELECT = command_id(M.TxSelect)
TX_COMMIT = command_id(M.TxCommit)
TX_ROLLBACK = command_id(M.TxRollback)
CONFIRM_SELECT = command_id(M.ConfirmSelect)
