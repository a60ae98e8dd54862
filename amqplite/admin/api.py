"""The admin API handlers, modelled on RabbitMQ's management API.

Handlers run on the broker's trio loop and read or mutate broker state
directly; every mutation is followed by ``server.settle()``. The route table
lives in :mod:`amqplite.admin.routes`, the source of the OpenAPI document too.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from amqplite.admin import moves, views
from amqplite.admin.messages import (
    ACK_MODES,
    death_summary,
    decode_payload,
    matches,
    parse_filter,
)
from amqplite.broker.auth import User
from amqplite.protocol.errors import AMQPError

if TYPE_CHECKING:
    from amqplite.broker.core import VHost
    from amqplite.broker.model import ChannelState, Entry, Session
    from amqplite.broker.queue import Queue
    from amqplite.server.app import Server

FORCED_TEXT = "CONNECTION_FORCED - Closed via management plugin"
#: AMQP reply code -> HTTP status for errors raised by broker commands
_AMQP_STATUS = {403: 403, 404: 404, 405: 409, 406: 400}


# ------------------------------------------------------------------ plumbing
@attrs.define
class Request:
    method: str
    params: dict[str, str]
    query: dict[str, str]
    body: bytes = b""
    user: User | None = None
    #: every value of repeated query parameters
    query_all: dict[str, list[str]] = attrs.field(factory=dict)

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (an empty body is ``{}``); 400 otherwise."""
        if not self.body.strip():
            return {}
        try:
            data = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(400, "bad_request", f"body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise HTTPError(400, "bad_request", "body must be a JSON object")
        return data

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() in ("true", "1", "yes")

    def int_arg(self, name: str, default: int, lo: int = 0, hi: int = 1 << 31) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            v = int(raw)
        except ValueError:
            raise bad_request(f"query parameter {name} must be an integer") from None
        if not lo <= v <= hi:
            raise HTTPError(400, "bad_request", f"query parameter {name} must be in {lo}..{hi}")
        return v


@attrs.define
class Response:
    body: Any = None
    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)
    content_type: str = "application/json"


class HTTPError(Exception):
    """An error answer: ``{"error": ..., "reason": ...}`` with a status code."""

    def __init__(self, status: int, error: str, reason: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, error, reason)
        self.status, self.error, self.reason = status, error, reason
        self.headers = headers or {}

    def response(self) -> Response:
        return Response({"error": self.error, "reason": self.reason}, self.status, self.headers)


def not_found(reason: str) -> HTTPError:
    return HTTPError(404, "Object Not Found", reason)


def bad_request(reason: str) -> HTTPError:
    return HTTPError(400, "bad_request", reason)


def from_amqp(exc: AMQPError) -> HTTPError:
    status = _AMQP_STATUS.get(exc.reply_code, 400)
    error = {404: "Object Not Found", 403: "access_refused", 409: "resource_locked"}.get(
        status, "bad_request")
    return HTTPError(status, error, exc.reply_text)


def _str(body: dict[str, Any], key: str, default: str | None = None) -> str | None:
    v = body.get(key, default)
    if v is not None and not isinstance(v, str):
        raise bad_request(f"{key} must be a string")
    return v


def _bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    v = body.get(key, default)
    if not isinstance(v, bool):
        raise bad_request(f"{key} must be true or false")
    return v


def _int(body: dict[str, Any], key: str, default: int | None, lo: int = 0) -> int | None:
    v = body.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise bad_request(f"{key} must be an integer >= {lo}")
    return v


def _obj(body: dict[str, Any], key: str) -> dict[str, Any]:
    v = body.get(key) or {}
    if not isinstance(v, dict):
        raise bad_request(f"{key} must be a JSON object")
    return v


def _exchange_name(name: str) -> str:
    return "" if name == "amq.default" else name


# ------------------------------------------------------------------ handlers
class AdminAPI:
    """One instance per server; handler names match ``Route.handler``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.broker = server.broker
        self.rates = views.Rates()
        self._sessions: dict[str, Session] = {}
        self._next_channel = itertools.count(1)

    async def run_sampler(self) -> None:
        """Sample counters once a second for the message rates."""
        while True:
            self.rates.sample(self.server)
            await trio.sleep(1.0)

    # ---------------------------------------------------------------- helpers
    def _vhosts(self, req: Request) -> list[VHost]:
        name = req.params.get("vhost")
        if name is None:
            return list(self.broker.vhosts.values())
        return [self._vhost(name)]

    def _vhost(self, name: str) -> VHost:
        vh = self.broker.vhosts.get(name)
        if vh is None:
            raise not_found(f"no vhost '{name}'")
        return vh

    def _queue(self, req: Request) -> tuple[VHost, Queue]:
        vh = self._vhost(req.params["vhost"])
        q = vh.queues.get(req.params["name"])
        if q is None:
            raise not_found(f"no queue '{req.params['name']}' in vhost '{vh.name}'")
        return vh, q

    def _channel(self, vhost: str) -> ChannelState:
        """A fresh channel on the admin session of ``vhost``; close it when done."""
        s = self._sessions.get(vhost)
        if s is None or s.id not in self.broker.sessions:
            s = self.broker.open_session("admin-api", vhost, "admin-api")
            self._sessions[vhost] = s
        n = next(self._next_channel)
        return self.broker.open_channel(s, n)

    def _close(self, ch: ChannelState) -> None:
        self.broker.close_channel(ch)
        self.server.settle()

    def _ubytes(self) -> dict[int, int]:
        return views.unacked_bytes(self.server)

    # ------------------------------------------------------------------- meta
    async def openapi(self, req: Request) -> Response:
        from amqplite.admin.openapi import document

        return Response(document())

    async def get_overview(self, req: Request) -> Response:
        return Response(views.overview(self.server, self.rates))

    async def health_alarms(self, req: Request) -> Response:
        """RabbitMQ's alarms health check: load balancers and probes key on the status."""
        alarms = views.alarms(self.server)
        if not alarms:
            return Response({"status": "ok"})
        return Response({"status": "failed", "reason": "There are alarms in effect in the node",
                         "alarms": alarms}, 503)

    async def get_memory(self, req: Request) -> Response:
        return Response(views.memory(self.server))

    async def set_memory_high_watermark(self, req: Request) -> Response:
        """rabbitmqctl set_vm_memory_high_watermark: applies at once, lost on restart."""
        from amqplite.config import parse_watermark

        value = req.json().get("memory_high_watermark")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise bad_request("memory_high_watermark must be a string or a number")
        try:
            watermark = parse_watermark(value)
        except ValueError as exc:
            raise bad_request(f"memory_high_watermark: {exc}") from None
        if self.server.memory is None:
            raise HTTPError(503, "unavailable", "the memory monitor is not running")
        self.server.memory.set_watermark(watermark)
        return Response(views.memory(self.server))

    async def whoami(self, req: Request) -> Response:
        assert req.user is not None
        return Response({"name": req.user.name, "tags": list(req.user.tags),
                         "is_admin": req.user.is_admin})

    async def list_vhosts(self, req: Request) -> Response:
        out = []
        for vh in self.broker.vhosts.values():
            ready = sum(q.message_count for q in vh.queues.values())
            un = sum(q.unacked for q in vh.queues.values())
            out.append({"name": vh.name, "messages": ready + un, "messages_ready": ready,
                        "messages_unacknowledged": un})
        return Response(out)

    # ------------------------------------------------------------ connections
    def _connection(self, name: str) -> Any:
        for c in self.server.connections:
            if c.name == name:
                return c
        raise not_found(f"no connection '{name}'")

    async def list_connections(self, req: Request) -> Response:
        conns = sorted(self.server.connections, key=lambda c: c.connected_at)
        return Response([views.connection_info(c) for c in conns])

    async def get_connection(self, req: Request) -> Response:
        return Response(views.connection_info(self._connection(req.params["name"])))

    async def close_connection(self, req: Request) -> Response:
        c = self._connection(req.params["name"])
        c.force_close(320, FORCED_TEXT)
        self.server.settle()
        return Response(None, 204)

    async def list_channels(self, req: Request) -> Response:
        return Response([views.channel_info(c, ch) for c, ch in views.channels(self.server)])

    async def list_consumers(self, req: Request) -> Response:
        vhost = req.params.get("vhost")
        if vhost is not None:
            self._vhost(vhost)
        out = []
        for c, ch in views.channels(self.server):
            for cons in ch.consumers.values():
                if vhost is None or cons.queue.vhost == vhost:
                    out.append(views.consumer_info(c, ch, cons))
        return Response(out)

    # -------------------------------------------------------------- exchanges
    async def list_exchanges(self, req: Request) -> Response:
        return Response([views.exchange_info(vh.name, ex) for vh in self._vhosts(req)
                         for ex in sorted(vh.exchanges.values(), key=lambda e: e.name)])

    async def get_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        ex = vh.exchanges.get(name)
        if ex is None:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        return Response(views.exchange_info(vh.name, ex))

    async def put_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        body = req.json()
        name = req.params["name"]
        type_ = _str(body, "type")
        if not type_:
            raise bad_request("type is required (direct, fanout, topic or headers)")
        existed = name in vh.exchanges
        ch = self._channel(vh.name)
        try:
            self.broker.exchange_declare(
                ch, name, type_, durable=_bool(body, "durable", True),
                auto_delete=_bool(body, "auto_delete"), internal=_bool(body, "internal"),
                arguments=_obj(body, "arguments"))
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        return Response(None, 204 if existed else 201)

    async def delete_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        if name not in vh.exchanges:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        ch = self._channel(vh.name)
        try:
            self.broker.exchange_delete(ch, name, if_unused=req.flag("if-unused"))
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        return Response(None, 204)

    async def publish(self, req: Request) -> Response:
        from amqplite.protocol.codec import FieldTable
        from amqplite.protocol.properties import BasicProperties, encode_properties

        vh = self._vhost(req.params["vhost"])
        exchange = _exchange_name(req.params["name"])
        body = req.json()
        rk = _str(body, "routing_key", "") or ""
        payload = body.get("payload", "")
        encoding = _str(body, "payload_encoding", "string")
        if not isinstance(payload, str) or encoding not in ("string", "base64"):
            raise bad_request("payload must be a string and payload_encoding string or base64")
        try:
            data = decode_payload(payload, encoding)
        except ValueError:
            raise bad_request("payload is not valid base64") from None
        props = _obj(body, "properties")
        fields: dict[str, Any] = {}
        for k, v in props.items():
            if k not in views.PROPERTY_FIELDS:
                raise bad_request(f"unknown message property {k!r}")
            if k == "headers":
                if not isinstance(v, dict):
                    raise bad_request("properties.headers must be an object")
                v = FieldTable(v)
            elif k in ("delivery_mode", "priority", "timestamp"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (
                        k != "timestamp" and v > 255):
                    raise bad_request(f"properties.{k} must be an integer")
            elif not isinstance(v, str):
                raise bad_request(f"properties.{k} must be a string")
            fields[k] = v
        try:
            raw = encode_properties(BasicProperties(**fields))
        except (ValueError, TypeError) as exc:
            raise bad_request(f"cannot encode properties: {exc}") from None
        ch = self._channel(vh.name)
        try:
            res = self.broker.basic_publish(ch, exchange, rk, raw, data)
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        if res.stored:
            await moves.committed(self.server)
        return Response({"routed": bool(res.routed)})

    # ----------------------------------------------------------------- queues
    async def list_queues(self, req: Request) -> Response:
        ub = self._ubytes()
        return Response([views.queue_info(self.server, q, self.rates, ub)
                         for vh in self._vhosts(req)
                         for q in sorted(vh.queues.values(), key=lambda q: q.name)])

    async def get_queue(self, req: Request) -> Response:
        _, q = self._queue(req)
        return Response(views.queue_info(self.server, q, self.rates, self._ubytes()))

    async def put_queue(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = req.params["name"]
        body = req.json()
        args = _obj(body, "arguments")
        try:
            from amqplite.broker.policy import validate_queue_args
        except ImportError:  # pragma: no cover - older broker
            validate_queue_args = None  # type: ignore[assignment]
        if validate_queue_args is not None:
            bad = validate_queue_args(args)
            if bad is not None:
                raise bad_request(f"invalid arg '{bad[0]}': {bad[1]}")
        existed = name in vh.queues
        ch = self._channel(vh.name)
        try:
            self.broker.queue_declare(ch, name, durable=_bool(body, "durable", True),
                                      auto_delete=_bool(body, "auto_delete"), arguments=args)
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        return Response(None, 204 if existed else 201)

    async def delete_queue(self, req: Request) -> Response:
        vh, q = self._queue(req)
        if req.flag("if-empty") and q.message_count:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' is not empty")
        if req.flag("if-unused") and q.consumers:
            raise bad_request(f"queue '{q.name}' in vhost '{vh.name}' in use")
        self.broker._delete_queue(vh, q)
        self.server.settle()
        return Response(None, 204)

    async def purge_queue(self, req: Request) -> Response:
        _, q = self._queue(req)
        n = self.broker.purge(q)
        self.server.settle()
        return Response({"purged": n})

    # --------------------------------------------------------------- messages
    async def get_messages(self, req: Request) -> Response:
        from amqplite.broker.core import NEED_PAGE_IN

        vh, q = self._queue(req)
        body = req.json()
        count = _int(body, "count", 1, lo=1) or 1
        ackmode = _str(body, "ackmode", "ack_requeue_true")
        if ackmode not in ACK_MODES:
            raise bad_request(f"ackmode must be one of {', '.join(ACK_MODES)}")
        encoding = _str(body, "encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        truncate = _int(body, "truncate", None)
        ch = self._channel(vh.name)
        out: list[dict[str, Any]] = []
        try:
            for _ in range(count):
                for _attempt in range(20):
                    r = self.broker.basic_get(ch, q.name, no_ack=False)
                    if r is not NEED_PAGE_IN:
                        break
                    self.server.settle()
                    await self.server.wait_paged(vh.name, q.name)
                else:
                    raise HTTPError(503, "unavailable", "message body could not be paged in")
                if r is None:
                    break
                _tag, redelivered, msg, remaining = r[:4]
                override = r[4] if len(r) > 4 else None  # e.g. x-delivery-count added
                info = views.message_info(msg, msg.body, redelivered=redelivered,
                                          encoding=encoding or "auto", truncate=truncate,
                                          properties_raw=override)
                info["message_count"] = remaining
                out.append(info)
            if out:
                if ackmode == "ack_requeue_false":
                    self.broker.basic_ack(ch, 0, multiple=True)
                else:
                    self.broker.basic_nack(ch, 0, multiple=True,
                                           requeue=ackmode.endswith("requeue_true"))
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        return Response(out)

    async def peek_messages(self, req: Request) -> Response:
        _, q = self._queue(req)
        limit = req.int_arg("limit", 100, 0, 100_000)
        offset = req.int_arg("offset", 0)
        truncate = req.int_arg("truncate", -1, -1)
        encoding = req.query.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        try:
            parts = [f for v in req.query_all.get("filter", []) for f in v.split(",") if f]
            flt = parse_filter(parts or None)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        total = q.message_count
        picked: list[tuple[int, Entry]] = []
        if not flt:
            picked = list(enumerate(itertools.islice(q.ready, offset, offset + limit), offset))
        else:
            picked = await self._filtered(q, flt, offset, limit)
        bodies = await moves.load_bodies(self.server, [e for _, e in picked])
        out = [views.entry_info(e, i, e.message.body if e.message.body is not None
                                else bodies.get(e.message.key),
                                encoding=encoding, truncate=truncate if truncate >= 0 else None)
               for i, e in picked]
        return Response(out, headers={"x-total-count": str(total)})

    async def _filtered(self, q: Queue, flt: dict[str, str], offset: int,
                        limit: int) -> list[tuple[int, Entry]]:
        """Ready entries (with their index) matching ``flt``, after ``offset`` matches."""
        snapshot = list(q.ready)
        out: list[tuple[int, Entry]] = []
        skipped = 0
        for start in range(0, len(snapshot), 500):
            chunk = snapshot[start:start + 500]
            bodies = await moves.load_bodies(self.server, chunk) if "body" in flt else {}
            for i, e in enumerate(chunk, start):
                m = e.message
                headers = moves._headers(m)
                body = m.body if m.body is not None else bodies.get(m.key)
                if not matches(flt, views.filter_fields(m, death_summary(headers)), headers, body):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                out.append((i, e))
                if len(out) >= limit:
                    return out
        return out

    def _move_args(self, body: dict[str, Any]) -> tuple[int | None, dict[str, str]]:
        limit = _int(body, "limit", None, lo=1)
        try:
            flt = parse_filter(body.get("filter"))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return limit, flt

    async def move_messages(self, req: Request) -> Response:
        vh, q = self._queue(req)
        body = req.json()
        limit, flt = self._move_args(body)
        to_queue = _str(body, "to_queue")
        to_exchange = _str(body, "to_exchange")
        if (to_queue is None) == (to_exchange is None):
            raise bad_request("give exactly one of to_queue or to_exchange (+ routing_key)")
        if to_queue is not None:
            dst = vh.queues.get(to_queue)
            if dst is None:
                raise not_found(f"no queue '{to_queue}' in vhost '{vh.name}'")
            if dst is q:
                raise bad_request("source and destination queue are the same")

            def resolve(e: Entry, death: Any) -> list[Queue] | str:
                return [dst] if not dst.deleted else f"queue '{to_queue}' was deleted"

            res = await moves.move(self.server, vh, q, resolve, limit=limit, flt=flt,
                                   exchange_for=lambda e: "", routing_key_for=lambda e: to_queue)
        else:
            assert to_exchange is not None
            xname = _exchange_name(to_exchange)
            rk = _str(body, "routing_key")
            ex = vh.exchanges.get(xname)
            if ex is None:
                raise not_found(f"no exchange '{xname}' in vhost '{vh.name}'")

            def resolve(e: Entry, death: Any) -> list[Queue] | str:
                key = e.message.routing_key if rk is None else rk
                qs = [t for t in self.broker.route(vh, ex, key, e.message) if t is not q]
                return qs or f"unroutable: exchange '{xname}' routing key '{key}'"

            res = await moves.move(
                self.server, vh, q, resolve, limit=limit, flt=flt,
                exchange_for=lambda e: xname,
                routing_key_for=lambda e: e.message.routing_key if rk is None else rk)
        return Response(res.as_dict())

    async def replay_messages(self, req: Request) -> Response:
        vh, q = self._queue(req)
        body = req.json()
        limit, flt = self._move_args(body)
        target = _str(body, "queue")
        to = _str(body, "to", "origin")
        if to not in ("origin", "exchange"):
            raise bad_request("to must be origin (the queue it died in) or exchange")
        if target is not None:
            dst = vh.queues.get(target)
            if dst is None:
                raise not_found(f"no queue '{target}' in vhost '{vh.name}'")
            if dst is q:
                raise bad_request("source and destination queue are the same")

        def origin(death: Any) -> tuple[str, list[str]] | None:
            if not death or not death.get("origin_queue"):
                return None
            return death.get("origin_exchange") or "", death.get("origin_routing_keys") or []

        def resolve(e: Entry, death: Any) -> list[Queue] | str:
            if target is not None:
                return [vh.queues[target]] if target in vh.queues else f"no queue '{target}'"
            o = origin(death)
            if o is None:
                return "not a dead-lettered message (no x-death header)"
            if to == "origin":
                oq = vh.queues.get(death["origin_queue"])
                if oq is None:
                    return f"origin queue '{death['origin_queue']}' does not exist"
                if oq is q:
                    return "origin queue is this queue"
                return [oq]
            ex = vh.exchanges.get(o[0])
            if ex is None:
                return f"origin exchange '{o[0]}' does not exist"
            found: dict[str, Queue] = {}
            for key in o[1] or [e.message.routing_key]:
                for t in self.broker.route(vh, ex, key, e.message):
                    if t is not q:
                        found[t.name] = t
            return list(found.values()) or f"unroutable via exchange '{o[0]}'"

        def exchange_for(e: Entry) -> str:
            if target is not None or to == "origin":
                return ""
            d = death_summary(moves._headers(e.message)) or {}
            return d.get("origin_exchange") or ""

        def routing_key_for(e: Entry) -> str:
            if target is not None:
                return target
            d = death_summary(moves._headers(e.message)) or {}
            if to == "origin":
                return d.get("origin_queue") or e.message.routing_key
            keys = d.get("origin_routing_keys") or [e.message.routing_key]
            return keys[0]

        res = await moves.move(self.server, vh, q, resolve, limit=limit, flt=flt,
                               exchange_for=exchange_for, routing_key_for=routing_key_for)
        return Response(res.as_dict())

    # --------------------------------------------------------------- bindings
    def _bindings(self, vh: VHost) -> Iterator[dict[str, Any]]:
        for q in sorted(vh.queues.values(), key=lambda q: q.name):
            yield views.default_binding(vh.name, q)
        rows = [views.binding_info(vh.name, b)
                for ex in vh.exchanges.values() for b in ex.bindings]
        yield from sorted(rows, key=lambda r: (r["source"], r["destination"], r["routing_key"]))

    async def list_bindings(self, req: Request) -> Response:
        return Response([b for vh in self._vhosts(req) for b in self._bindings(vh)])

    async def queue_bindings(self, req: Request) -> Response:
        vh, q = self._queue(req)
        return Response([b for b in self._bindings(vh)
                         if b["destination_type"] == "queue" and b["destination"] == q.name])

    def _pair(self, req: Request) -> tuple[VHost, str, str]:
        vh = self._vhost(req.params["vhost"])
        ex, qn = _exchange_name(req.params["exchange"]), req.params["queue"]
        if ex not in vh.exchanges:
            raise not_found(f"no exchange '{ex}' in vhost '{vh.name}'")
        if qn not in vh.queues:
            raise not_found(f"no queue '{qn}' in vhost '{vh.name}'")
        return vh, ex, qn

    async def pair_bindings(self, req: Request) -> Response:
        vh, ex, qn = self._pair(req)
        return Response([b for b in self._bindings(vh) if b["source"] == ex
                         and b["destination_type"] == "queue" and b["destination"] == qn])

    async def bind_queue(self, req: Request) -> Response:
        vh, ex, qn = self._pair(req)
        body = req.json()
        rk = _str(body, "routing_key", "") or ""
        args = _obj(body, "arguments")
        ch = self._channel(vh.name)
        try:
            self.broker.queue_bind(ch, qn, ex, rk, args)
        except AMQPError as exc:
            raise from_amqp(exc) from None
        finally:
            self._close(ch)
        from urllib.parse import quote

        loc = "/api/bindings/{}/e/{}/q/{}/{}".format(
            *(quote(x, safe="") for x in (vh.name, ex, qn, views.properties_key(rk, args))))
        return Response(None, 201, headers={"location": loc})

    async def unbind_queue(self, req: Request) -> Response:
        vh, ex, qn = self._pair(req)
        props = req.params["props"]
        for b in list(vh.exchanges[ex].bindings):
            if b.destination == ("queue", qn) and views.properties_key(
                    b.routing_key, b.args_dict) == props:
                ch = self._channel(vh.name)
                try:
                    self.broker.queue_bind(ch, qn, ex, b.routing_key, b.args_dict, unbind=True)
                except AMQPError as exc:
                    raise from_amqp(exc) from None
                finally:
                    self._close(ch)
                return Response(None, 204)
        raise not_found(f"no binding '{props}' from exchange '{ex}' to queue '{qn}'")

    # --------------------------------------------------------------- policies
    def _policy_dict(self, p: Any) -> dict[str, Any]:
        if hasattr(p, "as_dict"):
            d = p.as_dict()
        else:  # pragma: no cover - older Policy shape
            d = {"vhost": getattr(p, "vhost", "/"), "name": p.name, "pattern": p.pattern,
                 "apply-to": p.apply_to, "priority": p.priority,
                 "definition": dict(p.definition)}
        return views.jsonable(d)  # type: ignore[no-any-return]

    def _policies(self) -> dict[str, dict[str, Any]]:
        pol = getattr(self.broker, "policies", None)
        if pol is None:
            raise HTTPError(501, "not_implemented", "this broker has no policy support")
        return pol  # type: ignore[no-any-return]

    async def list_policies(self, req: Request) -> Response:
        pols = self._policies()
        out = []
        for vh in self._vhosts(req):
            for name in sorted(pols.get(vh.name, {})):
                d = self._policy_dict(pols[vh.name][name])
                d["vhost"] = vh.name
                out.append(d)
        return Response(out)

    async def get_policy(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        p = self._policies().get(vh.name, {}).get(req.params["name"])
        if p is None:
            raise not_found(f"no policy '{req.params['name']}' in vhost '{vh.name}'")
        d = self._policy_dict(p)
        d["vhost"] = vh.name
        return Response(d)

    async def put_policy(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        pols = self._policies()
        body = req.json()
        name = req.params["name"]
        pattern = _str(body, "pattern")
        if pattern is None:
            raise bad_request("pattern is required")
        definition = body.get("definition")
        if not isinstance(definition, dict):
            raise bad_request("definition must be a JSON object")
        priority = _int(body, "priority", 0, lo=-(1 << 31)) or 0
        apply_to = _str(body, "apply-to", "queues") or "queues"
        existed = name in pols.get(vh.name, {})
        try:
            self.broker.set_policy(vh.name, name, pattern, definition, priority=priority,
                                   apply_to=apply_to)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        self.server.settle()
        return Response(None, 204 if existed else 201)

    async def delete_policy(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        self._policies()
        if not self.broker.clear_policy(vh.name, req.params["name"]):
            raise not_found(f"no policy '{req.params['name']}' in vhost '{vh.name}'")
        self.server.settle()
        return Response(None, 204)
