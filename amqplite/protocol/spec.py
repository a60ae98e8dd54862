"""AMQP 0-9-1 constants: frame types, class ids and reply codes.

Kept in one small module so the broker can import reply codes without pulling
in the codec or the connection state machine.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"

#: The smallest frame_max a peer may negotiate; also the limit before tuning.
FRAME_MIN_SIZE: Final = 4096
#: Frame header (type, channel, size) plus the frame-end octet.
FRAME_OVERHEAD: Final = 8
#: RabbitMQ's hard ceiling on a content body (rabbit.hrl ?MAX_MSG_SIZE).
MAX_MSG_SIZE: Final = 536870912

CONNECTION: Final = 10
CHANNEL: Final = 20
EXCHANGE: Final = 40
QUEUE: Final = 50
BASIC: Final = 60
CONFIRM: Final = 85
TX: Final = 90


class ReplyCode(IntEnum):
    """Reply codes of AMQP 0-9-1 (connection.close / channel.close / basic.return)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


#: Codes that only close a channel (RabbitMQ's "soft" errors); all others are hard.
SOFT_ERRORS = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)


def is_soft_error(code: int) -> bool:
    """True when ``code`` is a channel-level (soft) error per the spec."""
    return code in SOFT_ERRORS
