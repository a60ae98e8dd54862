"""Exchange handlers: list, declare, delete, publish through one."""

from __future__ import annotations

import struct
from typing import Any

from amqplite.admin import validate as V
from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.handlers.retained import retained_owner
from amqplite.admin.messages import decode_payload
from amqplite.admin.plumbing import (
    Request,
    Response,
    _exchange_name,
    bad_request,
    from_amqp_publish,
    not_found,
)
from amqplite.admin.validate import body_args, body_bool, body_obj, body_str
from amqplite.broker.exchanges import Exchange


class ExchangeHandlers(HandlerBase):
    """Routes tagged ``exchanges``."""

    async def list_exchanges(self, req: Request) -> Response:
        return Response([self._exchange_info(vh.name, ex) for vh in self._vhosts(req)
                         for ex in sorted(vh.exchanges.values(), key=lambda e: e.name)])

    def _exchange_info(self, vhost: str, ex: Exchange) -> dict[str, Any]:
        owner = retained_owner(self.server.settings, vhost, ex)
        totals = None if owner is None else self.broker.retained.totals(owner)
        return views.exchange_info(vhost, ex, totals)

    async def get_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        ex = vh.exchanges.get(name)
        if ex is None:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        return Response(self._exchange_info(vh.name, ex))

    async def put_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        body = req.json()
        name = V.shortstr(req.params["name"], "name")
        type_ = body_str(body, "type")
        if not type_:
            raise bad_request("type is required (direct, fanout, topic or headers)")
        args = body_args(body)
        existed = name in vh.exchanges
        undo = self._journal()
        undo.exchange(vh.name, name)
        await self._write_as(req, vh.name, self.broker.exchange_declare, name, type_,
                             arguments=args, undo=undo,
                             durable=body_bool(body, "durable", True),
                             auto_delete=body_bool(body, "auto_delete", False),
                             internal=body_bool(body, "internal", False))
        return Response(None, 204 if existed else 201)

    async def delete_exchange(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        if name not in vh.exchanges:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        await self._write_as(req, vh.name, self.broker.exchange_delete, name,
                             if_unused=req.flag("if-unused"))
        return Response(None, 204)

    async def publish(self, req: Request) -> Response:
        from amqplite.protocol.codec import FieldTable
        from amqplite.protocol.properties import BasicProperties, encode_properties

        vh = self._vhost(req.params["vhost"])
        exchange = _exchange_name(req.params["name"])
        body = req.json()
        rk = body_str(body, "routing_key", "") or ""
        payload = body.get("payload", "")
        encoding = body_str(body, "payload_encoding", "string")
        if not isinstance(payload, str) or encoding not in ("string", "base64"):
            raise bad_request("payload must be a string and payload_encoding string or base64")
        try:
            data = decode_payload(payload, encoding)
        except ValueError:
            raise bad_request("payload is not valid base64") from None
        props = body_obj(body, "properties")
        fields: dict[str, Any] = {}
        for k, v in props.items():
            if k not in views.PROPERTY_FIELDS:
                raise bad_request(f"unknown message property {k!r}")
            if k == "headers":  # a table AMQP can hold (a 900-deep one was a 500)
                if not isinstance(v, dict):
                    raise bad_request("properties.headers must be an object")
                v = FieldTable(V.arguments(v, "properties.headers"))
            elif k in ("delivery_mode", "priority", "timestamp"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (
                        k != "timestamp" and v > 255):
                    raise bad_request(f"properties.{k} must be an integer")
            elif not isinstance(v, str):
                raise bad_request(f"properties.{k} must be a string")
            fields[k] = v
        try:
            raw = encode_properties(BasicProperties(**fields))
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            raise bad_request(f"cannot encode properties: {exc}") from None
        # answered once its own submission committed (a stored message is durable)
        res = await self._write_as(req, vh.name, self.broker.basic_publish, exchange,
                                   V.shortstr(rk, "routing_key"), raw, data,
                                   to_http=from_amqp_publish)
        return Response({"routed": bool(res.routed)})
