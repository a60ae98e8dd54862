"""Runtime parameter handlers (RabbitMQ's ``/api/parameters``): list, get, put, delete.

A value is validated by its component (``links.config.COMPONENTS``) before it
is stored, so a bad shovel is a 400 naming the field; what is shown back has
its URI passwords masked. The user who PUTs a parameter defines it: its links
act as that user on this broker (``links/access.py``), so a PUT whose local
URIs reach where that user may not go is refused with 403 naming the vhost
(administrators' links are checked when they run), and one past the link
limits (``max_links_per_vhost``, ``max_links_per_user``) with 403 naming the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amqplite.admin import validate as V
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import HTTPError, Request, Response, bad_request, not_found
from amqplite.links import access as A
from amqplite.links.config import COMPONENTS
from amqplite.links.config import parse as parse_shovel

if TYPE_CHECKING:
    from amqplite.admin.node import LinksView


def shown(component: str, vhost: str, name: str, value: dict[str, Any]) -> dict[str, Any]:
    """A parameter as the API shows it: RabbitMQ's shape, secrets masked."""
    masker = COMPONENTS.get(component, (None, lambda v: v))[1]
    return {"component": component, "vhost": vhost, "name": name, "value": masker(value)}


class ParameterHandlers(HandlerBase):
    """Routes tagged ``parameters``."""

    async def list_parameters(self, req: Request) -> Response:
        component = req.params.get("component")
        names = [vh.name for vh in self._vhosts(req)]
        return Response([shown(*key, value) for vh in names
                         for key, value in self.broker.parameters.items(component, vh)])

    async def get_parameter(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        c, name = req.params["component"], req.params["name"]
        value = self.broker.parameters.get(c, vh.name, name)
        if value is None:
            raise not_found(f"no parameter '{name}' of component '{c}' in vhost '{vh.name}'")
        return Response(shown(c, vh.name, name, value))

    async def put_parameter(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        c = req.params["component"]
        name = V.text(req.params["name"], "name", allow_empty=False)
        body = req.json()
        value = body.get("value")
        if c not in COMPONENTS:
            raise bad_request(f"component: '{c}' is not known (known: "
                              f"{', '.join(sorted(COMPONENTS))})")
        if not isinstance(value, dict | list):
            raise bad_request("value: must be a JSON object (a list for "
                              "federation-upstream-set)")
        try:
            COMPONENTS[c][0](value)
        except ValueError as exc:
            raise bad_request(f"value.{exc}") from None
        params = self.broker.parameters
        existed = params.get(c, vh.name, name) is not None
        user = req.user.name if req.user is not None else None
        if req.user is not None:
            self._check_link(c, vh.name, name, value, req.user.name, req.user.is_admin)
        undo = self._journal()
        undo.parameter(c, vh.name, name)
        await self._write(lambda: params.put(c, vh.name, name, value, defined_by=user), undo)
        return Response(None, 204 if existed else 201)

    def _check_link(self, component: str, vhost: str, name: str, value: Any, user: str,
                    admin: bool) -> None:
        """403 when the link is over a limit, or (for a user other than an administrator)
        when its local URIs need what ``user`` lacks, or log in as a loopback-only user."""
        s = self.server.settings
        over = A.limit_refusal(self.broker.parameters.owners(), (component, vhost, name),
                               user, per_vhost=s.max_links_per_vhost,
                               per_user=s.max_links_per_user)
        if over is not None:
            raise HTTPError(403, "access_refused", f"link limit reached: {over}")
        if admin:
            return
        access = A.Access(self.broker, self.server.link_secret, s.default_user)
        why: str | None = None
        if component == "shovel":
            spec = parse_shovel(value)
            why = access.shovel_refusal(spec, user) or A.loopback_login(
                "src-uri", spec.src_uris, self.broker.users.loopback, user) or \
                A.loopback_login("dest-uri", spec.dest_uris, self.broker.users.loopback, user)
        elif component == "federation-upstream":
            raw = value.get("uri")
            why = access.refusal(user, A.upstream_needs(value)) or A.loopback_login(
                "uri", [raw] if isinstance(raw, str) else raw, self.broker.users.loopback,
                user)
        if why is not None:
            raise HTTPError(403, "access_refused", f"value.{why}")

    def _links(self) -> LinksView:
        links = self.server.links
        if links is None:
            raise HTTPError(501, "not_implemented", "this broker runs no links supervisor")
        return links

    async def list_shovels(self, req: Request) -> Response:
        links = self._links()
        return Response([row for vh in self._vhosts(req) for row in links.shovels(vh.name)])

    async def restart_shovel(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        if not self._links().restart(vh.name, req.params["name"]):
            raise not_found(f"no shovel '{req.params['name']}' in vhost '{vh.name}'")
        return Response(None, 204)

    async def list_federation_links(self, req: Request) -> Response:
        fed = self._links().federation
        return Response([] if fed is None else
                        [row for vh in self._vhosts(req) for row in fed.links(vh.name)])

    async def restart_federation_link(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        fed = self._links().federation
        if fed is None or not fed.restart(vh.name, req.params["id"]):
            raise not_found(f"no federation link '{req.params['id']}' in vhost '{vh.name}'")
        return Response(None, 204)

    async def delete_parameter(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        c, name = req.params["component"], req.params["name"]
        params = self.broker.parameters
        if params.get(c, vh.name, name) is None:
            raise not_found(f"no parameter '{name}' of component '{c}' in vhost '{vh.name}'")
        undo = self._journal()
        undo.parameter(c, vh.name, name)
        await self._write(lambda: params.delete(c, vh.name, name), undo)
        return Response(None, 204)
