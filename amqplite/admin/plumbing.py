"""HTTP plumbing of the admin API: requests, responses, errors, body field checks.

Kept apart from the handlers so they and the ASGI app share one error shape
(RabbitMQ's ``{"error": ..., "reason": ...}``) without importing each other.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

import attrs

from amqplite.broker.auth import User
from amqplite.protocol.errors import AMQPError

#: AMQP reply code -> HTTP status for errors raised by broker commands; a refusal (403
#: ACCESS_REFUSED) is RabbitMQ's ``401 not_authorised``, without a challenge: the login
#: was right, the permission is missing (RabbitMQ 3.10.8, checked)
#: how many messages a purge removed: RabbitMQ's purge answers 204 with no body,
#: so the count (which the CLI prints) comes in this header
PURGED_HEADER = "x-amqplite-purged"

_AMQP_STATUS = {403: 401, 404: 404, 405: 409, 406: 400}

#: a Request's body not yet parsed ahead (see Request.parsed)
UNPARSED: Any = object()


def parse_json(body: bytes, *, yielding: bool = False) -> Any:
    """The body's JSON value; 400 with the parser's reason when it is not JSON.

    ``yielding``: build objects through a Python-level hook, so that a parse run
    in a worker thread lets the event loop's thread take the GIL between
    objects (the C parser otherwise holds it for the whole document), and hold
    off the cyclic collector meanwhile (a full collection started inside the
    parse holds the GIL for its whole length). A 39 MiB import: the loop's
    longest stall 0.9 s on the loop, 0.35 s in a plain thread, 0.02 s so.
    """
    try:
        if yielding:
            with _collector_paused():
                return json.loads(body, object_pairs_hook=_object)
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, "bad_request", f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HTTPError(400, "bad_request", "body nests too deep to read") from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


_paused = 0
_paused_lock = threading.Lock()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """gc off while any parse runs (counted: parses may overlap), back as it was."""
    global _paused
    with _paused_lock:
        if _paused == 0:
            _paused = -1 if not gc.isenabled() else 1
            gc.disable()
        elif _paused > 0:
            _paused += 1
    try:
        yield
    finally:
        with _paused_lock:
            if _paused > 0:
                _paused -= 1
                if _paused == 0:
                    gc.enable()
            elif _paused == -1:
                _paused = 0


@attrs.define
class Request:
    method: str
    params: dict[str, str]
    query: dict[str, str]
    body: bytes = b""
    user: User | None = None
    #: every value of repeated query parameters
    query_all: dict[str, list[str]] = attrs.field(factory=dict)
    #: the body's JSON value when the server parsed it ahead, off the event loop
    parsed: Any = UNPARSED

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (an empty body is ``{}``); 400 otherwise."""
        if not self.body.strip():
            return {}
        data = parse_json(self.body) if self.parsed is UNPARSED else self.parsed
        if not isinstance(data, dict):
            raise HTTPError(400, "bad_request", "body must be a JSON object")
        return data

    def flag(self, name: str) -> bool:
        return self.query.get(name, "").lower() in ("true", "1", "yes")

    def int_arg(self, name: str, default: int, lo: int = 0, hi: int = 1 << 31) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            v = int(raw)
        except ValueError:
            raise bad_request(f"query parameter {name} must be an integer") from None
        if not lo <= v <= hi:
            raise HTTPError(400, "bad_request", f"query parameter {name} must be in {lo}..{hi}")
        return v


@attrs.define
class Response:
    body: Any = None
    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)
    content_type: str = "application/json"


class HTTPError(Exception):
    """An error answer: ``{"error": ..., "reason": ...}`` with a status code."""

    def __init__(self, status: int, error: str, reason: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, error, reason)
        self.status, self.error, self.reason = status, error, reason
        self.headers = headers or {}

    def response(self) -> Response:
        return Response({"error": self.error, "reason": self.reason}, self.status, self.headers)


def not_found(reason: str) -> HTTPError:
    return HTTPError(404, "Object Not Found", reason)


def bad_request(reason: str) -> HTTPError:
    return HTTPError(400, "bad_request", reason)


def from_amqp(exc: AMQPError) -> HTTPError:
    """The HTTP answer to a broker command's error, as RabbitMQ's management API gives it
    (its reason is the AMQP reply text, ``ACCESS_REFUSED - access to queue ...``)."""
    status = _AMQP_STATUS.get(exc.reply_code, 400)
    error = {404: "Object Not Found", 401: "not_authorised", 409: "resource_locked"}.get(
        status, "bad_request")
    return HTTPError(status, error, exc.reply_text)


def from_amqp_publish(exc: AMQPError) -> HTTPError:
    """RabbitMQ's publish endpoint answers every AMQP error, a refusal too, with 400 and
    the reply code in the reason: ``403 ACCESS_REFUSED - access to exchange ...``."""
    return HTTPError(400, "bad_request", f"{exc.reply_code} {exc.reply_text}")


def _exchange_name(name: str) -> str:
    return "" if name == "amq.default" else name

