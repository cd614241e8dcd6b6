"""OffsetDelete over the wire: group-level errors, unknown topics, and deleted offsets
(the subscribed-topic refusal needs live members: tests/compat/broker/test_offset_delete.py)."""

from __future__ import annotations

from typing import Any

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call
from tests.unit.broker.test_alter_configs import _create


def _commit(sock: Any, group: str, topic: str, offset: int) -> None:
    q = APIS[8].request
    t = q.OffsetCommitRequestTopic
    resp = call(sock, q(version=2, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        retention_time_ms=-1, topics=[t(name=topic, partitions=[
                            t.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                           committed_metadata="")])]))
    assert resp.topics[0].partitions[0].error_code == 0


def _delete(sock: Any, group: str, *topics: str) -> tuple[int, list[int]]:
    q = APIS[47].request
    t = q.OffsetDeleteRequestTopic
    resp = call(sock, q(version=0, group_id=group, topics=[
        t(name=n, partitions=[t.OffsetDeleteRequestPartition(partition_index=0)]) for n in topics]))
    return resp.error_code, [p.error_code for r in resp.topics for p in r.partitions]


def _fetch(sock: Any, group: str, topic: str) -> int:
    q = APIS[9].request
    resp = call(sock, q(version=1, group_id=group, topics=[
        q.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    offset: int = resp.topics[0].partitions[0].committed_offset
    return offset


def test_offset_delete(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        _create(sock, "a", partitions=1)
        _create(sock, "b", partitions=1)
        _commit(sock, "g", "a", 5)
        _commit(sock, "g", "b", 6)
        assert _delete(sock, "") == (ErrorCode.INVALID_GROUP_ID, [])
        assert _delete(sock, "nobody", "a") == (ErrorCode.GROUP_ID_NOT_FOUND, [])
        assert _delete(sock, "g", "a", "nope") == (0, [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION])
        assert (_fetch(sock, "g", "a"), _fetch(sock, "g", "b")) == (-1, 6)
        assert _delete(sock, "g", "a") == (0, [0])  # nothing left to delete is no error
