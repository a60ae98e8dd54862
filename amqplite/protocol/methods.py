"""AMQP 0-9-1 methods (with RabbitMQ's extensions) as frozen attrs classes.

Each class declares its wire layout once (``_method(..., wire)``); encoders
and decoders are generated from it at import time as straight-line Python
(the same technique attrs uses for ``__init__``), because a generic
field-by-field interpreter is several times slower on the publish path.

Field names follow the spec in snake_case (``no_wait``, ``global_`` for the
keyword). ``reserved_N`` fields (e.g. the old ``ticket``) are not attributes:
they decode to nothing and encode as zero/empty. ``longstr`` fields are
``bytes`` except the text lists ``mechanisms`` and ``locales``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import attrs

from amqplite.protocol.codec import FieldTable, decode_table, encode_table
from amqplite.protocol.errors import ConnectionError_, FrameSyntaxError
from amqplite.protocol.spec import ReplyCode

_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_HH = struct.Struct(">HH")


class Method:
    """Base of all method classes (class-level metadata only)."""

    __slots__ = ()

    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    NAME: ClassVar[str]
    SYNCHRONOUS: ClassVar[bool]
    HAS_CONTENT: ClassVar[bool]
    #: (field name, wire kind) in wire order, reserved fields included.
    WIRE: ClassVar[tuple[tuple[str, str], ...]]


#: (class_id, method_id) -> method class.
METHODS: dict[tuple[int, int], type[Method]] = {}
_DECODERS: dict[int, Callable[[Any, int, int], Method]] = {}
_ENCODERS: dict[type[Method], Callable[[Any], bytes]] = {}

_M = TypeVar("_M", bound=type[Method])


def _shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    n = len(raw)
    if n > 255:
        raise ValueError(f"shortstr longer than 255 bytes ({n})")
    return bytes((n,)) + raw


def _longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return _I.pack(len(raw)) + raw


_GEN_NS: dict[str, Any] = {
    "_H": _H,
    "_I": _I,
    "_Q": _Q,
    "_decode_table": decode_table,
    "_encode_table": encode_table,
    "_shortstr": _shortstr,
    "_longstr": _longstr,
    "_bpack": struct.Struct(">B").pack,
    "_Trunc": FrameSyntaxError,
}

_FIXED_DEC = {"octet": (None, 1), "short": ("_H", 2), "long": ("_I", 4), "longlong": ("_Q", 8)}
_FIXED_DEC["timestamp"] = ("_Q", 8)
_RESERVED_ENC = {
    "octet": "b'\\x00'",
    "short": "b'\\x00\\x00'",
    "long": "b'\\x00\\x00\\x00\\x00'",
    "longlong": "b'\\x00' * 8",
    "shortstr": "b'\\x00'",
    "longstr": "b'\\x00\\x00\\x00\\x00'",
    "table": "b'\\x00\\x00\\x00\\x00'",
}


def _generate(cls: type[Method], wire: tuple[tuple[str, str], ...]) -> None:
    """Build and register straight-line decode/encode functions for ``cls``."""
    dec = ["def decode(buf, off, end):"]
    enc = ["def encode(m):", "    p = [_HEAD]"]
    args: list[str] = []
    bitpos = 8  # 8 = no open bit octet
    enc_bits: list[str] = []

    def flush_bits() -> None:
        if enc_bits:
            enc.append(f"    p.append(_bpack({' | '.join(enc_bits)}))")
            enc_bits.clear()

    for idx, (name, kind) in enumerate(wire):
        var = f"v{idx}"
        reserved = name.startswith("reserved")
        if kind == "bit":
            if bitpos == 8:
                flush_bits()
                dec += ["    bits = buf[off]", "    off += 1"]
                enc_bits.append("0")
                bitpos = 0
            dec.append(f"    {var} = bool(bits & {1 << bitpos})")
            if not reserved:
                enc_bits.append(f"({1 << bitpos} if m.{name} else 0)")
            bitpos += 1
        else:
            bitpos = 8
            flush_bits()
            if kind in _FIXED_DEC:
                st, size = _FIXED_DEC[kind]
                if st is None:
                    dec.append(f"    {var} = buf[off]")
                else:
                    dec.append(f"    {var} = {st}.unpack_from(buf, off)[0]")
                dec.append(f"    off += {size}")
                if reserved:
                    enc.append(f"    p.append({_RESERVED_ENC[kind]})")
                elif st is None:
                    enc.append(f"    p.append(_bpack(m.{name}))")
                else:
                    enc.append(f"    p.append({st}.pack(m.{name}))")
            elif kind == "shortstr":
                dec += [
                    "    n = buf[off] + off + 1",
                    f"    {var} = str(buf[off + 1:n], 'utf-8')",
                    "    off = n",
                ]
                enc.append(
                    f"    p.append({_RESERVED_ENC[kind]})"
                    if reserved
                    else f"    p.append(_shortstr(m.{name}))"
                )
            elif kind in ("longstr", "text"):
                conv = "str(buf[off:n], 'utf-8')" if kind == "text" else "bytes(buf[off:n])"
                dec += [
                    "    n = _I.unpack_from(buf, off)[0] + off + 4",
                    "    off += 4",
                    f"    {var} = {conv}",
                    "    off = n",
                ]
                enc.append(
                    f"    p.append({_RESERVED_ENC['longstr']})"
                    if reserved
                    else f"    p.append(_longstr(m.{name}))"
                )
            elif kind == "table":
                dec.append(f"    {var}, off = _decode_table(buf, off, end)")
                enc.append(
                    f"    p.append({_RESERVED_ENC[kind]})"
                    if reserved
                    else f"    p.append(_encode_table(m.{name}))"
                )
            else:  # pragma: no cover - spec table typo
                raise AssertionError(f"unknown wire kind {kind!r}")
        if not reserved:
            args.append(var)
    flush_bits()
    dec += [
        "    if off > end:",
        "        raise _Trunc('method arguments truncated')",
        f"    return _cls({', '.join(args)})",
    ]
    enc.append("    return b''.join(p)")
    ns = dict(_GEN_NS, _cls=cls, _HEAD=_HH.pack(cls.CLASS_ID, cls.METHOD_ID))
    exec(compile("\n".join(dec) + "\n\n" + "\n".join(enc), f"<amqp {cls.NAME}>", "exec"), ns)
    _DECODERS[(cls.CLASS_ID << 16) | cls.METHOD_ID] = ns["decode"]
    _ENCODERS[cls] = ns["encode"]


def _method(
    class_id: int,
    method_id: int,
    name: str,
    wire: str = "",
    *,
    sync: bool = False,
    content: bool = False,
) -> Callable[[_M], _M]:
    """Attach metadata to an attrs method class and generate its codec."""
    fields = tuple(tuple(item.split(":")) for item in wire.split())

    def wrap(cls: _M) -> _M:
        cls.CLASS_ID = class_id
        cls.METHOD_ID = method_id
        cls.NAME = name
        cls.SYNCHRONOUS = sync
        cls.HAS_CONTENT = content
        cls.WIRE = fields  # type: ignore[assignment]
        declared = [a.name for a in attrs.fields(cls)]  # type: ignore[arg-type]
        on_wire = [f for f, _ in fields if not f.startswith("reserved")]
        assert declared == on_wire, (name, declared, on_wire)
        _generate(cls, fields)  # type: ignore[arg-type]
        METHODS[(class_id, method_id)] = cls
        return cls

    return wrap


def _table() -> FieldTable:
    return FieldTable()


_T = attrs.Factory(_table)


def encode_method(method: Method) -> bytes:
    """Method-frame payload: class-id, method-id and the packed arguments."""
    return _ENCODERS[type(method)](method)


def decode_method(payload: bytes | bytearray | memoryview, offset: int = 0,
                  end: int | None = None) -> Method:
    """Decode a method-frame payload (``payload[offset:end]``).

    Unknown class/method ids raise 540 NOT_IMPLEMENTED (RabbitMQ drops the
    socket without a close); undecodable arguments raise FrameSyntaxError
    carrying the method's class and method ids.
    """
    if end is None:
        end = len(payload)
    if end - offset < 4:
        raise FrameSyntaxError("method frame too short")
    class_id, method_id = _HH.unpack_from(payload, offset)
    decoder = _DECODERS.get((class_id << 16) | method_id)
    if decoder is None:
        raise ConnectionError_.make(
            ReplyCode.NOT_IMPLEMENTED,
            f"unknown method class_id={class_id}, method_id={method_id}",
            class_id,
            method_id,
        )
    try:
        return decoder(payload, offset + 4, end)
    except FrameSyntaxError as exc:
        raise FrameSyntaxError(exc.detail, class_id, method_id) from None
    except (IndexError, struct.error, ValueError):
        raise FrameSyntaxError(
            f"cannot decode {METHODS[(class_id, method_id)].NAME}", class_id, method_id
        ) from None


# ---------------------------------------------------------------- connection


@_method(10, 10, "connection.start",
         "version_major:octet version_minor:octet server_properties:table "
         "mechanisms:text locales:text", sync=True)
@attrs.frozen
class ConnectionStart(Method):
    version_major: int = 0
    version_minor: int = 9
    server_properties: FieldTable = _T
    mechanisms: str = "PLAIN AMQPLAIN"
    locales: str = "en_US"


@_method(10, 11, "connection.start-ok",
         "client_properties:table mechanism:shortstr response:longstr locale:shortstr")
@attrs.frozen
class ConnectionStartOk(Method):
    client_properties: FieldTable = _T
    mechanism: str = "PLAIN"
    response: bytes = b""
    locale: str = "en_US"


@_method(10, 20, "connection.secure", "challenge:longstr", sync=True)
@attrs.frozen
class ConnectionSecure(Method):
    challenge: bytes = b""


@_method(10, 21, "connection.secure-ok", "response:longstr")
@attrs.frozen
class ConnectionSecureOk(Method):
    response: bytes = b""


@_method(10, 30, "connection.tune", "channel_max:short frame_max:long heartbeat:short",
         sync=True)
@attrs.frozen
class ConnectionTune(Method):
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@_method(10, 31, "connection.tune-ok", "channel_max:short frame_max:long heartbeat:short")
@attrs.frozen
class ConnectionTuneOk(Method):
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@_method(10, 40, "connection.open",
         "virtual_host:shortstr reserved_1:shortstr reserved_2:bit", sync=True)
@attrs.frozen
class ConnectionOpen(Method):
    virtual_host: str = "/"


@_method(10, 41, "connection.open-ok", "reserved_1:shortstr")
@attrs.frozen
class ConnectionOpenOk(Method):
    pass


@_method(10, 50, "connection.close",
         "reply_code:short reply_text:shortstr class_id:short method_id:short", sync=True)
@attrs.frozen
class ConnectionClose(Method):
    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@_method(10, 51, "connection.close-ok")
@attrs.frozen
class ConnectionCloseOk(Method):
    pass


@_method(10, 60, "connection.blocked", "reason:shortstr")
@attrs.frozen
class ConnectionBlocked(Method):
    reason: str = ""


@_method(10, 61, "connection.unblocked")
@attrs.frozen
class ConnectionUnblocked(Method):
    pass


@_method(10, 70, "connection.update-secret", "new_secret:longstr reason:shortstr", sync=True)
@attrs.frozen
class ConnectionUpdateSecret(Method):
    new_secret: bytes = b""
    reason: str = ""


@_method(10, 71, "connection.update-secret-ok")
@attrs.frozen
class ConnectionUpdateSecretOk(Method):
    pass


# ------------------------------------------------------------------- channel


@_method(20, 10, "channel.open", "reserved_1:shortstr", sync=True)
@attrs.frozen
class ChannelOpen(Method):
    pass


@_method(20, 11, "channel.open-ok", "reserved_1:longstr")
@attrs.frozen
class ChannelOpenOk(Method):
    pass


@_method(20, 20, "channel.flow", "active:bit", sync=True)
@attrs.frozen
class ChannelFlow(Method):
    active: bool = True


@_method(20, 21, "channel.flow-ok", "active:bit")
@attrs.frozen
class ChannelFlowOk(Method):
    active: bool = True


@_method(20, 40, "channel.close",
         "reply_code:short reply_text:shortstr class_id:short method_id:short", sync=True)
@attrs.frozen
class ChannelClose(Method):
    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@_method(20, 41, "channel.close-ok")
@attrs.frozen
class ChannelCloseOk(Method):
    pass


# ------------------------------------------------------------------ exchange


@_method(40, 10, "exchange.declare",
         "reserved_1:short exchange:shortstr type:shortstr passive:bit durable:bit "
         "auto_delete:bit internal:bit no_wait:bit arguments:table", sync=True)
@attrs.frozen
class ExchangeDeclare(Method):
    exchange: str = ""
    type: str = "direct"
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(40, 11, "exchange.declare-ok")
@attrs.frozen
class ExchangeDeclareOk(Method):
    pass


@_method(40, 20, "exchange.delete",
         "reserved_1:short exchange:shortstr if_unused:bit no_wait:bit", sync=True)
@attrs.frozen
class ExchangeDelete(Method):
    exchange: str = ""
    if_unused: bool = False
    no_wait: bool = False


@_method(40, 21, "exchange.delete-ok")
@attrs.frozen
class ExchangeDeleteOk(Method):
    pass


@_method(40, 30, "exchange.bind",
         "reserved_1:short destination:shortstr source:shortstr routing_key:shortstr "
         "no_wait:bit arguments:table", sync=True)
@attrs.frozen
class ExchangeBind(Method):
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(40, 31, "exchange.bind-ok")
@attrs.frozen
class ExchangeBindOk(Method):
    pass


@_method(40, 40, "exchange.unbind",
         "reserved_1:short destination:shortstr source:shortstr routing_key:shortstr "
         "no_wait:bit arguments:table", sync=True)
@attrs.frozen
class ExchangeUnbind(Method):
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(40, 51, "exchange.unbind-ok")
@attrs.frozen
class ExchangeUnbindOk(Method):
    pass


# --------------------------------------------------------------------- queue


@_method(50, 10, "queue.declare",
         "reserved_1:short queue:shortstr passive:bit durable:bit exclusive:bit "
         "auto_delete:bit no_wait:bit arguments:table", sync=True)
@attrs.frozen
class QueueDeclare(Method):
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(50, 11, "queue.declare-ok", "queue:shortstr message_count:long consumer_count:long")
@attrs.frozen
class QueueDeclareOk(Method):
    queue: str = ""
    message_count: int = 0
    consumer_count: int = 0


@_method(50, 20, "queue.bind",
         "reserved_1:short queue:shortstr exchange:shortstr routing_key:shortstr "
         "no_wait:bit arguments:table", sync=True)
@attrs.frozen
class QueueBind(Method):
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(50, 21, "queue.bind-ok")
@attrs.frozen
class QueueBindOk(Method):
    pass


@_method(50, 30, "queue.purge", "reserved_1:short queue:shortstr no_wait:bit", sync=True)
@attrs.frozen
class QueuePurge(Method):
    queue: str = ""
    no_wait: bool = False


@_method(50, 31, "queue.purge-ok", "message_count:long")
@attrs.frozen
class QueuePurgeOk(Method):
    message_count: int = 0


@_method(50, 40, "queue.delete",
         "reserved_1:short queue:shortstr if_unused:bit if_empty:bit no_wait:bit", sync=True)
@attrs.frozen
class QueueDelete(Method):
    queue: str = ""
    if_unused: bool = False
    if_empty: bool = False
    no_wait: bool = False


@_method(50, 41, "queue.delete-ok", "message_count:long")
@attrs.frozen
class QueueDeleteOk(Method):
    message_count: int = 0


@_method(50, 50, "queue.unbind",
         "reserved_1:short queue:shortstr exchange:shortstr routing_key:shortstr "
         "arguments:table", sync=True)
@attrs.frozen
class QueueUnbind(Method):
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    arguments: FieldTable = _T


@_method(50, 51, "queue.unbind-ok")
@attrs.frozen
class QueueUnbindOk(Method):
    pass


# --------------------------------------------------------------------- basic


@_method(60, 10, "basic.qos", "prefetch_size:long prefetch_count:short global_:bit", sync=True)
@attrs.frozen
class BasicQos(Method):
    prefetch_size: int = 0
    prefetch_count: int = 0
    global_: bool = False


@_method(60, 11, "basic.qos-ok")
@attrs.frozen
class BasicQosOk(Method):
    pass


@_method(60, 20, "basic.consume",
         "reserved_1:short queue:shortstr consumer_tag:shortstr no_local:bit no_ack:bit "
         "exclusive:bit no_wait:bit arguments:table", sync=True)
@attrs.frozen
class BasicConsume(Method):
    queue: str = ""
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    no_wait: bool = False
    arguments: FieldTable = _T


@_method(60, 21, "basic.consume-ok", "consumer_tag:shortstr")
@attrs.frozen
class BasicConsumeOk(Method):
    consumer_tag: str = ""


@_method(60, 30, "basic.cancel", "consumer_tag:shortstr no_wait:bit", sync=True)
@attrs.frozen
class BasicCancel(Method):
    consumer_tag: str = ""
    no_wait: bool = False


@_method(60, 31, "basic.cancel-ok", "consumer_tag:shortstr")
@attrs.frozen
class BasicCancelOk(Method):
    consumer_tag: str = ""


@_method(60, 40, "basic.publish",
         "reserved_1:short exchange:shortstr routing_key:shortstr mandatory:bit immediate:bit",
         content=True)
@attrs.frozen
class BasicPublish(Method):
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False


@_method(60, 50, "basic.return",
         "reply_code:short reply_text:shortstr exchange:shortstr routing_key:shortstr",
         content=True)
@attrs.frozen
class BasicReturn(Method):
    reply_code: int = 312
    reply_text: str = "NO_ROUTE"
    exchange: str = ""
    routing_key: str = ""


@_method(60, 60, "basic.deliver",
         "consumer_tag:shortstr delivery_tag:longlong redelivered:bit exchange:shortstr "
         "routing_key:shortstr", content=True)
@attrs.frozen
class BasicDeliver(Method):
    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""


@_method(60, 70, "basic.get", "reserved_1:short queue:shortstr no_ack:bit", sync=True)
@attrs.frozen
class BasicGet(Method):
    queue: str = ""
    no_ack: bool = False


@_method(60, 71, "basic.get-ok",
         "delivery_tag:longlong redelivered:bit exchange:shortstr routing_key:shortstr "
         "message_count:long", content=True)
@attrs.frozen
class BasicGetOk(Method):
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    message_count: int = 0


@_method(60, 72, "basic.get-empty", "reserved_1:shortstr")
@attrs.frozen
class BasicGetEmpty(Method):
    pass


@_method(60, 80, "basic.ack", "delivery_tag:longlong multiple:bit")
@attrs.frozen
class BasicAck(Method):
    delivery_tag: int = 0
    multiple: bool = False


@_method(60, 90, "basic.reject", "delivery_tag:longlong requeue:bit")
@attrs.frozen
class BasicReject(Method):
    delivery_tag: int = 0
    requeue: bool = True


@_method(60, 100, "basic.recover-async", "requeue:bit")
@attrs.frozen
class BasicRecoverAsync(Method):
    requeue: bool = False


@_method(60, 110, "basic.recover", "requeue:bit", sync=True)
@attrs.frozen
class BasicRecover(Method):
    requeue: bool = False


@_method(60, 111, "basic.recover-ok")
@attrs.frozen
class BasicRecoverOk(Method):
    pass


@_method(60, 120, "basic.nack", "delivery_tag:longlong multiple:bit requeue:bit")
@attrs.frozen
class BasicNack(Method):
    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = True


# ------------------------------------------------------------------- confirm


@_method(85, 10, "confirm.select", "no_wait:bit", sync=True)
@attrs.frozen
class ConfirmSelect(Method):
    no_wait: bool = False


@_method(85, 11, "confirm.select-ok")
@attrs.frozen
class ConfirmSelectOk(Method):
    pass


# ------------------------------------------------------------------------ tx


@_method(90, 10, "tx.select", sync=True)
@attrs.frozen
class TxSelect(Method):
    pass


@_method(90, 11, "tx.select-ok")
@attrs.frozen
class TxSelectOk(Method):
    pass


@_method(90, 20, "tx.commit", sync=True)
@attrs.frozen
class TxCommit(Method):
    pass


@_method(90, 21, "tx.commit-ok")
@attrs.frozen
class TxCommitOk(Method):
    pass


@_method(90, 30, "tx.rollback", sync=True)
@attrs.frozen
class TxRollback(Method):
    pass


@_method(90, 31, "tx.rollback-ok")
@attrs.frozen
class TxRollbackOk(Method):
    pass


#: Methods a client may send on a non-zero channel (others are server-to-client).
CLIENT_CHANNEL_METHODS: frozenset[type[Method]] = frozenset(
    {
        ChannelOpen, ChannelFlow, ChannelFlowOk, ChannelClose, ChannelCloseOk,
        ExchangeDeclare, ExchangeDelete, ExchangeBind, ExchangeUnbind,
        QueueDeclare, QueueBind, QueuePurge, QueueDelete, QueueUnbind,
        BasicQos, BasicConsume, BasicCancel, BasicPublish, BasicGet, BasicAck,
        BasicReject, BasicRecoverAsync, BasicRecover, BasicNack,
        ConfirmSelect, TxSelect, TxCommit, TxRollback,
    }
)
