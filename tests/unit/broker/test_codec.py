"""Round trips through the server-side codec for every API at both ends of its range."""

from __future__ import annotations

import contextlib
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossbeat.broker.codec import (
    APIS,
    ProtocolError,
    Request,
    UnsupportedVersion,
    decode_request,
    encode_response,
    unsupported_api_versions,
)

VERSIONS = [(key, v) for key, s in APIS.items() for v in sorted({s.min_version, s.max_version})]


def sample_request(key: int, version: int) -> Any:
    """A request body with every field left at its schema default (valid at any version)."""
    return APIS[key].request(version=version)


def frame(body: Any, correlation_id: int = 11, client_id: str = "unit") -> bytes:
    body.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(body.encode(header=True, framed=True))[4:]


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_request_round_trip(key: int, version: int) -> None:
    req = decode_request(frame(sample_request(key, version)))
    assert (req.spec.key, req.version, req.correlation_id, req.client_id) == (key, version, 11, "unit")


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_response_round_trip(key: int, version: int) -> None:
    spec = APIS[key]
    encoded = encode_response(Request(spec, version, 99, "c", None), spec.response(version=version))
    (size,) = struct.unpack(">i", encoded[:4])
    assert size == len(encoded) - 4
    decoded = spec.response.decode(bytes(encoded[4:]), version=version, header=True)
    assert decoded.header.correlation_id == 99


def test_metadata_request_fields_survive() -> None:
    m = APIS[3].request
    body = m(version=8, topics=[m.MetadataRequestTopic(name="orders")],
             allow_auto_topic_creation=False)
    req = decode_request(frame(body))
    assert [t.name for t in req.body.topics] == ["orders"]
    assert req.body.allow_auto_topic_creation is False


def test_unknown_key_and_version_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="unknown api key 999"):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(struct.pack(">hhih", 0, 2, 5, -1))  # Produce v2 < our v3
    assert info.value.correlation_id == 5
    with pytest.raises(ProtocolError, match="shorter than a header"):
        decode_request(b"\x00\x01")


def test_unsupported_api_versions_is_v0_with_error_35() -> None:
    data = unsupported_api_versions(77)
    resp = APIS[18].response.decode(bytes(data[4:]), version=0, header=True)
    assert resp.header.correlation_id == 77 and resp.error_code == 35
    assert {k.api_key for k in resp.api_keys} == set(APIS)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_never_escape_as_other_exceptions(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)


VALID_FRAMES = [frame(sample_request(k, v)) for k, v in VERSIONS]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(VALID_FRAMES), st.data())
def test_mutated_valid_frames_decode_or_raise_protocol_error(base: bytes, data: st.DataObject) -> None:
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(1, 6))):
        action = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        if action == "flip" and buf:
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
        elif action == "truncate" and buf:
            del buf[data.draw(st.integers(0, len(buf) - 1)):]
        else:
            i = data.draw(st.integers(0, len(buf)))
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    with contextlib.suppress(ProtocolError):
        decode_request(bytes(buf))


def test_metadata_by_topic_id_survives() -> None:
    """v12+ asks for a topic by id with a null name; the all-zero uuid (no id) decodes as
    None and is not mistaken for a forbidden null."""
    topic_id = uuid.uuid4()
    m = APIS[3].request
    by_id = decode_request(frame(m(version=12, topics=[m.MetadataRequestTopic(topic_id=topic_id,
                                                                              name=None)])))
    assert [(t.topic_id, t.name) for t in by_id.body.topics] == [(topic_id, None)]
    by_name = decode_request(frame(m(version=13, topics=[m.MetadataRequestTopic(name="orders")])))
    assert [t.name for t in by_name.body.topics] == ["orders"]


def test_consumer_protocol_messages_keep_their_fields() -> None:
    """ConsumerGroupHeartbeat (our JSON schemas) and OffsetFetch with a member epoch: what
    KIP-848 clients send and read survives the wire, uuids included."""
    topic_id = uuid.uuid4()
    q = APIS[68].request
    body = q(version=1, group_id="g", member_id="m", member_epoch=3, instance_id=None,
             rack_id="r1", rebalance_timeout_ms=300000, subscribed_topic_names=["a"],
             subscribed_topic_regex="^b.*", server_assignor="range",
             topic_partitions=[q.TopicPartitions(topic_id=topic_id, partitions=[0, 2])])
    req = decode_request(frame(body)).body
    assert (req.member_epoch, req.subscribed_topic_regex, req.server_assignor) == (3, "^b.*", "range")
    assert [(tp.topic_id, tp.partitions) for tp in req.topic_partitions] == [(topic_id, [0, 2])]
    r = APIS[68].response
    resp = r(version=1, throttle_time_ms=0, error_code=0, error_message=None, member_id="m",
             member_epoch=4, heartbeat_interval_ms=5000,
             assignment=r.Assignment(topic_partitions=[
                 r.Assignment.TopicPartitions(topic_id=topic_id, partitions=[1])]))
    encoded = encode_response(Request(APIS[68], 1, 7, "c", None), resp)
    back = r.decode(bytes(encoded[4:]), version=1, header=True)
    assert back.member_epoch == 4
    assert [(tp.topic_id, tp.partitions) for tp in back.assignment.topic_partitions] == [(topic_id, [1])]

    f = APIS[9].request
    fetch = decode_request(frame(f(version=9, require_stable=True, groups=[f.OffsetFetchRequestGroup(
        group_id="g", member_id="m", member_epoch=4, topics=None)]))).body
    assert [(g.group_id, g.member_id, g.member_epoch, g.topics) for g in fetch.groups] == [
        ("g", "m", 4, None)]
