"""Oracles: kafka-python 3's protocol classes (built from Kafka's JSON definitions by
another hand) and aiokafka's record batch builder and reader."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import kafka.protocol
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage

from amqplite.protocol.kafka import messages as m
from amqplite.protocol.kafka.framing import FrameBuffer
from tests.protocol.kafka.strategies import struct_value


def _kafka_python_classes() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for info in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:
            continue
        for obj in vars(mod).values():
            if (isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage
                    and getattr(obj, "_json", None)):
                found[obj.name] = obj
    return found


KP = _kafka_python_classes()
CASES = [(int(k), v, kind) for k, (lo, hi) in sorted(m.SUPPORTED.items())
         for v in range(lo, hi + 1) for kind in (0, 1)]


def _no_records(value: Any) -> Any:
    """kafka-python parses ``records`` as record batches: give it none or empty."""
    if isinstance(value, dict):
        return {k: (None if k == "records" else _no_records(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_records(v) for v in value]
    return value


@pytest.mark.parametrize(("api_key", "version", "kind"), CASES)
@settings(max_examples=15)
@given(data=st.data())
def test_kafka_python_reads_and_rewrites_our_bytes(api_key: int, version: int, kind: int,
                                                  data: st.DataObject) -> None:
    """Ours encodes, kafka-python decodes and re-encodes: the bytes are the same, and
    ours decodes kafka-python's bytes back to what it sent."""
    schema = m.SCHEMAS[api_key][kind]
    value = _no_records(data.draw(struct_value(schema.fields, version,
                                               schema.is_flexible(version))))
    if schema.name == "ApiVersionsResponse":
        value["error_code"] = 0  # on an error kafka-python reads v0, per KIP-511
    ours = schema.encode(value, version)
    obj = KP[schema.name].decode(ours, version=version)
    if kind == 0:
        obj.with_header()  # a decoded request has none, and encode() looks for one
        theirs = bytes(obj.encode(version=version))
    else:
        theirs = bytes(obj.encode())  # decode set the version
    assert theirs == ours
    got, end = schema.decode(memoryview(theirs), version)
    assert end == len(theirs) and schema.encode(got, version) == ours


def test_kafka_python_framed_requests_decode() -> None:
    """Whole framed requests from kafka-python (headers v1 and v2) through our FrameBuffer."""
    meta = KP["MetadataRequest"]
    buf = FrameBuffer()
    sent = []
    for corr, version in enumerate((0, 4, 8, 9, 12)):
        req = meta[version](topics=[meta.MetadataRequestTopic(name="t1", topic_id=None)]
                            if version else [meta.MetadataRequestTopic(name="t1")],
                            allow_auto_topic_creation=True)
        req.with_header(correlation_id=corr, client_id="kp")
        data = bytes(req.encode(header=True, framed=True))
        sent.append((corr, version))
        buf.feed(data[:5])
        buf.feed(data[5:])
    got = [m.decode_request(f) for f in buf.frames()]
    assert [(r.header.correlation_id, r.api_version) for r in got] == sent
    assert all(r.header.client_id == "kp" and r.body["topics"][0]["name"] == "t1" for r in got)


@pytest.mark.parametrize(("api_key", "version"), [(18, 0), (18, 3), (3, 12), (1, 12), (0, 9),
                                                  (11, 7), (32, 4)])
def test_kafka_python_reads_our_framed_responses(api_key: int, version: int) -> None:
    body = m.api_versions_body() if api_key == 18 else {"throttle_time_ms": 3}
    frame = m.encode_response(api_key, version, 99, body)
    cls = KP[m.SCHEMAS[api_key][1].name]
    obj = cls.decode(frame[4:], version=version, header=True)
    assert obj.header.correlation_id == 99
    if api_key == 18:
        assert [(k.api_key, k.min_version, k.max_version) for k in obj.api_keys] == \
            [(k["api_key"], k["min_version"], k["max_version"]) for k in body["api_keys"]]
    else:
        assert obj.throttle_time_ms == 3
