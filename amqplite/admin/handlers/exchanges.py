"""Exchange handlers: list, declare, delete, publish through one."""

from __future__ import annotations

from typing import Any

from amqplite.admin import moves, views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.messages import decode_payload
from amqplite.admin.plumbing import (
    Request,
    Response,
    _bool,
    _exchange_name,
    _obj,
    _str,
    bad_request,
    from_amqp,
    from_amqp_publish,
    not_found,
)
from amqplite.protocol.errors import AMQPError


class ExchangeHandlers(HandlerBase):
    """Routes tagged ``exchanges``."""

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
        ch = self._channel(vh.name, self._actor(req))
        try:
            self.server.execute(self.broker.exchange_declare,
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
        ch = self._channel(vh.name, self._actor(req))
        try:
            self.server.execute(self.broker.exchange_delete, ch, name, if_unused=req.flag("if-unused"))
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
        ch = self._channel(vh.name, self._actor(req))
        try:
            res = self.server.execute(self.broker.basic_publish, ch, exchange, rk, raw, data)
        except AMQPError as exc:
            raise from_amqp_publish(exc) from None
        finally:
            self._close(ch)
        if res.stored:
            await moves.committed(self.server)
        return Response({"routed": bool(res.routed)})
