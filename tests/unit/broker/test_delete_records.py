"""DeleteRecords over the wire: -1 is the high watermark, offsets past it or other
negative ones are OFFSET_OUT_OF_RANGE, unknown partitions answer -1."""

from __future__ import annotations

from typing import Any

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call
from tests.unit.broker.test_alter_configs import _create
from tests.unit.stream.conftest import make_batch


def _produce(sock: Any, topic: str, n: int) -> None:
    q = APIS[0].request
    data = q.TopicProduceData
    for _ in range(n):
        resp = call(sock, q(version=8, transactional_id=None, acks=-1, timeout_ms=5000,
                            topic_data=[data(name=topic, partition_data=[
                                data.PartitionProduceData(index=0, records=make_batch([b"v"]))])]))
        assert resp.responses[0].partition_responses[0].error_code == 0


def _delete(sock: Any, *parts: tuple[str, int, int]) -> list[tuple[int, int]]:
    q = APIS[21].request
    t = q.DeleteRecordsTopic
    resp = call(sock, q(version=2, timeout_ms=1000, topics=[
        t(name=n, partitions=[t.DeleteRecordsPartition(partition_index=i, offset=o)])
        for n, i, o in parts]))
    return [(p.error_code, p.low_watermark) for r in resp.topics for p in r.partitions]


def test_delete_records(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        _create(sock, "t", partitions=1)
        _produce(sock, "t", 4)
        out_of_range = ErrorCode.OFFSET_OUT_OF_RANGE
        assert _delete(sock, ("t", 0, 5), ("t", 0, -2), ("t", 3, 1), ("nope", 0, 1)) == [
            (out_of_range, -1), (out_of_range, -1),
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
        assert _delete(sock, ("t", 0, 2)) == [(0, 2)]
        assert _delete(sock, ("t", 0, 1)) == [(0, 2)]  # never backwards
        assert _delete(sock, ("t", 0, -1)) == [(0, 4)]
