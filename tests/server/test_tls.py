"""AMQPS against a real broker process: TLS round trips (pika, aio-pika), SASL
EXTERNAL with client certificates, clients that get TLS wrong, and the admin API
over HTTPS. Certificates are made for each run by tests/tlscerts.py."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pika.credentials
import pika.exceptions
import pytest

from tests.brokerproc import BrokerProcess, free_port, wait_for
from tests.tlscerts import PKI, client_context, make_pki

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_args(pki: PKI, port: int, *extra: str) -> list[str]:
    return ["--tls-port", str(port), "--tls-cert", str(pki.server.cert),
            "--tls-key", str(pki.server.key), "--tls-ca", str(pki.ca.cert), *extra]


@pytest.fixture(scope="module")
def tls_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def tls_broker(pki: PKI, tls_port: int,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Plain AMQP and AMQPS side by side; client certificates optional but verified;
    EXTERNAL offered; user "app" exists; the admin API on HTTPS."""
    data = tmp_path_factory.mktemp("tls-broker")
    cfg = data / "amqplite.toml"
    cfg.write_text('auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]\n'
                   '[users.app]\npassword = "app-secret"\n')
    b = BrokerProcess(data, None, "--config", str(cfg),
                      *_tls_args(pki, tls_port, "--tls-verify-peer", "--admin-tls"))
    b.start()
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log(), b.log()


def _params(port: int, ctx: ssl.SSLContext, **kw: object) -> pika.ConnectionParameters:
    kw.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters(
        "localhost", port, ssl_options=pika.SSLOptions(ctx, "localhost"),
        connection_attempts=1, socket_timeout=10, blocked_connection_timeout=10,
        **kw)  # type: ignore[arg-type]


def _round_trip(conn: pika.BlockingConnection, queue: str, body: bytes) -> None:
    ch = conn.channel()
    ch.queue_declare(queue, auto_delete=True)
    ch.confirm_delivery()
    ch.basic_publish("", queue, body)
    deadline = time.monotonic() + 10
    while True:
        method, _props, got = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            assert got == body
            return
        assert time.monotonic() < deadline, "message did not come back"
        conn.process_data_events(0.05)


def test_pika_over_tls_round_trip(tls_broker: BrokerProcess, tls_port: int,
                                  pki: PKI) -> None:
    with pika.BlockingConnection(_params(tls_port, client_context(pki))) as conn:
        _round_trip(conn, "tls.pika", b"over TLS " * 1000)
    # the plain listener still serves beside it
    with pika.BlockingConnection(pika.URLParameters(tls_broker.url)) as conn:
        _round_trip(conn, "tls.plain", b"plain")


def test_aio_pika_amqps(tls_broker: BrokerProcess, tls_port: int,
                        pki: PKI) -> None:
    aio_pika = pytest.importorskip("aio_pika")

    async def main() -> bytes:
        url = f"amqps://guest:guest@localhost:{tls_port}/"
        async with await aio_pika.connect(url, ssl_context=client_context(pki), timeout=10) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue("tls.aiopika", auto_delete=True)
            await ch.default_exchange.publish(aio_pika.Message(b"aio over TLS"), "tls.aiopika")
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        return msg.body
        raise AssertionError("no message")

    assert asyncio.run(asyncio.wait_for(main(), 30)) == b"aio over TLS"


def test_external_login_with_a_client_certificate(tls_broker: BrokerProcess, tls_port: int,
                                                  pki: PKI) -> None:
    ctx = client_context(pki, pki.issue("app"))
    params = _params(tls_port, ctx,
                     credentials=pika.credentials.ExternalCredentials())
    with pika.BlockingConnection(params) as conn:
        _round_trip(conn, "tls.external", b"cert login")
        names = httpx.get(f"https://127.0.0.1:{tls_broker.admin_port}/api/connections",
                          auth=("guest", "guest"), verify=client_context(pki), timeout=10).json()
        assert "app" in {c["user"] for c in names}


def test_external_refused_for_a_certificate_naming_no_user(tls_broker: BrokerProcess, tls_port: int,
                                                           pki: PKI) -> None:
    ctx = client_context(pki, pki.issue("nobody-here"))
    params = _params(tls_port, ctx,
                     credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL" \
        in str(info.value)
    wait_for(lambda: "login refused for user 'nobody-here' (client certificate)"
             in tls_broker.log(), 10, what="the refusal in the broker log")


def test_external_not_offered_without_a_trusted_certificate(tls_broker: BrokerProcess, tls_port: int,
                                                            pki: PKI, tmp_path: Path) -> None:
    """No certificate, or one from another CA (refused in the handshake): no EXTERNAL."""
    ext = pika.credentials.ExternalCredentials()
    with pytest.raises(pika.exceptions.AuthenticationError):
        pika.BlockingConnection(_params(tls_port, client_context(pki), credentials=ext))
    stranger = make_pki(tmp_path / "other", "other-ca").issue("app")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(_params(tls_port, client_context(pki, stranger),
                                        credentials=ext))
    wait_for(lambda: "TLS handshake failed" in tls_broker.log(), 10,
             what="the refused handshake in the log")


def test_plain_amqp_on_the_tls_port_fails_cleanly(tls_broker: BrokerProcess, tls_port: int,
                                                  pki: PKI) -> None:
    port = tls_port
    with pika.BlockingConnection(_params(port, client_context(pki))) as good:
        ch = good.channel()
        ch.queue_declare("tls.survivor", auto_delete=True)
        # a raw AMQP header: the broker closes the socket, and says nothing in AMQP
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"AMQP\x00\x00\x09\x01")
            reply = b""
            while chunk := raw.recv(4096):
                reply += chunk
            assert not reply.startswith(b"AMQP") and b"Connection.Start" not in reply
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", port, connection_attempts=1, socket_timeout=5))
        _round_trip(good, "tls.survivor", b"still here")
    log = tls_broker.log()
    assert "TLS handshake failed" in log and "Traceback" not in log


def test_admin_api_over_https_lists_the_amqps_listener(tls_broker: BrokerProcess, tls_port: int,
                                                       pki: PKI) -> None:
    url = f"https://127.0.0.1:{tls_broker.admin_port}/api/overview"
    overview = httpx.get(url, auth=("guest", "guest"), verify=client_context(pki), timeout=10).json()
    listeners = {(x["protocol"], x["port"]) for x in overview["listeners"]}
    assert ("amqp/ssl", tls_port) in listeners
    assert ("amqp", tls_broker.port) in listeners
    assert ("https", tls_broker.admin_port) in listeners
    with pytest.raises(httpx.ConnectError):  # our CA only: an untrusted server fails
        httpx.get(url, auth=("guest", "guest"), timeout=10)
    # the admin CLI trusts the CA the way httpx does: SSL_CERT_FILE
    out = subprocess.run(
        [sys.executable, "-m", "amqplite", "connections", "--json",
         "--admin-url", f"https://127.0.0.1:{tls_broker.admin_port}"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "SSL_CERT_FILE": str(pki.ca.cert)})
    assert out.returncode == 0, out.stderr


def test_tls_only_and_a_certificate_required(pki: PKI, tmp_path: Path) -> None:
    """--no-plain with --tls-fail-if-no-peer-cert: no plain port; no certificate, no
    connection; a client with one logs in (PLAIN here); a silent socket times out."""
    port = free_port()
    b = BrokerProcess(tmp_path / "data", port, "--no-plain",
                      *_tls_args(pki, port, "--tls-verify-peer", "--tls-fail-if-no-peer-cert"),
                      env={"AMQPLITE_HANDSHAKE_TIMEOUT": "1"})
    b.start()  # its readiness probe is itself a client without a certificate
    try:
        # a client that never starts its handshake is dropped after handshake_timeout
        with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
            started = time.monotonic()
            assert silent.recv(1) == b""
            assert time.monotonic() - started < 8
        wait_for(lambda: "no TLS handshake within 1.0s" in b.log(), 10, what="the log line")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(_params(port, client_context(pki)))
        with pika.BlockingConnection(_params(port, client_context(pki, pki.issue("guest")))) as c:
            _round_trip(c, "tls.required", b"with a certificate")
        log = b.log()
        assert f"AMQPS on [{port}]" in log and "listening on port(s) []" in log
    finally:
        assert b.stop() == 0
    assert "Traceback" not in b.log()


def test_unreadable_certificate_is_one_line_at_start(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    out = subprocess.run(
        [sys.executable, "-m", "amqplite", "serve", "--host", "127.0.0.1", "--port", "0",
         "--admin-port", "0", "--mqtt-port", "0", "--stomp-port", "0", "--kafka-port", "0",
         "--data-dir", str(tmp_path / "d"),
         "--tls-port", "0",
         "--tls-cert", str(missing), "--tls-key", str(missing)],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "amqplite: cannot start: TLS: cannot load tls_cert" in out.stderr
    assert "Traceback" not in out.stderr
