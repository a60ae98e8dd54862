"""Every API schema round-trips at every supported version; the API table is consistent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqplite.protocol.kafka import messages as m
from amqplite.protocol.kafka.primitives import CodecError
from tests.protocol.kafka.strategies import same, struct_value

CASES = [(int(k), v, kind) for k, (lo, hi) in sorted(m.SUPPORTED.items())
         for v in range(lo, hi + 1) for kind in (0, 1)]


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@settings(max_examples=30)
@given(data=st.data())
def test_schema_round_trips(api_key: int, version: int, kind: int, data: st.DataObject) -> None:
    schema = m.SCHEMAS[api_key][kind]
    value = data.draw(struct_value(schema.fields, version, schema.is_flexible(version)))
    raw = schema.encode(value, version)
    got, end = schema.decode(memoryview(raw), version)
    assert end == len(raw)
    assert same(value, got), (value, got)
    assert schema.encode(got, version) == raw


def test_supported_table_drives_api_versions() -> None:
    body = m.api_versions_body()
    assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]} == \
        {int(k): r for k, r in m.SUPPORTED.items()}
    assert set(m.SUPPORTED) == set(m.SCHEMAS)


@pytest.mark.parametrize(("api_key", "version", "req", "resp"), [
    (m.ApiKey.API_VERSIONS, 2, 1, 0), (m.ApiKey.API_VERSIONS, 3, 2, 0),
    (m.ApiKey.METADATA, 8, 1, 0), (m.ApiKey.METADATA, 9, 2, 1),
    (m.ApiKey.PRODUCE, 8, 1, 0), (m.ApiKey.PRODUCE, 9, 2, 1),
    (m.ApiKey.FETCH, 11, 1, 0), (m.ApiKey.FETCH, 12, 2, 1),
    (m.ApiKey.SASL_HANDSHAKE, 1, 1, 0), (m.ApiKey.INIT_PRODUCER_ID, 2, 2, 1),
])
def test_header_versions(api_key: int, version: int, req: int, resp: int) -> None:
    assert m.request_header_version(api_key, version) == req
    assert m.response_header_version(api_key, version) == resp


def _unframe(data: bytes) -> bytes:
    assert int.from_bytes(data[:4], "big", signed=True) == len(data) - 4
    return data[4:]


def test_request_and_response_through_headers() -> None:
    body = {"acks": -1, "timeout_ms": 500, "transactional_id": None,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"xyz"}]}]}
    for v in (3, 8, 9):
        req = m.decode_request(_unframe(m.encode_request(0, v, 77, "me", body)))
        assert (req.api_key, req.api_version, req.header.correlation_id) == (0, v, 77)
        assert req.header.client_id == "me"
        assert bytes(req.body["topic_data"][0]["partition_data"][0]["records"]) == b"xyz"
        resp = {"responses": [{"name": "t", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 5}]}]}
        corr, got = m.decode_response(0, v, _unframe(m.encode_response(0, v, 77, resp)))
        assert corr == 77 and got["responses"][0]["partition_responses"][0]["base_offset"] == 5


def test_unsupported_api_versions_gets_the_v0_answer() -> None:
    """KIP-511: ApiVersions v9 from a newer client gets a v0 answer with
    UNSUPPORTED_VERSION (35) and our ranges."""
    frame = _unframe(m.encode_request(18, 3, 5, "new", {}))
    frame = frame[:2] + b"\x00\x09" + frame[4:]
    with pytest.raises(m.UnsupportedRequest) as info:
        m.decode_request(frame)
    answer = m.unsupported_answer(info.value.header)
    assert answer is not None
    corr, body = m.decode_response(18, 0, _unframe(answer))
    assert corr == 5 and body["error_code"] == 35  # UNSUPPORTED_VERSION
    assert len(body["api_keys"]) == len(m.SUPPORTED)


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (1, 3), (1, 13), (57, 0), (-1, 0)])
def test_other_unsupported_requests_close(api_key: int, version: int) -> None:
    frame = (api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big")
             + b"\x00\x00\x00\x01\x00\x01x")
    with pytest.raises(m.UnsupportedRequest) as info:
        m.decode_request(frame)
    assert info.value.header.client_id == "x"
    assert m.unsupported_answer(info.value.header) is None


def test_trailing_bytes_and_short_frames_are_codec_errors() -> None:
    frame = _unframe(m.encode_request(12, 0, 1, "c", {"group_id": "g", "member_id": "m"}))
    m.decode_request(frame)
    for bad in (frame + b"\x00", frame[:-1], frame[:7], b""):
        with pytest.raises(CodecError):
            m.decode_request(bad)


def test_absent_fields_decode_as_their_defaults() -> None:
    """JoinGroup v0 has no rebalance timeout: the session reads -1 all the same."""
    frame = _unframe(m.encode_request(11, 0, 1, "c", {
        "group_id": "g", "session_timeout_ms": 10, "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00"}]}))
    body = m.decode_request(frame).body
    assert body["rebalance_timeout_ms"] == -1 and body["group_instance_id"] is None
