"""OffsetForLeaderEpoch: where each epoch (range) of a partition ended, as Kafka's
LeaderEpochFileCache answers, and the fencing by the client's current leader epoch."""

from __future__ import annotations

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.offset_for_leader_epoch import end_offset_for
from crossbeat.stream.placement import RangeInfo
from tests.unit.broker.conftest import LoopBroker, call

# epochs 3 and 4 kept (0-2 dropped by retention), epoch 5 open; high watermark 70
RANGES = [RangeInfo(3, 10, 20, True), RangeInfo(4, 20, 50, True), RangeInfo(5, 50, None, False)]


def test_end_offsets_per_epoch() -> None:
    assert end_offset_for(RANGES, 70, 5) == (5, 70)  # current epoch: up to the high watermark
    assert end_offset_for(RANGES, 70, 4) == (4, 50)  # ended where epoch 5 began
    assert end_offset_for(RANGES, 70, 3) == (3, 20)
    assert end_offset_for(RANGES, 70, 1) == (1, 10)  # older than all kept: the first start
    assert end_offset_for(RANGES, 70, 6) == (-1, -1)  # from the future
    assert end_offset_for(RANGES, 70, -1) == (-1, -1)


def test_over_the_wire(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        meta = APIS[3].request
        call(sock, meta(version=13, topics=[meta.MetadataRequestTopic(name="t")],
                        allow_auto_topic_creation=True))
        q = APIS[23].request
        topic, part = q.OffsetForLeaderTopic, q.OffsetForLeaderTopic.OffsetForLeaderPartition

        def ask(current: int, epoch: int, partition: int = 0) -> tuple[int, int, int]:
            resp = call(sock, q(version=2, topics=[topic(topic="t", partitions=[
                part(partition=partition, current_leader_epoch=current, leader_epoch=epoch)])]))
            p = resp.topics[0].partitions[0]
            return p.error_code, p.leader_epoch, p.end_offset

        assert ask(-1, 0) == (0, 0, 0)
        assert ask(0, 0) == (0, 0, 0)
        assert ask(1, 0)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert ask(0, 0, partition=7)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
