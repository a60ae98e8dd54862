"""MQTT reason codes and the one exception every malformed input raises.

Every check in the codec and the state machine raises :class:`MQTTError`
with the MQTT 5 reason code the specification names; the connection turns it
into a CONNACK or DISCONNECT for MQTT 5, into a 3.1.1 return code where one
exists, or into a bare close.
"""

from __future__ import annotations

import enum


class ReasonCode(enum.IntEnum):
    """MQTT 5.0 reason codes (section 2.4); 0x00 is Success / Granted QoS 0."""

    SUCCESS = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    REAUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnackCode311(enum.IntEnum):
    """CONNACK return codes of MQTT 3.1 and 3.1.1 (3.1.1 section 3.2.2.3)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


# The nearest 3.1.1 return code for an MQTT 5 CONNACK reason; reasons without
# one close the connection without a CONNACK ([MQTT-3.2.2-5] lists only these).
_CONNACK_311 = {
    ReasonCode.SUCCESS: ConnackCode311.ACCEPTED,
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: ConnackCode311.UNACCEPTABLE_PROTOCOL_VERSION,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: ConnackCode311.IDENTIFIER_REJECTED,
    ReasonCode.SERVER_UNAVAILABLE: ConnackCode311.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_BUSY: ConnackCode311.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_SHUTTING_DOWN: ConnackCode311.SERVER_UNAVAILABLE,
    ReasonCode.USE_ANOTHER_SERVER: ConnackCode311.SERVER_UNAVAILABLE,
    ReasonCode.SERVER_MOVED: ConnackCode311.SERVER_UNAVAILABLE,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ConnackCode311.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.BAD_AUTHENTICATION_METHOD: ConnackCode311.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.NOT_AUTHORIZED: ConnackCode311.NOT_AUTHORIZED,
    ReasonCode.BANNED: ConnackCode311.NOT_AUTHORIZED,
}


def connack_code_311(reason: int) -> int | None:
    """The 3.1/3.1.1 CONNACK return code for an MQTT 5 reason, or None (close silently)."""
    code = _CONNACK_311.get(reason)  # type: ignore[call-overload]
    return None if code is None else int(code)


class MQTTError(Exception):
    """Malformed or forbidden input; ``reason_code`` is the MQTT 5 code to answer with.

    ``packet_type`` is the type of the offending packet (0 if unknown), so the
    connection can tell a bad CONNECT (answered by CONNACK) from the rest.
    """

    def __init__(self, reason_code: int, message: str, packet_type: int = 0) -> None:
        super().__init__(reason_code, message, packet_type)
        self.reason_code = int(reason_code)
        self.message = message
        self.packet_type = packet_type

    def __str__(self) -> str:
        try:
            name = ReasonCode(self.reason_code).name
        except ValueError:
            name = hex(self.reason_code)
        return f"{name}: {self.message}"


def malformed(message: str, packet_type: int = 0) -> MQTTError:
    """0x81 Malformed Packet."""
    return MQTTError(ReasonCode.MALFORMED_PACKET, message, packet_type)


def protocol_error(message: str, packet_type: int = 0) -> MQTTError:
    """0x82 Protocol Error."""
    return MQTTError(ReasonCode.PROTOCOL_ERROR, message, packet_type)
