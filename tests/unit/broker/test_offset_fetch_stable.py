"""On the wire, OffsetFetch v7 (one group, the form before v8's groups array): with
require_stable, a partition whose offset an open transaction staged answers
UNSTABLE_OFFSET_COMMIT; without it, and once the transaction ended, the committed offset."""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from tests.unit.broker.conftest import LoopBroker, call


def test_offset_fetch_v7_require_stable(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        ct = CreateTopicsRequest[4]
        call(sock, ct(topics=[ct.CreatableTopic(name="t", num_partitions=2, replication_factor=1,
                                                assignments=[], configs=[])],
                      timeout_ms=10000, validate_only=False))
        oc = OffsetCommitRequest[7]
        call(sock, oc(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                      group_instance_id=None, topics=[oc.OffsetCommitRequestTopic(
                          name="t", partitions=[oc.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                              partition_index=i, committed_offset=2, committed_leader_epoch=-1,
                              committed_metadata="") for i in (0, 1)])]))
        r = call(sock, InitProducerIdRequest[1](transactional_id="tx", transaction_timeout_ms=60000))
        pid, epoch = r.producer_id, r.producer_epoch
        ids = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch}
        assert call(sock, AddOffsetsToTxnRequest[3](group_id="g", **ids)).error_code == 0
        tc = TxnOffsetCommitRequest[3]
        r = call(sock, tc(group_id="g", generation_id=-1, member_id="", group_instance_id=None,
                          topics=[tc.TxnOffsetCommitRequestTopic(name="t", partitions=[
                              tc.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                                  partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                  committed_metadata="")])], **ids))
        assert r.topics[0].partitions[0].error_code == 0

        def fetch(stable: bool) -> list[tuple[int, int, int]]:
            of = OffsetFetchRequest[7]
            r = call(sock, of(group_id="g", require_stable=stable, topics=[
                of.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]))
            return [(p.partition_index, p.committed_offset, p.error_code)
                    for p in r.topics[0].partitions]

        assert fetch(True) == [(0, -1, 88), (1, 2, 0)]  # 88: UNSTABLE_OFFSET_COMMIT
        assert fetch(False) == [(0, 2, 0), (1, 2, 0)]
        r = call(sock, EndTxnRequest[3](committed=True, **ids))
        assert r.error_code == 0
        assert fetch(True) == [(0, 5, 0), (1, 2, 0)]
