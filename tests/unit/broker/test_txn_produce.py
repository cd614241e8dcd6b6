"""On the wire: a transactional batch is accepted only for a partition of its producer's
open transaction, fencing refuses the old epoch, and a read_committed fetch stops at the
last stable offset and names the aborted transaction."""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.unit.broker.conftest import LoopBroker, call


def txn_batch(pid: int, epoch: int, seq: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"v", headers=[])
    return bytes(b.build())


def test_transactional_produce_and_read_committed_fetch(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        ct = CreateTopicsRequest[4]
        call(sock, ct(topics=[ct.CreatableTopic(name="t", num_partitions=1, replication_factor=1,
                                                assignments=[], configs=[])],
                      timeout_ms=10000, validate_only=False))

        def init() -> tuple[int, int]:
            r = call(sock, InitProducerIdRequest[1](transactional_id="tx",
                                                    transaction_timeout_ms=60000))
            assert r.error_code == 0
            return r.producer_id, r.producer_epoch

        def produce(pid: int, epoch: int, seq: int) -> int:
            req = ProduceRequest[8]
            pt = req.TopicProduceData
            r = call(sock, req(transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[pt(
                name="t", partition_data=[pt.PartitionProduceData(
                    index=0, records=txn_batch(pid, epoch, seq))])]))
            code: int = r.responses[0].partition_responses[0].error_code
            return code

        def fetch() -> Any:
            req = FetchRequest[11]
            ft = req.FetchTopic
            r = call(sock, req(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                               isolation_level=1, session_id=0, session_epoch=-1,
                               topics=[ft(topic="t", partitions=[ft.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=0,
                                   log_start_offset=-1, partition_max_bytes=1 << 20)])],
                               forgotten_topics_data=[], rack_id=""))
            return r.responses[0].partitions[0]

        pid, epoch = init()
        assert produce(pid, epoch, 0) == 48  # INVALID_TXN_STATE: partition not added
        add = AddPartitionsToTxnRequest[3]
        r = call(sock, add(v3_and_below_transactional_id="tx", v3_and_below_producer_id=pid,
                           v3_and_below_producer_epoch=epoch,
                           v3_and_below_topics=[add.AddPartitionsToTxnTopic(name="t",
                                                                            partitions=[0])]))
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        assert produce(pid, epoch, 0) == 0
        part = fetch()
        assert (part.high_watermark, part.last_stable_offset) == (1, 0)
        assert not part.records  # nothing below the last stable offset

        new_pid, new_epoch = init()  # fences the first producer, aborting its transaction
        assert (new_pid, new_epoch > epoch) == (pid, True)
        assert produce(pid, epoch, 1) == 47  # INVALID_PRODUCER_EPOCH
        part = fetch()
        assert (part.high_watermark, part.last_stable_offset) == (2, 2)
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
        assert part.records
