"""The API table, and whole requests and responses: header plus body, framed.

``SUPPORTED`` is the one list of what amqplite speaks: ApiVersions answers
from it and :func:`decode_request` refuses anything outside it. The ranges
cover librdkafka 2.x (confluent-kafka, kcat), aiokafka 0.14, kafka-python 3 and
kafkajs 2; each client picks the highest version both sides know.
"""

from __future__ import annotations

import enum
from typing import Any

from amqplite.protocol.kafka import apis_admin as ad
from amqplite.protocol.kafka import apis_core as co
from amqplite.protocol.kafka import apis_groups as gr
from amqplite.protocol.kafka import framing
from amqplite.protocol.kafka.errors import ErrorCode
from amqplite.protocol.kafka.framing import RequestHeader
from amqplite.protocol.kafka.primitives import CodecError
from amqplite.protocol.kafka.schema import Message


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42


#: api key -> (lowest, highest) version served. Produce starts at 3 and Fetch at 4
#: because below them records travel as message sets v0/v1, which are not stored.
SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 4),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
}

#: api key -> (request schema, response schema)
SCHEMAS: dict[int, tuple[Message, Message]] = {
    ApiKey.PRODUCE: (co.PRODUCE_REQUEST, co.PRODUCE_RESPONSE),
    ApiKey.FETCH: (co.FETCH_REQUEST, co.FETCH_RESPONSE),
    ApiKey.LIST_OFFSETS: (co.LIST_OFFSETS_REQUEST, co.LIST_OFFSETS_RESPONSE),
    ApiKey.METADATA: (co.METADATA_REQUEST, co.METADATA_RESPONSE),
    ApiKey.OFFSET_COMMIT: (gr.OFFSET_COMMIT_REQUEST, gr.OFFSET_COMMIT_RESPONSE),
    ApiKey.OFFSET_FETCH: (gr.OFFSET_FETCH_REQUEST, gr.OFFSET_FETCH_RESPONSE),
    ApiKey.FIND_COORDINATOR: (gr.FIND_COORDINATOR_REQUEST, gr.FIND_COORDINATOR_RESPONSE),
    ApiKey.JOIN_GROUP: (gr.JOIN_GROUP_REQUEST, gr.JOIN_GROUP_RESPONSE),
    ApiKey.HEARTBEAT: (gr.HEARTBEAT_REQUEST, gr.HEARTBEAT_RESPONSE),
    ApiKey.LEAVE_GROUP: (gr.LEAVE_GROUP_REQUEST, gr.LEAVE_GROUP_RESPONSE),
    ApiKey.SYNC_GROUP: (gr.SYNC_GROUP_REQUEST, gr.SYNC_GROUP_RESPONSE),
    ApiKey.DESCRIBE_GROUPS: (gr.DESCRIBE_GROUPS_REQUEST, gr.DESCRIBE_GROUPS_RESPONSE),
    ApiKey.LIST_GROUPS: (gr.LIST_GROUPS_REQUEST, gr.LIST_GROUPS_RESPONSE),
    ApiKey.SASL_HANDSHAKE: (ad.SASL_HANDSHAKE_REQUEST, ad.SASL_HANDSHAKE_RESPONSE),
    ApiKey.API_VERSIONS: (co.API_VERSIONS_REQUEST, co.API_VERSIONS_RESPONSE),
    ApiKey.CREATE_TOPICS: (ad.CREATE_TOPICS_REQUEST, ad.CREATE_TOPICS_RESPONSE),
    ApiKey.DELETE_TOPICS: (ad.DELETE_TOPICS_REQUEST, ad.DELETE_TOPICS_RESPONSE),
    ApiKey.INIT_PRODUCER_ID: (ad.INIT_PRODUCER_ID_REQUEST, ad.INIT_PRODUCER_ID_RESPONSE),
    ApiKey.DESCRIBE_CONFIGS: (ad.DESCRIBE_CONFIGS_REQUEST, ad.DESCRIBE_CONFIGS_RESPONSE),
    ApiKey.SASL_AUTHENTICATE: (ad.SASL_AUTHENTICATE_REQUEST, ad.SASL_AUTHENTICATE_RESPONSE),
    ApiKey.CREATE_PARTITIONS: (ad.CREATE_PARTITIONS_REQUEST, ad.CREATE_PARTITIONS_RESPONSE),
    ApiKey.DELETE_GROUPS: (gr.DELETE_GROUPS_REQUEST, gr.DELETE_GROUPS_RESPONSE),
}


def is_supported(api_key: int, version: int) -> bool:
    r = SUPPORTED.get(api_key)
    return r is not None and r[0] <= version <= r[1]


def request_header_version(api_key: int, version: int) -> int:
    """Flexible versions use request header v2, the others v1 (v0, without a client
    id, belongs to ControlledShutdown v0 alone, which is not served)."""
    return 2 if SCHEMAS[api_key][0].is_flexible(version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """Flexible versions use response header v1, except ApiVersions: its response
    header is always v0, so a client that does not yet know our versions can read it."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if SCHEMAS[api_key][1].is_flexible(version) else 0


class Request:
    """A decoded request: its header and its body as a dict (see ``schema``)."""

    __slots__ = ("body", "header")

    def __init__(self, header: RequestHeader, body: dict) -> None:
        self.header = header
        self.body = body

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def __repr__(self) -> str:
        return f"Request({self.header!r}, {self.body!r})"


class UnsupportedRequest(Exception):
    """A well-framed request for an API or version outside ``SUPPORTED``.

    :func:`unsupported_answer` says what to send back (ApiVersions: KIP-511's v0
    answer); for any other API there is no answer the client could read, so
    the shell closes the connection, as Kafka does.
    """

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"unsupported api {header.api_key} v{header.api_version}")
        self.header = header


def decode_request(frame: Any, *, strict: bool = True) -> Request:
    """A whole request from one frame (size prefix removed).

    Raises :class:`CodecError` for malformed bytes (trailing bytes included, unless
    not ``strict``) and :class:`UnsupportedRequest` for an API or version outside
    ``SUPPORTED``. The broker is not strict, as Kafka's is not: librdkafka 2.x's
    AdminClient sends its Metadata v12 with three bytes past the body, and
    Kafka reads the fields it knows and ignores the rest.
    """
    key, version, _corr = framing.peek_api(frame)
    if not is_supported(key, version):
        header, _pos = framing.read_request_header(frame, 1)
        raise UnsupportedRequest(header)
    schema = SCHEMAS[key][0]
    header, pos = framing.read_request_header(frame, 2 if schema.is_flexible(version) else 1)
    view = memoryview(frame)
    body, end = schema.decode(view, version, pos)
    if strict and end != len(view):
        raise CodecError(f"{schema.name} v{version}: {len(view) - end} trailing bytes")
    return Request(header, body)


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    """A framed response (size prefix, header, body), ready for the socket."""
    parts = [framing.response_header_bytes(correlation_id,
                                           response_header_version(api_key, version))]
    SCHEMAS[api_key][1].encode_into(body, version, parts)
    return framing.frame(parts)


def encode_request(api_key: int, version: int, correlation_id: int,
                   client_id: str | None, body: dict) -> bytes:
    """A framed request: what a test client (or a proxy) sends."""
    header = RequestHeader(api_key, version, correlation_id, client_id)
    parts = [framing.request_header_bytes(header, request_header_version(api_key, version))]
    SCHEMAS[api_key][0].encode_into(body, version, parts)
    return framing.frame(parts)


def decode_response(api_key: int, version: int, frame: Any) -> tuple[int, dict]:
    """``(correlation_id, body)`` of a response frame (size prefix removed)."""
    corr, pos = framing.read_response_header(frame, response_header_version(api_key, version))
    view = memoryview(frame)
    body, end = SCHEMAS[api_key][1].decode(view, version, pos)
    if end != len(view):
        raise CodecError(f"{SCHEMAS[api_key][1].name} v{version}: trailing bytes")
    return corr, body


def api_versions_body(error_code: int = 0) -> dict:
    """The ApiVersions answer, straight from ``SUPPORTED``."""
    return {"error_code": error_code, "throttle_time_ms": 0,
            "api_keys": [{"api_key": int(k), "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(SUPPORTED.items())]}


def unsupported_answer(header: RequestHeader) -> bytes | None:
    """What to send for an :class:`UnsupportedRequest`, or None to close.

    KIP-511: an ApiVersions request newer than the broker knows gets an
    ApiVersions v0 response with UNSUPPORTED_VERSION and the supported ranges, so
    the client retries at a version both know.
    """
    if header.api_key != ApiKey.API_VERSIONS or header.api_version < 0:
        return None
    return encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id,
                           api_versions_body(ErrorCode.UNSUPPORTED_VERSION))
