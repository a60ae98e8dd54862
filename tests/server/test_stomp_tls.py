"""STOMP over TLS against a real broker: a password login, and a client certificate
logging in as its CN (stomp_ssl_cert_login)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from tests.brokerproc import BrokerProcess, free_port
from tests.server.stompclient import DEADLINE
from tests.tlscerts import PKI, client_context, make_pki

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("stomp-tls")
    cfg = data / "amqplite.toml"
    cfg.write_text('[users.app]\npassword = "app-secret"\n')
    b = BrokerProcess(data, None, "--config", str(cfg), "--stomp-tls-port", str(free_port()),
                      "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
                      "--tls-ca", str(pki.ca.cert), "--tls-verify-peer",
                      "--stomp-ssl-cert-login").start()
    yield b
    assert b.stop() == 0


def _exchange(b: BrokerProcess, ctx: ssl.SSLContext, data: bytes, frames: int) -> list[bytes]:
    """Send ``data`` over TLS; the first ``frames`` frames back."""
    port = int(b.extra[b.extra.index("--stomp-tls-port") + 1])
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(data)
        got = b""
        while got.count(b"\0") < frames:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return [f.lstrip(b"\n") for f in got.split(b"\0")[:frames]]


def test_password_login_over_tls(tls_broker: BrokerProcess, pki: PKI) -> None:
    (connected, receipt) = _exchange(
        tls_broker, client_context(pki),
        b"CONNECT\naccept-version:1.2\nlogin:app\npasscode:app-secret\n\n\0"
        b"SEND\ndestination:/queue/tls-q\nreceipt:r\n\nsecret\0", 2)
    assert connected.startswith(b"CONNECTED\n") and receipt.startswith(b"RECEIPT\n")


def test_certificate_login_as_its_cn(tls_broker: BrokerProcess, pki: PKI) -> None:
    (connected,) = _exchange(tls_broker, client_context(pki, pki.issue("app")),
                             b"CONNECT\naccept-version:1.2\n\n\0", 1)
    assert connected.startswith(b"CONNECTED\n")
    (refused,) = _exchange(tls_broker, client_context(pki, pki.issue("nobody")),
                           b"CONNECT\naccept-version:1.2\n\n\0", 1)
    assert refused.startswith(b"ERROR\n") and b"message:Bad CONNECT" in refused
