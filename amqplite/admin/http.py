"""The admin HTTP server: a small raw-ASGI app served by hypercorn inside the broker's nursery.

Routing, HTTP basic auth and JSON error mapping live here; the handlers are
in :mod:`amqplite.admin.api`, the route table in :mod:`amqplite.admin.routes`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, unquote

import trio

from amqplite.admin import listing, wslimits
from amqplite.admin.api import AdminAPI
from amqplite.admin.moves import committed
from amqplite.admin.plumbing import UNPARSED, HTTPError, Request, Response, parse_json
from amqplite.admin.routes import ROUTES, Route, is_list
from amqplite.admin.static import StaticFiles
from amqplite.broker.auth import User, log_safe
from amqplite.server.ports import PortInUse, address_in_use

if TYPE_CHECKING:
    from amqplite.admin.node import NodeView

log = logging.getLogger("amqplite.admin")

#: the largest request body of any endpoint: a definitions import
MAX_BODY = 64 * 1024 * 1024
#: the largest body of every other write (a policy, a user, a queue's arguments):
#: refused with 413 from Content-Length, or as it streams in, before it is parsed
DEFAULT_BODY = 1024 * 1024
#: endpoints whose bodies may be MAX_BODY; they are parsed in a worker thread
LARGE_BODIES = frozenset({"post_definitions", "post_vhost_definitions"})
#: bodies above this are parsed off the event loop where an endpoint allows it
PARSE_IN_THREAD = 256 * 1024
#: methods that change something: their bodies must be JSON (see _check_json)
WRITE_METHODS = frozenset({"POST", "PUT", "DELETE", "PATCH"})
REALM = 'Basic realm="amqplite Management"'
#: route tags whose objects are not bound by the user's vhosts: connections, channels
#: and consumers (all of them for monitoring, the user's own for management; RabbitMQ
#: answers ``/api/consumers/{vhost}`` outside the user's vhosts with a filtered list)
ACROSS_VHOSTS = frozenset({"connections"})

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _split(path: str) -> list[str]:
    return [p for p in path.strip("/").split("/")]


class Router:
    """Matches raw (still percent-encoded) paths against the route table."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = [(r, _split(r.path)) for r in routes]

    def match(self, method: str, raw_path: str) -> tuple[Route | None, dict[str, str], list[str]]:
        """(route, params, allowed methods); route None with methods => 405, without => 404."""
        segs = [unquote(s) for s in raw_path.rstrip("/").split("/")[1:]] if raw_path != "/" else []
        allowed: list[str] = []
        for route, pat in self.routes:
            if len(pat) != len(segs):
                continue
            params: dict[str, str] = {}
            for p, s in zip(pat, segs, strict=True):
                if p.startswith("{"):
                    params[p[1:-1]] = s
                elif p != s:
                    break
            else:
                if route.method == method:
                    return route, params, []
                allowed.append(route.method)
        return None, {}, allowed


class AdminApp:
    """The ASGI application."""

    def __init__(self, server: NodeView) -> None:
        self.server = server
        self.api = AdminAPI(server)
        self.router = Router(ROUTES)
        self.static = StaticFiles()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "websocket":  # MQTT over WebSockets at /ws
            await self.server.serve_mqtt_websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            resp = await self._handle(scope, receive)
        except HTTPError as exc:
            resp = exc.response()
        except Exception as exc:  # a bug in one handler must not kill the server
            log.exception("admin API error on %s %s", scope.get("method"),
                          log_safe(str(scope.get("path")), 500))
            resp = Response({"error": "internal_error", "reason": repr(exc)}, 500)
        await self._send(send, resp)

    async def _handle(self, scope: Scope, receive: Receive) -> Response:
        method = scope["method"].upper()
        raw = scope.get("raw_path") or scope["path"].encode()
        raw_path = raw.decode("latin-1").split("?", 1)[0]
        static = self.static.name(method, raw_path)
        if static is not None:  # the dashboard: public, as its API calls need auth
            return self.static.response(static, _header(scope, b"if-none-match"))
        route, params, allowed = self.router.match("GET" if method == "HEAD" else method,
                                                   raw_path)
        if route is None:
            if allowed:
                raise HTTPError(405, "method_not_allowed",
                                f"{method} is not allowed here (allowed: {', '.join(allowed)})",
                                headers={"allow": ", ".join(sorted(set(allowed)))})
            raise HTTPError(404, "Object Not Found", "Not Found")
        user = None if route.public else self._authenticate(scope)
        if user is not None:
            self._authorize(route, user, params, method)
        body = await self._read_body(scope, receive, self.body_limit(route))
        if method in WRITE_METHODS:
            _check_json(scope, method, body)
        parsed = UNPARSED
        if route.handler in LARGE_BODIES and len(body) > PARSE_IN_THREAD:
            parsed = await trio.to_thread.run_sync(partial(parse_json, body, yielding=True))
        qs = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        req = Request(method=method, params=params, query={k: v[-1] for k, v in qs.items()},
                      body=body, user=user, query_all=qs, parsed=parsed)
        handler = getattr(self.api, route.handler)
        resp: Response = await handler(req)
        if is_list(route) and isinstance(resp.body, list):
            if user is not None and not user.is_admin:
                resp.body = self._visible(route, user, resp.body)
            resp.body = listing.apply(resp.body, req)
        elif method in ("GET", "HEAD") and isinstance(resp.body, dict) and resp.status < 300:
            resp.body = listing.columns(resp.body, req)
        if method not in ("GET", "HEAD") and resp.status < 300:
            # a change is reported done only once it is on disk, as over AMQP
            try:
                await committed(self.api.server)
            except RuntimeError as exc:
                raise HTTPError(500, "internal_error", str(exc)) from None
        return resp

    def _authenticate(self, scope: Scope) -> User:
        challenge = _challenge(scope)
        auth = _header(scope, b"authorization")
        if not auth or not auth.lower().startswith("basic "):
            raise HTTPError(401, "not_authorised", "Login required",
                            headers=challenge)
        try:
            name, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise HTTPError(401, "not_authorised", "Malformed Authorization header",
                            headers=challenge) from None
        client = scope.get("client") or ("", 0)
        user = self.server.users.authenticate(name, password, client[0] or "")
        if user is None:  # one line, the name escaped, rate-limited per peer
            line = self.server.users.failure_line("admin API", name, client[0] or "",
                                                  time.monotonic())
            if line is not None:
                log.warning("%s", line)
            raise HTTPError(401, "not_authorised", "Login failed",
                            headers=challenge)
        if not user.can_manage:  # RabbitMQ: only management-ish tags open the API
            raise HTTPError(401, "not_authorised", "Not management user",
                            headers=challenge)
        return user

    def _authorize(self, route: Route, user: User, params: dict[str, str], method: str) -> None:
        """RabbitMQ's tags: administrator does everything, policymaker sets policies;
        management and monitoring read the objects of the vhosts they have a permission
        in (any, even ``^$``), and monitoring also every connection, channel and consumer
        and the node's figures (RabbitMQ 3.10.8, checked)."""
        needs = route.needs or ("administrator" if route.write else "management")
        allowed = {"administrator": user.is_admin, "policymaker": user.can_set_policies,
                   "monitoring": user.can_monitor, "management": True}[needs]
        if not allowed:
            raise HTTPError(403, "not_authorised",
                            f"user '{user.name}' is not {_article(needs)}; {method} needs one")
        vhost = params.get("vhost")
        if (vhost is not None and not user.is_admin and route.tag not in ACROSS_VHOSTS
                and self.server.broker.permission(user.name, vhost) is None):
            raise HTTPError(401, "not_authorised", "User not authorised to access virtual host")

    def _visible(self, route: Route, user: User, items: list[Any]) -> list[Any]:
        """What a user other than an administrator lists: objects of the vhosts it has
        permissions in. Connections, channels and consumers are the handlers' to filter
        (by owner: RabbitMQ lists them by user, not by vhost); monitoring lists every
        vhost (``/api/vhosts``), management only its own."""
        if route.tag in ACROSS_VHOSTS or (route.path == "/api/vhosts" and user.can_monitor):
            return items
        perms = self.server.broker.permissions
        key = "name" if route.path == "/api/vhosts" else "vhost"
        return [i for i in items if not isinstance(i, dict) or key not in i
                or (user.name, i[key]) in perms]

    def body_limit(self, route: Route) -> int:
        """The largest body ``route`` takes: a definitions import MAX_BODY; a publish
        the broker's max_message_size as base64 in JSON (at most MAX_BODY); the rest
        DEFAULT_BODY."""
        if route.handler in LARGE_BODIES:
            return MAX_BODY
        if route.handler == "publish":
            encoded = self.server.settings.max_message_size * 4 // 3 + DEFAULT_BODY
            return min(MAX_BODY, max(DEFAULT_BODY, encoded))
        return DEFAULT_BODY

    async def _read_body(self, scope: Scope, receive: Receive, limit: int) -> bytes:
        """The request body, refused with 413 as soon as it is known to pass ``limit``:
        from its Content-Length before a byte is read, else as it streams in."""
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise HTTPError(400, "bad_request", "client went away")
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not msg.get("more_body"):
                return b"".join(chunks)

    async def _send(self, send: Send, resp: Response) -> None:
        if resp.status == 204 or resp.body is None:
            payload = b""
        elif isinstance(resp.body, bytes):
            payload = resp.body
        else:
            # backslashreplace: a lone surrogate becomes its JSON escape, not a crash
            payload = json.dumps(resp.body, ensure_ascii=False).encode("utf-8", "backslashreplace")
            resp.body = None  # a large listing's objects go now, not after the send
        headers = [(b"content-type", resp.content_type.encode())] if payload else []
        headers.append((b"content-length", str(len(payload)).encode()))
        headers.append((b"cache-control", b"no-cache"))
        headers.append((b"vary", b"accept, accept-encoding, origin"))  # as RabbitMQ's
        for k, v in resp.headers.items():
            headers.append((k.encode(), v.encode()))
        await send({"type": "http.response.start", "status": resp.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def _too_large(limit: int) -> HTTPError:
    return HTTPError(413, "payload_too_large",
                     f"request body larger than {limit} bytes, the limit of this endpoint")


def _check_json(scope: Scope, method: str, body: bytes) -> None:
    """415 for a write that a page on another site could send with the browser's login.

    A body must come as ``application/json``: a form or a ``fetch`` without a
    CORS preflight can only send form types, ``text/plain`` or no type. A POST
    needs it even when empty (a bodiless ``fetch`` POST needs no preflight),
    unless a custom header (``X-Requested-With``, as the dashboard sends) shows
    that the browser asked first. PUT and DELETE never go cross-site without a
    preflight, so without a body they need nothing (a DELETE from curl).
    """
    ctype = _header(scope, b"content-type")
    if ctype is not None and ctype.split(";", 1)[0].strip().lower() == "application/json":
        return
    if not body and (method != "POST" or _header(scope, b"x-requested-with")):
        return
    raise HTTPError(415, "unsupported_media_type",
                    f"{method} needs Content-Type: application/json"
                    + (f" (got '{ctype}')" if ctype else ""))


def _challenge(scope: Scope) -> dict[str, str]:
    """The Basic challenge every 401 carries (RFC 7235; RabbitMQ sends it too), except
    for a script that says it is one (X-Requested-With, as the dashboard sends):
    browsers answer a challenge with their own login dialog over the page's form."""
    if (_header(scope, b"x-requested-with") or "").lower() == "xmlhttprequest":
        return {}
    return {"www-authenticate": REALM}


def _header(scope: Scope, name: bytes) -> str | None:
    """The last value of a request header (``name`` in lower case)."""
    value = None
    for k, v in scope.get("headers", []):
        if k.lower() == name:
            value = v.decode("latin-1")
    return value


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:  # a code the standard does not name keeps the empty phrase
        return b""


def _standard_reason_phrases() -> None:
    """Make hypercorn write ``HTTP/1.1 401 Unauthorized``, not ``HTTP/1.1 401 ``.

    An ASGI app hands the server a status code only; hypercorn passes it to h11
    without a reason, and h11's default reason is empty. RFC 9112 allows that,
    but clients of RabbitMQ's API match on the phrase. Filled in where hypercorn
    hands h11 its events, so every status line gets its standard phrase,
    including the 400s and 500s hypercorn sends itself. Idempotent.
    """
    import h11
    from hypercorn.protocol.h11 import H11Protocol

    send = getattr(H11Protocol, "_send_h11_event", None)
    if send is None:  # a hypercorn without this seam: its empty phrases, no failure
        log.warning("hypercorn has no H11Protocol._send_h11_event: status lines keep "
                    "an empty reason phrase")
        return
    if getattr(send, "_with_reasons", False):
        return

    async def with_reason(self: H11Protocol, event: Any) -> None:
        if isinstance(event, h11.Response | h11.InformationalResponse) and not event.reason:
            event = dataclasses.replace(event, reason=_phrase(event.status_code))
        await send(self, event)

    setattr(with_reason, "_with_reasons", True)  # noqa: B010
    setattr(H11Protocol, "_send_h11_event", with_reason)  # noqa: B010


async def run_admin(server: NodeView, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the admin API on settings.admin_host:admin_port until cancelled, over
    HTTPS when ``admin_tls`` is set.

    ``task_status.started`` receives the base URL (``http(s)://host:port``).
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    _standard_reason_phrases()
    wslimits.install()
    s = server.settings
    config = Config()
    config.bind = [_bind(s.admin_host, s.admin_port)]
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 30
    if s.admin_tls:  # hypercorn's context: TLS 1.2 or later
        config.certfile, config.keyfile = s.admin_cert_files
    app = AdminApp(server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app.api.run_sampler)
        try:
            binds = await nursery.start(
                partial(serve, cast(Any, app), config, shutdown_trigger=trio.sleep_forever,
                        mode="asgi"))
        except (OSError, BaseExceptionGroup) as exc:
            if address_in_use(exc):
                raise PortInUse("admin API", s.admin_host, s.admin_port, "admin_port",
                                ", or --admin-port 0 to run without the admin API") from None
            raise
        url = binds[0] if binds else f"http://{_bind(s.admin_host, s.admin_port)}"
        log.info("admin API listening on %s", url)
        server.admin_url = url
        task_status.started(url)


def _article(tag: str) -> str:
    return ("an " if tag[0] in "aeiou" else "a ") + tag
