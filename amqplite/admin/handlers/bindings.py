"""Binding handlers: list, bind and unbind a queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import (
    Request,
    Response,
    _exchange_name,
    _obj,
    _str,
    from_amqp,
    not_found,
)
from amqplite.protocol.errors import AMQPError

if TYPE_CHECKING:
    from amqplite.broker.core import VHost


class BindingHandlers(HandlerBase):
    """Routes tagged ``bindings``."""

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
            self.server.execute(self.broker.queue_bind, ch, qn, ex, rk, args)
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
                    self.server.execute(self.broker.queue_bind, ch, qn, ex, b.routing_key,
                                        b.args_dict, unbind=True)
                except AMQPError as exc:
                    raise from_amqp(exc) from None
                finally:
                    self._close(ch)
                return Response(None, 204)
        raise not_found(f"no binding '{props}' from exchange '{ex}' to queue '{qn}'")
