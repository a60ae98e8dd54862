"""A small synchronous client for the admin HTTP API (used by the CLI).

Every failure becomes :class:`AdminError`, a one-line message with no
traceback: broker not reachable, wrong credentials, not an administrator,
unknown queue, and so on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click

from amqplite.admin.plumbing import PURGED_HEADER

if TYPE_CHECKING:
    import httpx

DEFAULT_URL = "http://127.0.0.1:15672"


class AdminError(click.ClickException):
    """One clear line on stderr (``amqplite: ...``) and exit status 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"amqplite: {self.format_message()}", err=True)


def path(*segments: str) -> str:
    """``/api/...`` with each segment percent-encoded (vhost ``/`` becomes ``%2F``)."""
    return "/api/" + "/".join(quote(s, safe="") for s in segments)


class Client:
    def __init__(self, url: str = DEFAULT_URL, user: str = "guest", password: str = "guest",
                 timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.user = user
        import httpx  # imported here so `amqplite serve` starts without it

        self._http = httpx.Client(base_url=self.url, auth=(user, password), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, url: str, *, json: Any = None,
             params: Any = None) -> httpx.Response:
        """Send one request; raise AdminError for transport errors and 4xx/5xx answers."""
        import httpx

        try:
            r = self._http.request(method, url, json=json, params=params)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            raise AdminError(f"cannot reach the admin API at {self.url} "
                             "(is the broker running with --admin-port?)") from None
        except httpx.TimeoutException:
            raise AdminError(f"the admin API at {self.url} did not answer in time") from None
        except (httpx.RemoteProtocolError, httpx.ReadError):
            # something listens but does not speak HTTP: the AMQP port, typically
            raise self._not_admin("it does not answer HTTP; is that the AMQP port?") from None
        except httpx.HTTPError as exc:
            raise AdminError(f"admin API request failed: {exc}") from None
        if r.status_code == 401 and "www-authenticate" in r.headers:
            # a login refused; a 401 without the challenge is a permission refused
            raise AdminError(f"wrong credentials for user '{self.user}' "
                             f"(the admin API at {self.url} answered 401)")
        if not _ours(r):
            raise self._not_admin(f"{method} {url} answered HTTP {r.status_code}, "
                                  "not the admin API's JSON")
        if r.status_code >= 400:
            reason = _reason(r)
            if r.status_code in (401, 403):
                raise AdminError(f"permission denied: {reason}")
            raise AdminError(reason)
        return r

    def _not_admin(self, detail: str) -> AdminError:
        return AdminError(f"no amqplite admin API at {self.url} ({detail}); check "
                          "--admin-url (AMQPLITE_ADMIN_URL): scheme, host and admin port, "
                          "no path")

    def get(self, url: str, **params: Any) -> Any:
        return _json(self.call("GET", url, params={k: v for k, v in params.items()
                                                   if v is not None}))

    def send(self, method: str, url: str, body: Any = None, **params: Any) -> Any:
        r = self.call(method, url, json=body, params=params or None)
        if PURGED_HEADER in r.headers:  # a purge: 204, as RabbitMQ's; the count in a header
            return {"purged": int(r.headers[PURGED_HEADER])}
        return _json(r) if r.content else None


#: the router's answer to a path no route has: a wrong base path in --admin-url
_NO_ROUTE = {"error": "Object Not Found", "reason": "Not Found"}


def _ours(r: httpx.Response) -> bool:
    """Did the admin API answer? It always speaks JSON (or nothing, for 204), and a
    404 from it names what is missing, unless no route matched at all."""
    if not r.content:
        return r.status_code < 400 or r.status_code == 401
    if not r.headers.get("content-type", "").startswith("application/json"):
        return r.status_code == 401  # RabbitMQ-style 401s may come without a body type
    if r.status_code != 404:
        return True
    try:
        return bool(r.json() != _NO_ROUTE)
    except ValueError:
        return False


def _reason(r: httpx.Response) -> str:
    try:
        data = r.json()
    except ValueError:
        return f"HTTP {r.status_code}: {r.text.strip()[:200] or r.reason_phrase}"
    if isinstance(data, dict) and "reason" in data:
        return str(data["reason"])
    return f"HTTP {r.status_code}: {data}"


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        raise AdminError(f"the admin API sent a non-JSON answer (HTTP {r.status_code})") from None
