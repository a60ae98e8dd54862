"""What the server negotiates in connection.start and connection.tune.

Apart from the state machine: the capability list grows with broker
features, and the tune checks follow RabbitMQ, not our state handling.
"""

from __future__ import annotations

import sys
from typing import Any

from amqplite import __version__
from amqplite.protocol.errors import ConnectionError_
from amqplite.protocol.spec import ReplyCode

__all__ = ["CAPABILITIES", "default_server_properties", "validate_tune"]


#: Exactly the RabbitMQ capabilities amqplite implements. Clients look features
#: up by name, so one that is missing here is left out, not announced as false.
CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "per_consumer_qos",
    "authentication_failure_close",
    "direct_reply_to",
)


def default_server_properties() -> dict[str, Any]:
    """What we announce in connection.start (RabbitMQ's capability names)."""
    return {
        "product": "amqplite",
        "version": __version__,
        "platform": f"Python {sys.version.split()[0]}",
        "copyright": "amqplite contributors",
        "information": "Licensed under the MIT license",
        "capabilities": dict.fromkeys(CAPABILITIES, True),
    }


def validate_tune(field: str, minimum: int, server: int, client: int) -> None:
    """RabbitMQ's validate_negotiated_integer_value: 530 outside [minimum, server]."""
    if client != 0 and client < minimum:
        raise ConnectionError_.make(
            ReplyCode.NOT_ALLOWED,
            f"negotiated {field} = {client} is lower than the minimum allowed value ({minimum})",
            10, 30,
        )
    if server != 0 and (client == 0 or client > server):
        detail = " (no limit)" if field == "channel_max" and client == 0 else ""
        raise ConnectionError_.make(
            ReplyCode.NOT_ALLOWED,
            f"negotiated {field} = {client}{detail} is higher than the maximum "
            f"allowed value ({server})",
            10, 30,
        )

