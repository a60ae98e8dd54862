"""Policy handlers: list, get, set, clear."""

from __future__ import annotations

import logging
from typing import Any

from amqplite.admin import validate as V
from amqplite.admin import views
from amqplite.admin.definitions import policy_note
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import HTTPError, Request, Response, bad_request, not_found
from amqplite.admin.validate import body_str
from amqplite.broker.policy import (
    VHOST_LIMITS_COMPONENT,
    VHOST_LIMITS_NAME,
    check_vhost_limits,
    make_policy,
    split_definition,
)

log = logging.getLogger("amqplite.admin")


class PolicyHandlers(HandlerBase):
    """Routes tagged ``policies``."""

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

    async def list_unsupported(self, req: Request) -> Response:
        """Operator policies: amqplite has none, so
        the list is empty, as RabbitMQ's is on a node without them (rabbitmqadmin's
        ``list parameters`` and the like work). A vhost in the path must exist."""
        self._vhosts(req)
        return Response([])

    list_operator_policies = list_unsupported

    async def list_vhost_limits(self, req: Request) -> Response:
        """The vhosts' limits (imported definitions set them), in RabbitMQ's shape."""
        out = []
        for vh in self._vhosts(req):
            limits = self.broker.parameters.get(VHOST_LIMITS_COMPONENT, vh.name,
                                                VHOST_LIMITS_NAME)
            if limits:
                out.append({"vhost": vh.name, "value": dict(limits)})
        return Response(out)

    async def put_vhost_limit(self, req: Request) -> Response:
        """RabbitMQ's ``PUT /api/vhost-limits/{vhost}/{name}`` with ``{"value": N}``:
        kept in its ``vhost-limits`` parameter, as an import keeps them."""
        vh = self._vhost(req.params["vhost"])
        body = req.json()
        if not isinstance(body, dict) or "value" not in body:
            raise bad_request("value is required")
        try:
            one = check_vhost_limits({req.params["name"]: body["value"]})
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        params = self.broker.parameters
        limits = {**(params.get(VHOST_LIMITS_COMPONENT, vh.name, VHOST_LIMITS_NAME) or {}),
                  **one}
        undo = self._journal()
        undo.parameter(VHOST_LIMITS_COMPONENT, vh.name, VHOST_LIMITS_NAME)
        await self._write(lambda: params.put(VHOST_LIMITS_COMPONENT, vh.name,
                                             VHOST_LIMITS_NAME, limits), undo)
        return Response(None, 204)

    async def delete_vhost_limit(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = req.params["name"]
        params = self.broker.parameters
        limits = dict(params.get(VHOST_LIMITS_COMPONENT, vh.name, VHOST_LIMITS_NAME) or {})
        if limits.pop(name, None) is None:
            raise not_found(f"no limit '{name}' in vhost '{vh.name}'")
        undo = self._journal()
        undo.parameter(VHOST_LIMITS_COMPONENT, vh.name, VHOST_LIMITS_NAME)
        await self._write(lambda: params.put(VHOST_LIMITS_COMPONENT, vh.name,
                                             VHOST_LIMITS_NAME, limits) if limits else
                          params.delete(VHOST_LIMITS_COMPONENT, vh.name, VHOST_LIMITS_NAME),
                          undo)
        return Response(None, 204)

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
        name = V.text(req.params["name"], "name", allow_empty=False)
        pattern = body_str(body, "pattern")
        if pattern is None:
            raise bad_request("pattern is required")
        definition = body.get("definition")
        if not isinstance(definition, dict):
            raise bad_request("definition must be a JSON object")
        definition = V.arguments(definition, "definition")
        # RabbitMQ refuses "priority": "3"; the store holds a signed 64-bit integer
        priority = V.integer(body.get("priority", 0), "priority")
        apply_to = body_str(body, "apply-to", "queues") or "queues"
        # the import's rule: keys without effect here are left out and named, not refused
        kept, notes = split_definition(definition)
        probe = kept or ({"expires": 1} if notes else {})  # none kept: check the rest
        try:
            make_policy(vh.name, name, pattern, probe, priority, apply_to)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        existed = name in pols.get(vh.name, {})
        if kept:
            undo = self._journal()
            undo.policy(vh.name, name)
            await self._write(lambda: self.broker.set_policy(
                vh.name, name, pattern, kept, priority=priority, apply_to=apply_to), undo)
        if not notes:
            return Response(None, 204 if existed else 201)
        line = policy_note("", name, vh.name, notes, bool(kept))
        log.warning("policy set: %s", line)
        return Response({"ignored": [line]}, 201 if kept and not existed else 200)

    async def delete_policy(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        name = req.params["name"]
        if name not in self._policies().get(vh.name, {}):
            raise not_found(f"no policy '{name}' in vhost '{vh.name}'")
        undo = self._journal()
        undo.policy(vh.name, name)
        await self._write(lambda: self.broker.clear_policy(vh.name, name), undo)
        return Response(None, 204)
