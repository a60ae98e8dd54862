"""A shovel whose destination is amqps://, certificate options as RabbitMQ's URI
query parameters (cacertfile, certfile, keyfile, verify, server_name_indication)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.admin.conftest import AdminBroker, start_admin_broker
from tests.brokerproc import free_port, wait_for
from tests.links.test_shovel import depth, name, publish, put_shovel, status
from tests.tlscerts import PKI, make_pki

pytest.importorskip("cryptography")


@pytest.fixture
def pki(tmp_path: Path) -> PKI:
    return make_pki(tmp_path / "pki")


@pytest.fixture
def tls_pair(tmp_path: Path, pki: PKI) -> Iterator[tuple[AdminBroker, AdminBroker, int]]:
    port = free_port()
    a = start_admin_broker(tmp_path / "a")
    b = start_admin_broker(tmp_path / "b", "--tls-port", str(port), "--tls-cert",
                           str(pki.server.cert), "--tls-key", str(pki.server.key),
                           "--tls-ca", str(pki.ca.cert))
    yield a, b, port
    for x in (a, b):
        x.proc.stop()


def test_shovel_over_amqps(tls_pair: tuple[AdminBroker, AdminBroker, int], pki: PKI) -> None:
    a, b, port = tls_pair
    src, dst, good, untrusted = name("src"), name("dst"), name(), name()
    client = pki.issue("shovel-client")
    uri = (f"amqps://guest:guest@127.0.0.1:{port}/%2F?cacertfile={quote(str(pki.ca.cert))}"
           f"&certfile={quote(str(client.cert))}&keyfile={quote(str(client.key))}"
           "&verify=verify_peer&server_name_indication=localhost")
    put_shovel(a, good, {"src-uri": "amqp://", "src-queue": src, "dest-uri": uri,
                         "dest-queue": dst})
    # without the CA the server's certificate is not trusted: the state says why
    put_shovel(a, untrusted, {"src-uri": "amqp://", "src-queue": name("other"),
                              "dest-uri": uri.split("?")[0], "dest-queue": dst,
                              "reconnect-delay": 1})
    wait_for(lambda: (status(a, good) or {}).get("state") == "running", 20, what="running")
    publish(a, src, [b"tls-%d" % i for i in range(10)])
    wait_for(lambda: depth(b, dst) == 10, 20, what="10 messages over AMQPS")
    wait_for(lambda: (status(a, untrusted) or {}).get("state") == "terminated", 20,
             what="the untrusting shovel to fail")
    assert (status(a, untrusted) or {}).get("reason", "").startswith(
        f"TLS handshake with 127.0.0.1:{port} failed: certificate verify failed")
