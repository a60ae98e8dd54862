"""The Kafka listener on the wire (issue 37), with a raw socket speaking the codec:
hostile frames close only their connection, an unknown ApiVersions version gets
KIP-511's answer, pipelined answers keep request order, SASL/PLAIN logs in as an
amqplite user, anonymous clients only where allowed, and the admin API lists Kafka
connections."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.messages import ApiKey, decode_response, encode_request
from tests.brokerproc import BrokerProcess, wait_for
from tests.server.kafkaclient import kafka_broker, kafka_port

TIMEOUT = 20.0


class Raw:
    """A Kafka client of a few lines: framed requests out, framed responses in."""

    def __init__(self, b: BrokerProcess, client_id: str = "raw") -> None:
        self.sock = socket.create_connection(("127.0.0.1", kafka_port(b)), timeout=TIMEOUT)
        self.client_id = client_id
        self.corr = 0

    def send(self, key: int, version: int, body: dict) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(key, version, self.corr, self.client_id, body))
        return self.corr

    def frame(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            got = self.sock.recv(n - len(out))
            if not got:
                raise ConnectionError("closed by the broker")
            out += got
        return out

    def call(self, key: int, version: int, body: dict) -> dict:
        corr = self.send(key, version, body)
        got, answer = decode_response(key, version, self.frame())
        assert got == corr
        return answer

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def metadata(raw: Raw, topics: list[str] | None = None) -> dict:
    return raw.call(ApiKey.METADATA, 9, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": True})


def test_hostile_frames_close_only_their_connection(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "data") as b:
        healthy = Raw(b)
        bad_size = Raw(b)
        bad_size.sock.sendall(struct.pack(">i", -5) + b"junk")
        assert bad_size.closed()
        unknown = Raw(b)
        unknown.sock.sendall(struct.pack(">ihhi", 10, 999, 0, 1) + b"\x00\x00")
        assert unknown.closed()
        extra = Raw(b)  # bytes past a request's body are ignored, as Kafka does
        extra.sock.sendall(struct.pack(">ihhih", 18, ApiKey.METADATA, 9, 1, 0)
                           + b"\x00" + b"\x00\x01\x00\x00" + b"\x01\x00\x00")
        assert decode_response(ApiKey.METADATA, 9, extra.frame())[0] == 1
        extra.close()
        garbage = Raw(b)  # a Metadata request whose body is cut short
        garbage.sock.sendall(struct.pack(">ihhih", 11, ApiKey.METADATA, 9, 1, 0) + b"\x05")
        assert garbage.closed()
        # KIP-511: an ApiVersions newer than ours gets v0 with UNSUPPORTED_VERSION
        newer = Raw(b)
        newer.send(ApiKey.API_VERSIONS, 99, {})
        _corr, body = decode_response(ApiKey.API_VERSIONS, 0, newer.frame())
        assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert {k["api_key"] for k in body["api_keys"]} >= {0, 1, 2, 3, 18}
        assert metadata(healthy)["brokers"][0]["port"] == kafka_port(b)
        for r in (healthy, bad_size, unknown, garbage, newer):
            r.close()
        assert "undecodable request" in b.log()


def test_pipelined_answers_keep_request_order(tmp_path: Path) -> None:
    """A Fetch that long-polls, then a Metadata: the Metadata answer waits behind it."""
    with kafka_broker(tmp_path / "data") as b:
        raw = Raw(b)
        metadata(raw, ["slow"])  # auto-created
        fetch = raw.send(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "slow", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        meta = raw.send(ApiKey.METADATA, 9, {"topics": None})
        first, body = decode_response(ApiKey.FETCH, 11, raw.frame())
        assert first == fetch
        part = body["responses"][0]["partitions"][0]
        assert (part["error_code"], part["high_watermark"]) == (0, 0)
        second, _ = decode_response(ApiKey.METADATA, 9, raw.frame())
        assert second == meta
        raw.close()


def test_a_flood_of_pipelined_requests_is_answered_in_order(tmp_path: Path) -> None:
    """5,000 requests sent at once, answers read while they go: every answer, in order
    (the broker stops reading the client while too many wait, then goes on)."""
    with kafka_broker(tmp_path / "data") as b:
        raw = Raw(b)
        n = 5000
        data = b"".join(encode_request(ApiKey.METADATA, 9, i, "flood", {"topics": None})
                        for i in range(1, n + 1))
        sender = threading.Thread(target=raw.sock.sendall, args=(data,))
        sender.start()
        corrs = [decode_response(ApiKey.METADATA, 9, raw.frame())[0] for _ in range(n)]
        sender.join(TIMEOUT)
        assert corrs == list(range(1, n + 1))
        raw.close()


def sasl(raw: Raw, user: str, password: str) -> dict:
    assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    return raw.call(ApiKey.SASL_AUTHENTICATE, 1, {
        "auth_bytes": b"\x00" + user.encode() + b"\x00" + password.encode()})


def test_sasl_plain_and_no_anonymous(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "data", "--no-kafka-allow-anonymous") as b:
        anon = Raw(b)
        assert anon.call(ApiKey.API_VERSIONS, 3, {})["error_code"] == 0  # before a login
        anon.send(ApiKey.METADATA, 9, {"topics": None})
        assert anon.closed()
        wrong = Raw(b)
        assert sasl(wrong, "guest", "nope")["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert wrong.closed()
        right = Raw(b, "sasl-client")
        assert sasl(right, "guest", "guest")["error_code"] == 0
        assert metadata(right, ["authed"])["topics"][0]["error_code"] == 0
        rows = admin_get(b, "/api/connections")
        kafka = [r for r in rows if r["protocol"] == "Kafka"]
        assert [(r["user"], r["vhost"], r["client_properties"]["client_id"])
                for r in kafka] == [("guest", "/", "sasl-client")]
        assert "amqplite_kafka_connections 1.0" in admin_get(b, "/metrics", as_json=False)
        right.close()
        wait_for(lambda: not [r for r in admin_get(b, "/api/connections")
                              if r["protocol"] == "Kafka"], TIMEOUT, what="the row to go")
        for r in (anon, wrong):
            r.close()


def admin_get(b: BrokerProcess, path: str, as_json: bool = True) -> Any:
    assert b.admin_url is not None
    req = urllib.request.Request(b.admin_url + path, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
        data = resp.read()
    return json.loads(data) if as_json else data.decode()


def test_anonymous_acts_as_guest_from_loopback(tmp_path: Path) -> None:
    with kafka_broker(tmp_path / "data") as b:
        raw = Raw(b, "anon")
        assert metadata(raw, ["free"])["topics"][0]["error_code"] == 0
        row = [r for r in admin_get(b, "/api/connections") if r["protocol"] == "Kafka"]
        assert [(r["user"], r["client_properties"]["client_id"]) for r in row] == [
            ("guest", "anon")]
        admin_delete(b, "/api/connections/" + urllib.parse.quote(row[0]["name"], safe=""))
        assert raw.closed()  # closed from the admin API
        raw.close()


def admin_delete(b: BrokerProcess, path: str) -> None:
    assert b.admin_url is not None
    req = urllib.request.Request(b.admin_url + path, method="DELETE", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
        assert resp.status == 204
