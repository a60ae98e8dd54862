"""Binding handlers: list, bind and unbind queues and exchanges to exchanges."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from amqplite.admin import validate as V
from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, _exchange_name, not_found
from amqplite.admin.validate import body_args
from amqplite.broker.exchanges import Binding
from amqplite.broker.exchanges.base import freeze_args

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

    def _edge(self, req: Request, kind: str) -> tuple[VHost, str, str]:
        """(vhost, source, destination) of a binding path; 404 when an end is missing.

        Queue edges are ``e/{exchange}/q/{queue}``, exchange edges
        ``e/{source}/e/{destination}``, as RabbitMQ names them.
        """
        vh = self._vhost(req.params["vhost"])
        if kind == "queue":
            src, dst = _exchange_name(req.params["exchange"]), req.params["queue"]
        else:
            src = _exchange_name(req.params["source"])
            dst = _exchange_name(req.params["destination"])
        if src not in vh.exchanges:
            raise not_found(f"no exchange '{src}' in vhost '{vh.name}'")
        if dst not in (vh.queues if kind == "queue" else vh.exchanges):
            raise not_found(f"no {kind} '{dst}' in vhost '{vh.name}'")
        return vh, src, dst

    def _edge_bindings(self, req: Request, kind: str) -> tuple[VHost, str, str,
                                                                list[dict[str, Any]]]:
        vh, src, dst = self._edge(req, kind)
        return vh, src, dst, [b for b in self._bindings(vh) if b["source"] == src
                              and b["destination_type"] == kind and b["destination"] == dst]

    async def _bind(self, req: Request, vh: VHost, src: str, kind: str, dst: str, rk: str,
                    args: dict[str, Any], unbind: bool = False) -> None:
        undo = self._journal()
        undo.binding(vh.name, Binding(src, (kind, dst), rk, freeze_args(args)))
        command = self.broker.queue_bind if kind == "queue" else self.broker.exchange_bind
        await self._write_as(req, vh.name, command, dst, src, rk, args, unbind=unbind,
                             undo=undo)

    async def _list_edge(self, req: Request, kind: str) -> Response:
        return Response(self._edge_bindings(req, kind)[3])

    async def _post_edge(self, req: Request, kind: str) -> Response:
        vh, src, dst = self._edge(req, kind)
        body = req.json()
        rk = V.shortstr(body.get("routing_key", ""), "routing_key")
        args = body_args(body)
        await self._bind(req, vh, src, kind, dst, rk, args)
        loc = "/api/bindings/{}/e/{}/{}/{}/{}".format(
            quote(vh.name, safe=""), quote(src, safe=""), kind[0], quote(dst, safe=""),
            quote(views.properties_key(rk, args), safe=""))
        return Response(None, 201, headers={"location": loc})

    def _one_edge(self, req: Request, kind: str) -> tuple[VHost, str, str, dict[str, Any]]:
        vh, src, dst, found = self._edge_bindings(req, kind)
        props = req.params["props"]
        for b in found:
            if b["properties_key"] == props:
                return vh, src, dst, b
        raise not_found(f"no binding '{props}' from exchange '{src}' to {kind} '{dst}'")

    async def _delete_edge(self, req: Request, kind: str) -> Response:
        vh, src, dst, b = self._one_edge(req, kind)
        await self._bind(req, vh, src, kind, dst, b["routing_key"],
                   self._raw_args(vh, src, kind, dst, b),
                   unbind=True)
        return Response(None, 204)

    def _raw_args(self, vh: VHost, src: str, kind: str, dst: str, info: dict[str, Any],
                  ) -> dict[str, Any]:
        """The binding's argument table as stored (the listing has it as JSON)."""
        for b in vh.exchanges[src].bindings:
            if b.destination == (kind, dst) and views.properties_key(
                    b.routing_key, b.args_dict) == info["properties_key"]:
                return b.args_dict
        return {}

    async def pair_bindings(self, req: Request) -> Response:
        return await self._list_edge(req, "queue")

    async def bind_queue(self, req: Request) -> Response:
        return await self._post_edge(req, "queue")

    async def get_queue_binding(self, req: Request) -> Response:
        return Response(self._one_edge(req, "queue")[3])

    async def unbind_queue(self, req: Request) -> Response:
        return await self._delete_edge(req, "queue")

    async def exchange_pair_bindings(self, req: Request) -> Response:
        return await self._list_edge(req, "exchange")

    async def bind_exchange(self, req: Request) -> Response:
        return await self._post_edge(req, "exchange")

    async def get_exchange_binding(self, req: Request) -> Response:
        return Response(self._one_edge(req, "exchange")[3])

    async def unbind_exchange(self, req: Request) -> Response:
        return await self._delete_edge(req, "exchange")

    async def exchange_bindings_source(self, req: Request) -> Response:
        """Bindings in which this exchange is the source."""
        vh, name = self._named_exchange(req)
        return Response([b for b in self._bindings(vh) if b["source"] == name])

    async def exchange_bindings_destination(self, req: Request) -> Response:
        """Bindings in which this exchange is the destination (exchange-to-exchange)."""
        vh, name = self._named_exchange(req)
        return Response([b for b in self._bindings(vh) if b["destination_type"] == "exchange"
                         and b["destination"] == name])

    def _named_exchange(self, req: Request) -> tuple[VHost, str]:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        if name not in vh.exchanges:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        return vh, name
