"""Reply texts in RabbitMQ's wording: clients and applications match on them."""

from __future__ import annotations

from amqplite.protocol.errors import ChannelError, ConnectionError_


def _vh(vhost: str) -> str:
    return f"vhost '{vhost}'"


def no_queue(name: str, vhost: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(404, f"NOT_FOUND - no queue '{name}' in {_vh(vhost)}", *cm)


def not_found(text: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(404, f"NOT_FOUND - {text}", *cm)


def no_exchange(name: str, vhost: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(404, f"NOT_FOUND - no exchange '{name}' in {_vh(vhost)}", *cm)


def locked(name: str, vhost: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(
        405,
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in "
        f"{_vh(vhost)}. It could be originally declared on another connection or the "
        "exclusive property value does not match that of the original declaration.",
        *cm,
    )


def inequivalent(arg: str, kind: str, name: str, vhost: str, got: object, cur: object,
                 cm: tuple[int, int]) -> ChannelError:
    return ChannelError(
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {kind} '{name}' in "
        f"{_vh(vhost)}: received {_show(got)} but current is {_show(cur)}",
        *cm,
    )


def amqp_type(v: object) -> str:
    """RabbitMQ's name for the field type a value is encoded with."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "signedint" if -(2**31) <= v < 2**31 else "long"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str | bytes):
        return "longstr"
    if isinstance(v, dict):
        return "table"
    if isinstance(v, list):
        return "array"
    return "void"


def _show_arg(v: object) -> str:
    """How RabbitMQ shows an x-argument in an inequivalence message."""
    if v is None:
        return "none"
    return f"the value {_show(v)} of type '{amqp_type(v)}'"


def inequivalent_arg(arg: str, name: str, vhost: str, got: object, cur: object,
                     cm: tuple[int, int]) -> ChannelError:
    if got is not None and cur is not None:
        return inequivalent(arg, "queue", name, vhost, got, cur, cm)
    return ChannelError(
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{name}' in "
        f"{_vh(vhost)}: received {_show_arg(got)} but current is {_show_arg(cur)}",
        *cm,
    )


def _show(v: object) -> str:
    if isinstance(v, bool):
        return f"'{str(v).lower()}'"
    if v is None:
        return "none"
    if isinstance(v, str | bytes):
        s = v.decode() if isinstance(v, bytes) else v
        return f"'{s}'"
    return f"'{v}'"


def reserved(kind: str, name: str, cm: tuple[int, int]) -> ChannelError:
    return ChannelError(
        403, f"ACCESS_REFUSED - {kind} name '{name}' contains reserved prefix 'amq.*'", *cm
    )


def default_exchange(cm: tuple[int, int]) -> ChannelError:
    return ChannelError(403, "ACCESS_REFUSED - operation not permitted on the default exchange", *cm)


def precondition(text: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(406, f"PRECONDITION_FAILED - {text}", *cm)


def not_implemented(text: str, cm: tuple[int, int] = (0, 0)) -> ConnectionError_:
    return ConnectionError_(540, f"NOT_IMPLEMENTED - {text}", *cm)


def command_invalid(text: str, cm: tuple[int, int] = (0, 0)) -> ConnectionError_:
    return ConnectionError_(503, f"COMMAND_INVALID - {text}", *cm)


def not_allowed(text: str, cm: tuple[int, int] = (0, 0)) -> ConnectionError_:
    return ConnectionError_(530, f"NOT_ALLOWED - {text}", *cm)


def access_refused(text: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    return ChannelError(403, f"ACCESS_REFUSED - {text}", *cm)


def invalid_message(detail: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    """Content properties that do not decode: refused at the door, for this publisher only.

    RabbitMQ decodes the properties of every publish in rabbit_channel
    (``rabbit_binary_parser:ensure_content_decoded``) and answers a message it
    judges invalid with ``precondition_failed("invalid message: ~tp")``, a 406
    channel close (``mc_amqpl:message`` returning ``{error, _}``). A table its
    parser cannot read at all crashes the channel process instead, which the
    reader turns into a 541 connection close; we do not copy that accident: the
    publisher's channel closes with the same 406 and its connection lives on.
    """
    return ChannelError(406, f"PRECONDITION_FAILED - invalid message: {detail}", *cm)


def invalid_expiration(value: str, reason: str, cm: tuple[int, int] = (0, 0)) -> ChannelError:
    """rabbit_channel's check_expiration_header: 406 at publish, in RabbitMQ's words."""
    return ChannelError(406, f"PRECONDITION_FAILED - invalid expiration '{value}': {reason}", *cm)
