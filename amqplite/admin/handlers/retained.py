"""Retained-message handlers: what an x-lvc or x-recent-history exchange keeps.

``GET /api/exchanges/{vhost}/{name}/retained[/{key}]`` lists them (oldest
first) as RabbitMQ's ``/get`` shows messages, plus their ``key``;
``DELETE`` on the same paths clears them (all, or one key's) and answers
once the store has committed the removal.
"""

from __future__ import annotations

from typing import Any

from amqplite.admin import moves, views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, _exchange_name, bad_request, not_found
from amqplite.broker.exchanges import Exchange
from amqplite.broker.exchanges.retaining import owner_of
from amqplite.broker.vhost import VHost


class RetainedHandlers(HandlerBase):
    """Routes tagged ``retained``."""

    def _retaining(self, req: Request) -> tuple[VHost, Exchange]:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        ex = vh.exchanges.get(name)
        if ex is None:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        if not ex.retains:
            raise bad_request(f"exchange '{name}' in vhost '{vh.name}' is of type "
                              f"'{ex.type_name}', which retains nothing (x-lvc and "
                              "x-recent-history do)")
        return vh, ex

    async def list_retained(self, req: Request) -> Response:
        vh, ex = self._retaining(req)
        # message bodies: the user's AMQP read on the exchange, as a binding from it needs
        self._check_perm(req, vh.name, "read", "exchange", ex.name)
        encoding = req.query.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        key = req.params.get("key")
        rs = self.broker.retained.find(owner_of(vh.name, ex.name))
        out: list[dict[str, Any]] = []
        for r in [] if rs is None else list(rs):
            if key is not None and r.key != key:
                continue
            info = views.message_info(r.message, r.message.body, redelivered=False,
                                      encoding=encoding)
            info["key"] = r.key
            info["stored"] = r.stored
            out.append(info)
        if key is not None and not out:
            raise not_found(f"no retained message under key '{key}' in exchange '{ex.name}' "
                            f"in vhost '{vh.name}'")
        return Response(out)

    async def clear_retained(self, req: Request) -> Response:
        vh, ex = self._retaining(req)
        self._check_perm(req, vh.name, "configure", "exchange", ex.name)
        removed = self.server.execute(self.broker.clear_retained, vh, ex, req.params.get("key"))
        if removed:
            await moves.committed(self.server)
        return Response({"removed": removed})
