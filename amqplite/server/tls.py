"""AMQPS: the server's TLS context, the handshake of each accepted socket, and
the user name a verified client certificate carries (for SASL EXTERNAL).

Apart from the connection code so that a connection only ever sees a byte
stream and, for EXTERNAL, a plain user name: ``protocol/`` never meets an ssl
object, and a failed handshake ends before a connection object exists.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence

import trio

from amqplite.config import Settings

log = logging.getLogger("amqplite.tls")


def server_context(s: Settings) -> ssl.SSLContext:
    """The AMQPS listener's context (TLS 1.2 or later), built before anything listens.

    RabbitMQ's ``verify_peer`` asks for a client certificate and checks any it
    gets; ``fail_if_no_peer_cert`` also refuses clients that send none. An
    unreadable file is reported as an OSError naming it, so ``amqplite serve``
    prints one line instead of a traceback.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(s.tls_cert, s.tls_key)
    except OSError as exc:
        raise OSError(f"TLS: cannot load tls_cert {s.tls_cert} with tls_key {s.tls_key}: "
                      f"{exc}") from None
    if s.tls_ca:
        try:
            ctx.load_verify_locations(s.tls_ca)
        except OSError as exc:
            raise OSError(f"TLS: cannot load tls_ca {s.tls_ca}: {exc}") from None
    if s.tls_verify_peer:
        ctx.verify_mode = ssl.CERT_REQUIRED if s.tls_fail_if_no_peer_cert else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def accept(stream: trio.SocketStream, ctx: ssl.SSLContext, name: str,
                 timeout: float) -> trio.SSLStream[trio.SocketStream] | None:
    """The TLS stream of an accepted socket once its handshake is done; None when it
    fails or takes longer than ``timeout`` (then the socket is closed).

    A client speaking plain AMQP here, or one with a refused certificate, costs
    one log line at info level: it is the client's mistake, not the broker's.
    """
    tls = trio.SSLStream(stream, ctx, server_side=True)
    reason = f"no TLS handshake within {timeout}s"
    with trio.move_on_after(timeout):
        try:
            await tls.do_handshake()
            return tls
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            cause = exc.__cause__ or exc
            reason = f"TLS handshake failed: {getattr(cause, 'reason', None) or cause}"
    log.info("%s: %s", name, reason)
    await trio.aclose_forcefully(stream)
    return None


def peer_user(tls: trio.SSLStream[trio.SocketStream]) -> str | None:
    """The common name (CN) of the client certificate's subject, if it was verified.

    RabbitMQ's ``ssl_cert_login_from = common_name``. ``getpeercert()`` is empty
    unless the context verified the certificate, so an unverified one names no
    one; a subject with no CN, or several, names no one either.
    """
    cert = tls.getpeercert()
    if not cert:
        return None
    names = [value for rdn in cert.get("subject", ()) for key, value in rdn
             if key == "commonName"]
    return names[0] if len(names) == 1 else None


async def listen_front(s: Settings, prefix: str, what: str,
                       ) -> tuple[list[trio.SocketListener], list[trio.SocketListener],
                                  ssl.SSLContext | None]:
    """A protocol front's listeners: plain on ``<prefix>_port`` (0: none) and TLS on
    ``<prefix>_tls_port`` (None: none) with the server's context; a taken port
    raises ``PortInUse`` naming the setting (STOMP, Kafka)."""
    from amqplite.server.ports import listen_tcp

    port: int = getattr(s, f"{prefix}_port")
    tls_port: int | None = getattr(s, f"{prefix}_tls_port")
    plain = await listen_tcp(port, s.host, what, f"{prefix}_port") if port else []
    if tls_port is None:
        return plain, [], None
    ctx = server_context(s)
    return plain, await listen_tcp(tls_port, s.host, f"{what} over TLS",
                                   f"{prefix}_tls_port"), ctx


async def serve_front(s: Settings, prefix: str, what: str, logger: logging.Logger, *,
                      handle: Callable[[trio.SocketStream], Awaitable[None]],
                      handle_tls: Callable[[trio.SocketStream], Awaitable[None]],
                      bound: Callable[[list[int], list[int], ssl.SSLContext | None], None],
                      tasks: Sequence[Callable[[], Awaitable[None]]] = (),
                      task_status: trio.TaskStatus[list[int]] = trio.TASK_STATUS_IGNORED,
                      ) -> None:
    """Serve a protocol front (STOMP, Kafka) until cancelled: its listeners from
    ``listen_front``, ``bound(ports, tls_ports, context)`` before the first accept,
    one log line, ``tasks`` beside the accept loops; started with the plain ports."""
    listeners, secure, ctx = await listen_front(s, prefix, what)
    ports = sorted({ln.socket.getsockname()[1] for ln in listeners})
    tls_ports = sorted({ln.socket.getsockname()[1] for ln in secure})
    bound(ports, tls_ports, ctx)
    logger.info("%s listening on port(s) %s%s", what, ports,
                f", {what} over TLS on {tls_ports}" if secure else "")
    async with trio.open_nursery() as nursery:
        for task in tasks:
            nursery.start_soon(task)
        if listeners:
            nursery.start_soon(trio.serve_listeners, handle, listeners)
        if secure:
            nursery.start_soon(trio.serve_listeners, handle_tls, secure)
        task_status.started(ports)
        await trio.sleep_forever()
