"""Retained-message handlers: what an x-lvc or x-recent-history exchange keeps,
and MQTT's retained messages of a vhost under its MQTT exchange (``mqtt_exchange``,
amq.topic): they are published there, one per MQTT topic.

``GET /api/exchanges/{vhost}/{name}/retained[/{key}]`` lists them (oldest
first) as RabbitMQ's ``/get`` shows messages, plus their ``key`` (MQTT: the
topic, also as ``topic``; ``/`` in a key is ``%2F`` in the path);
``DELETE`` on the same paths clears them (all, or one key's) and answers
once the store has committed the removal (an MQTT subscriber then gets none).

A listing is bounded as a peek is: at most ``limit`` messages (default
:data:`DEFAULT_LIMIT`) from ``offset``, and at most ``admin_peek_max_bytes`` of
payload and properties; ``x-total-count`` gives the set's size, ``x-next-offset``
where the next call goes on (absent at the end), ``x-max-bytes-reached`` that
the byte cap stopped it. ``page``/``page_size`` give RabbitMQ's paged object
instead. Only the messages shown are rendered, so a 200,000-key set costs a
listing one page, not the set.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from amqplite.admin import listing, moves, views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, _exchange_name, bad_request, not_found
from amqplite.broker import mqtt_retained
from amqplite.broker.exchanges import Exchange
from amqplite.broker.exchanges.retaining import owner_of
from amqplite.broker.retained import OwnerId, Retained
from amqplite.broker.vhost import VHost
from amqplite.config import Settings

#: messages a listing shows when it names no ``limit``; the most it may name
DEFAULT_LIMIT, MAX_LIMIT = 1000, 10_000


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
        paged = "page" in req.query
        if paged:
            page = req.int_arg("page", 1, lo=1)
            limit = req.int_arg("page_size", listing.DEFAULT_PAGE_SIZE, lo=1,
                                hi=listing.MAX_PAGE_SIZE)
            offset = (page - 1) * limit
        else:
            limit = req.int_arg("limit", DEFAULT_LIMIT, 0, MAX_LIMIT)
            offset = req.int_arg("offset", 0)
        rs = self.broker.retained.find(owner)
        if rs is None:
            found: Any = iter(())
            total = 0
        elif key is None:
            found, total = iter(rs), len(rs)
        elif rs.keyed:
            one = rs.get(key)
            found, total = iter(() if one is None else (one,)), int(one is not None)
        else:  # recent history: every message under the key, oldest first
            under = [r for r in rs if r.key == key]
            found, total = iter(under), len(under)
        if key is not None and total == 0:
            raise not_found(f"no retained message under key '{key}' in exchange '{ex.name}' "
                            f"in vhost '{vh.name}'")
        cap = self.server.settings.admin_peek_max_bytes_value
        out, cut = _render(itertools.islice(found, offset, offset + limit), cap, encoding, mqtt)
        headers = {"x-total-count": str(total)}
        if cut:
            headers.update({"x-max-bytes-reached": "true", "x-max-bytes": str(cap)})
        if offset + len(out) < total:
            headers["x-next-offset"] = str(offset + len(out))
        if not paged:
            return Response(out, headers=headers)
        page_count = -(-total // limit)
        if page > max(page_count, 1):
            raise bad_request("page out of range")
        return Response({"filtered_count": total, "item_count": len(out), "items": out,
                         "page": page, "page_count": page_count, "page_size": limit,
                         "total_count": total}, headers=headers)

    async def clear_retained(self, req: Request) -> Response:
        vh, ex, owner = self._retaining(req)
        self._check_perm(req, vh.name, "configure", "exchange", ex.name)
        rs = self.broker.retained.find(owner)
        removed = 0 if rs is None else self.server.execute(self.broker.retained.remove, rs,
                                                           req.params.get("key"))
        if removed:
            await moves.committed(self.server)
        return Response({"removed": removed})


def _render(found: Iterable[Retained], cap: int, encoding: str,
            mqtt: bool) -> tuple[list[dict[str, Any]], bool]:
    """The entries as JSON until ``cap`` bytes of payload and properties; True when one
    was left out for the cap. A first entry over the cap is shown cut to it, as peek
    shows one, so any message can be looked at."""
    out: list[dict[str, Any]] = []
    budget = cap
    for r in found:
        m = r.message
        cost = m.body_size + len(m.properties_raw)
        truncate = None
        if cost > budget:
            if out:
                return out, True
            truncate = max(0, budget - len(m.properties_raw))
        budget -= cost
        info = views.message_info(m, m.body, redelivered=False, encoding=encoding,
                                  truncate=truncate)
        info["key"] = r.key
        if mqtt:  # the key is the MQTT topic; routing_key is its AMQP translation
            info["topic"] = r.key
        info["stored"] = r.stored
        if truncate is not None:
            info["truncated"] = True
            out.append(info)
            return out, True
        out.append(info)
    return out, False
