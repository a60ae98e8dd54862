"""Retained-message handlers: what an x-lvc or x-recent-history exchange keeps,
and MQTT's retained messages of a vhost under its MQTT exchange (``mqtt_exchange``,
amq.topic): they are published there, one per MQTT topic.

``GET /api/exchanges/{vhost}/{name}/retained[/{key}]`` lists them (oldest
first) as RabbitMQ's ``/get`` shows messages, plus their ``key`` (MQTT: the
topic, also as ``topic``; ``/`` in a key is ``%2F`` in the path);
``DELETE`` on the same paths clears them (all, or one key's) and answers
once the store has committed the removal (an MQTT subscriber then gets none).
"""

from __future__ import annotations

from typing import Any

from amqplite.admin import moves, views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, _exchange_name, bad_request, not_found
from amqplite.broker import mqtt_retained
from amqplite.broker.exchanges import Exchange
from amqplite.broker.exchanges.retaining import owner_of
from amqplite.broker.retained import OwnerId
from amqplite.broker.vhost import VHost
from amqplite.config import Settings


def retained_owner(settings: Settings, vhost: str, ex: Exchange) -> OwnerId | None:
    """Whose retained messages an exchange shows: its own (x-lvc, x-recent-history),
    the vhost's MQTT ones (the MQTT exchange, while MQTT is on), or none."""
    if ex.retains:
        return owner_of(vhost, ex.name)
    if settings.mqtt_port and ex.name == settings.mqtt_exchange:
        return mqtt_retained.owner(vhost)
    return None


class RetainedHandlers(HandlerBase):
    """Routes tagged ``retained``."""

    def _retaining(self, req: Request) -> tuple[VHost, Exchange, OwnerId]:
        vh = self._vhost(req.params["vhost"])
        name = _exchange_name(req.params["name"])
        ex = vh.exchanges.get(name)
        if ex is None:
            raise not_found(f"no exchange '{name}' in vhost '{vh.name}'")
        owner = retained_owner(self.server.settings, vh.name, ex)
        if owner is None:
            raise bad_request(f"exchange '{name}' in vhost '{vh.name}' is of type "
                              f"'{ex.type_name}', which retains nothing (x-lvc and "
                              "x-recent-history do, and the MQTT exchange "
                              f"'{self.server.settings.mqtt_exchange}' keeps MQTT's)")
        return vh, ex, owner

    async def list_retained(self, req: Request) -> Response:
        vh, ex, owner = self._retaining(req)
        mqtt = owner[1] == mqtt_retained.KIND
        # message bodies: the user's AMQP read on the exchange, as a binding from it needs
        self._check_perm(req, vh.name, "read", "exchange", ex.name)
        encoding = req.query.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise bad_request("encoding must be auto or base64")
        key = req.params.get("key")
        rs = self.broker.retained.find(owner)
        out: list[dict[str, Any]] = []
        for r in [] if rs is None else list(rs):
            if key is not None and r.key != key:
                continue
            info = views.message_info(r.message, r.message.body, redelivered=False,
                                      encoding=encoding)
            info["key"] = r.key
            if mqtt:  # the key is the MQTT topic; routing_key is its AMQP translation
                info["topic"] = r.key
            info["stored"] = r.stored
            out.append(info)
        if key is not None and not out:
            raise not_found(f"no retained message under key '{key}' in exchange '{ex.name}' "
                            f"in vhost '{vh.name}'")
        return Response(out)

    async def clear_retained(self, req: Request) -> Response:
        vh, ex, owner = self._retaining(req)
        self._check_perm(req, vh.name, "configure", "exchange", ex.name)
        rs = self.broker.retained.find(owner)
        removed = 0 if rs is None else self.server.execute(self.broker.retained.remove, rs,
                                                           req.params.get("key"))
        if removed:
            await moves.committed(self.server)
        return Response({"removed": removed})
