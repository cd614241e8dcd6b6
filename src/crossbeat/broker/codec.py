"""Kafka request/response framing and (de)serialisation, server side.

The schemas come from kafka-python 3.x (`kafka.protocol`, generated from Kafka 4's JSON
message definitions); this module only adds what a server needs around them: peeking the
request header, choosing which versions we answer, and turning every decoding failure into a
`ProtocolError` so that a hostile frame can never raise anything else.

Wire layout of a request frame (after the 4-byte size prefix the server strips):
``api_key i16 | api_version i16 | correlation_id i32 | client_id nullable-string | …``
(plus a tagged-field section in the flexible header v2, then the body).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.schemas.fields.codecs.types import UUID

from crossbeat.broker.errors import ErrorCode, ProtocolError
from crossbeat.broker.schemas import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class ApiSpec:
    """One API we answer: its schema classes and the version range we advertise.

    The ranges stay below each API's first flexible version (KIP-482) except ApiVersions,
    whose v3/v4 every modern client opens with, DeleteGroups v2, ListGroups v3-v5 (v4 has
    the states filter and each group's state, v5 the types filter and type), and what the
    KIP-848 consumer protocol needs (flexible only): ConsumerGroupHeartbeat and
    ConsumerGroupDescribe, Metadata v9-v13 (topic ids, lookup by id), OffsetCommit v8-v9
    and OffsetFetch v6-v9 (member epochs); and OffsetForLeaderEpoch v4, which clients use
    once Metadata v9+ makes them trust leader epochs. The admin APIs added later are
    answered at every version kafka-python knows (CreateTopics v2-v7 — v5+ results carry
    the topic's configs, v7 its id —, AlterConfigs v0-v2,
    IncrementalAlterConfigs v0-v1, CreatePartitions v0-v3, DeleteRecords v0-v2,
    OffsetDelete v0, DescribeCluster v0-v2), flexible ones included; so are the
    transaction APIs clients send (InitProducerId v0-v4 — v3+ lets a producer recover
    from an abortable error by an epoch bump (KIP-360) —, AddPartitionsToTxn v0-v3 — v4+ is the broker-to-broker
    form —, AddOffsetsToTxn v0-v3, EndTxn v0-v3 — v4+ is KIP-890's transaction
    version 2 —, TxnOffsetCommit v0-v3), and the admin ones, DescribeTransactions v0,
    ListTransactions v0-v2 (v2 filters by a regular expression) and WriteTxnMarkers v0-v2
    (which admin tools send to abort a hanging transaction). The admin APIs of
    log dirs, ACLs and producer states are answered at every version kafka-python knows
    too (their v0s went with Kafka 4): DescribeLogDirs v1-v5, DescribeAcls, CreateAcls
    and DeleteAcls v1-v3 (always SECURITY_DISABLED: there is no authorizer), and
    DescribeProducers v0.
    kafka-python encodes flexible versions as well as the others; classes it lacks come
    from `crossbeat.broker.schemas`. See `reference/kafka-broker.md`.
    """

    key: int
    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int


def _spec(key: int, req: Any, resp: Any, lo: int, hi: int) -> ApiSpec:
    return ApiSpec(key, req.__name__.removesuffix("Request"), req, resp, lo, hi)


APIS: dict[int, ApiSpec] = {
    s.key: s
    for s in (
        _spec(0, ProduceRequest, ProduceResponse, 3, 8),
        _spec(1, FetchRequest, FetchResponse, 4, 11),
        _spec(2, ListOffsetsRequest, ListOffsetsResponse, 1, 5),
        _spec(3, MetadataRequest, MetadataResponse, 0, 13),
        _spec(8, OffsetCommitRequest, OffsetCommitResponse, 2, 9),
        _spec(9, OffsetFetchRequest, OffsetFetchResponse, 1, 9),
        _spec(10, FindCoordinatorRequest, FindCoordinatorResponse, 0, 2),
        _spec(11, JoinGroupRequest, JoinGroupResponse, 0, 5),
        _spec(12, HeartbeatRequest, HeartbeatResponse, 0, 3),
        _spec(13, LeaveGroupRequest, LeaveGroupResponse, 0, 3),
        _spec(14, SyncGroupRequest, SyncGroupResponse, 0, 3),
        _spec(15, DescribeGroupsRequest, DescribeGroupsResponse, 0, 4),
        _spec(16, ListGroupsRequest, ListGroupsResponse, 0, 5),
        _spec(18, ApiVersionsRequest, ApiVersionsResponse, 0, 4),
        _spec(19, CreateTopicsRequest, CreateTopicsResponse, 2, 7),
        _spec(20, DeleteTopicsRequest, DeleteTopicsResponse, 1, 3),
        _spec(21, DeleteRecordsRequest, DeleteRecordsResponse, 0, 2),
        _spec(22, InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        _spec(23, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4),
        _spec(24, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
        _spec(25, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
        _spec(26, EndTxnRequest, EndTxnResponse, 0, 3),
        _spec(27, WriteTxnMarkersRequest, WriteTxnMarkersResponse, 0, 2),
        _spec(28, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
        _spec(29, DescribeAclsRequest, DescribeAclsResponse, 1, 3),
        _spec(30, CreateAclsRequest, CreateAclsResponse, 1, 3),
        _spec(31, DeleteAclsRequest, DeleteAclsResponse, 1, 3),
        _spec(32, DescribeConfigsRequest, DescribeConfigsResponse, 1, 3),
        _spec(33, AlterConfigsRequest, AlterConfigsResponse, 0, 2),
        _spec(35, DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 5),
        _spec(37, CreatePartitionsRequest, CreatePartitionsResponse, 0, 3),
        _spec(42, DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
        _spec(44, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1),
        _spec(47, OffsetDeleteRequest, OffsetDeleteResponse, 0, 0),
        _spec(60, DescribeClusterRequest, DescribeClusterResponse, 0, 2),
        _spec(61, DescribeProducersRequest, DescribeProducersResponse, 0, 0),
        _spec(65, DescribeTransactionsRequest, DescribeTransactionsResponse, 0, 0),
        _spec(66, ListTransactionsRequest, ListTransactionsResponse, 0, 2),
        _spec(68, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1),
        _spec(69, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 0),
    )
}

API_VERSIONS_KEY = 18


@dataclass
class Request:
    """A decoded request: header fields plus the body object from kafka-python."""

    spec: ApiSpec
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


class UnsupportedVersion(ProtocolError):
    """A known API asked for at a version we do not answer."""

    def __init__(self, message: str, api_key: int, correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.correlation_id = correlation_id


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """Return (api_key, api_version, correlation_id) from a request frame's first 8 bytes."""
    if len(frame) < _HEADER.size:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    return key, version, correlation_id


def decode_request(frame: bytes | bytearray | memoryview) -> Request:
    """Decode one request frame (size prefix already removed).

    Raises `UnsupportedVersion` for a known API at a version outside our range, and
    `ProtocolError` for everything else that cannot be decoded; never anything else.
    """
    key, version, correlation_id = peek_header(frame)
    spec = APIS.get(key)
    if spec is None:
        raise ProtocolError(f"unknown api key {key} (correlation id {correlation_id})")
    if not spec.min_version <= version <= spec.max_version:
        raise UnsupportedVersion(
            f"{spec.name} v{version} is not supported "
            f"(v{spec.min_version}-v{spec.max_version})",
            key,
            correlation_id,
        )
    try:
        body = spec.request.decode(memoryview(frame), version=version, header=True)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the client's malformed frame
        raise ProtocolError(
            f"malformed {spec.name} v{version} request (correlation id {correlation_id}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    _check_nulls(body, version, spec.name)
    return Request(spec, version, correlation_id, body.header.client_id, body)


def _check_nulls(obj: Any, version: int, where: str) -> None:
    """Raise ProtocolError for a null where the schema forbids one.

    kafka-python decodes a -1 length as None for any string or array, nullable or not;
    handlers may rely on the schema instead of checking every field. A uuid is exempt:
    kafka-python decodes the all-zero uuid (Kafka's "no id") as None.
    """
    for fld in obj._struct.untagged_fields(version):
        value = getattr(obj, fld.name)
        if value is None:
            if getattr(fld, "_type", None) is UUID:
                continue
            if not fld.nullable_for_version_q(version):
                raise ProtocolError(f"malformed {where} request: null {fld.name}")
        elif isinstance(value, list):
            for item in value:
                if item is None:
                    raise ProtocolError(f"malformed {where} request: null in {fld.name}")
                if hasattr(item, "_struct"):
                    _check_nulls(item, version, where)
        elif hasattr(value, "_struct"):
            _check_nulls(value, version, where)


def encode_response(request: Request, response: Any) -> bytes:
    """Frame `response` (a kafka-python response object) as the answer to `request`."""
    response.API_VERSION = request.version  # before with_header: kafka-python's setter trips on a response header
    response.with_header(correlation_id=request.correlation_id)
    data: bytes = response.encode(header=True, framed=True)
    return data


def api_versions_body(version: int, error: ErrorCode = ErrorCode.NONE) -> Any:
    """The ApiVersions response body listing every API and version range we answer."""
    keys = ApiVersionsResponse.ApiVersion
    return ApiVersionsResponse(
        error_code=int(error),
        api_keys=[keys(api_key=s.key, min_version=s.min_version, max_version=s.max_version)
                  for s in APIS.values()],
        throttle_time_ms=0,
    )


def unsupported_api_versions(correlation_id: int) -> bytes:
    """A v0-format ApiVersions reply with UNSUPPORTED_VERSION (what clients retry from).

    Used when a client opens with an ApiVersions version newer than ours: the body must be v0
    so that any client version can parse it (KIP-511).
    """
    response = api_versions_body(0, ErrorCode.UNSUPPORTED_VERSION)
    response.API_VERSION = 0
    response.with_header(correlation_id=correlation_id)
    data: bytes = response.encode(header=True, framed=True)
    return data


def frame_size(prefix: bytes) -> int:
    """The payload size announced by a 4-byte big-endian frame prefix."""
    size: int = _SIZE.unpack(prefix)[0]
    return size
