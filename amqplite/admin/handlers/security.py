"""Vhosts, users, permissions and definitions, in the management API's shapes."""

from __future__ import annotations

import logging
from typing import Any

from amqplite.admin import definitions as D
from amqplite.admin import validate as V
from amqplite.admin import views
from amqplite.admin.handlers.base import HandlerBase
from amqplite.admin.plumbing import Request, Response, bad_request, not_found
from amqplite.admin.writes import Undo, write
from amqplite.broker.auth import User

log = logging.getLogger("amqplite.admin")


def _permission(user: str, vhost: str, p: Any) -> dict[str, Any]:
    return {"user": user, "vhost": vhost, "configure": p.configure, "write": p.write,
            "read": p.read}


class SecurityHandlers(HandlerBase):
    """Routes tagged ``vhosts``, ``users``, ``permissions`` and ``definitions``."""

    # ---------------------------------------------------------------- vhosts
    async def get_vhost(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        return Response(views.vhost_info(
            vh, views.vhost_message_stats(self.server, self.rates).get(vh.name)))

    async def put_vhost(self, req: Request) -> Response:
        name = V.shortstr(req.params["vhost"], "name", allow_empty=False)
        body = req.json() if req.body else {}
        description = V.text(body.get("description", ""), "description")
        # rabbitmqadmin's declare vhost sends tracing as a string; the firehose is not
        # amqplite's, so asking for it is refused rather than ignored
        if V.body_bool(body, "tracing", False):
            raise V.Invalid("tracing", "cannot be true: amqplite has no firehose tracer")
        existed = name in self.broker.vhosts
        creator = req.user.name if req.user is not None and not existed else None
        undo = self._journal()
        undo.vhost(name)
        if creator is not None:
            undo.permission(creator, name)

        def create() -> None:
            self.broker.add_vhost(name, description)
            if creator is not None:
                D.grant_creator(self.broker, creator, name)

        await self._write(create, undo)
        return Response(None, 204 if existed else 201)

    async def delete_vhost(self, req: Request) -> Response:
        return await self._delete(self.broker.delete_vhost, "vhost", req.params["vhost"])

    async def vhost_permissions(self, req: Request) -> Response:
        return self._permissions(vhost=self._vhost(req.params["vhost"]).name)

    async def _delete(self, command: Any, what: str, name: str,
                      undo: Undo | None = None) -> Response:
        if not await self._write(lambda: command(name), undo):
            raise not_found(f"no {what} '{name}'")
        return Response(None, 204)

    def _permissions(self, *, user: str | None = None, vhost: str | None = None) -> Response:
        return Response([_permission(u, v, p) for (u, v), p in
                         sorted(self.broker.permissions.items())
                         if user in (None, u) and vhost in (None, v)])

    # ----------------------------------------------------------------- users
    def _user(self, name: str) -> User:
        u = self.broker.users.get(name)
        if u is None:
            raise not_found(f"no user '{name}'")
        return u

    async def list_users(self, req: Request) -> Response:
        return Response([D.user_info(u) for u in
                         sorted(self.broker.users.users.values(), key=lambda u: u.name)])

    async def get_user(self, req: Request) -> Response:
        return Response(D.user_info(self._user(req.params["user"])))

    async def put_user(self, req: Request) -> Response:
        name = V.text(req.params["user"], "name", allow_empty=False)
        body = req.json()
        current = self.broker.users.get(name)
        if "password" in body:
            V.text(body["password"], "password")
        try:
            pw_hash = D.user_hash(body, current.password_hash if current else "")
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        tags = V.tags(body.get("tags", ""), "tags")
        undo = self._journal()
        undo.user(name)
        await self._write(lambda: self.broker.put_user(name, pw_hash, tags), undo)
        return Response(None, 204 if current is not None else 201)

    async def delete_user(self, req: Request) -> Response:
        undo = self._journal()
        undo.user_and_permissions(req.params["user"])
        return await self._delete(self.broker.delete_user, "user", req.params["user"], undo)

    async def user_permissions(self, req: Request) -> Response:
        return self._permissions(user=self._user(req.params["user"]).name)

    # ----------------------------------------------------------- permissions
    async def list_permissions(self, req: Request) -> Response:
        return self._permissions()

    async def get_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        p = self.broker.permission(user, vhost)
        if p is None:
            raise not_found(f"no permissions for user '{user}' in vhost '{vhost}'")
        return Response(_permission(user, vhost, p))

    async def put_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        self._vhost(vhost)
        self._user(user)
        body = req.json()
        pats = [V.text(body.get(k, ""), k) for k in ("configure", "write", "read")]
        existed = self.broker.permission(user, vhost) is not None
        undo = self._journal()
        undo.permission(user, vhost)
        await self._write(lambda: self.broker.set_permissions(user, vhost, *pats), undo)
        return Response(None, 204 if existed else 201)

    async def delete_permission(self, req: Request) -> Response:
        vhost, user = req.params["vhost"], req.params["user"]
        undo = self._journal()
        undo.permission(user, vhost)
        if not await self._write(lambda: self.broker.clear_permissions(user, vhost), undo):
            raise not_found(f"no permissions for user '{user}' in vhost '{vhost}'")
        return Response(None, 204)

    # ----------------------------------------------------------- definitions
    async def get_definitions(self, req: Request) -> Response:
        return Response(D.export(self.broker))

    async def get_vhost_definitions(self, req: Request) -> Response:
        vh = self._vhost(req.params["vhost"])
        return Response(D.export(self.broker, vh.name))

    async def post_definitions(self, req: Request) -> Response:
        return await self._import(req, None)

    async def post_vhost_definitions(self, req: Request) -> Response:
        return await self._import(req, self._vhost(req.params["vhost"]).name)

    async def _import(self, req: Request, vhost: str | None) -> Response:
        """Validate the whole document, then apply it in one step and one commit: all
        of it or, on any refusal or a failed commit, nothing (memory included).

        RabbitMQ answers 204; so do we when everything was imported, else 200 with
        what was ``ignored`` (no meaning here) and ``skipped`` (not supported)."""
        plan = D.plan(self.broker, req.json(), vhost)
        opened: dict[str, Any] = {}

        def channel_for(name: str) -> Any:
            if name not in opened:
                opened[name] = self._channel(name, None)
            return opened[name]

        undo = Undo(self.broker)

        def run() -> None:
            try:
                D.apply(self.broker, plan, channel_for, undo,
                        req.user.name if req.user is not None else None)
            finally:
                for ch in opened.values():
                    self.broker.close_channel(ch)

        await write(self.server, run, undo)
        report = plan.report()
        for key in ("ignored", "skipped"):
            for line in report[key]:
                log.warning("definitions import: %s: %s", key, line)
        if not report["ignored"] and not report["skipped"]:
            return Response(None, 204)
        return Response(report, 200)
