"""INVALID_TIMESTAMP as Kafka's LogValidator answers it: every record outside the topic's
`message.timestamp.*.max.ms` bounds is named in the partition's record_errors (its index in
the batch and Kafka's message), under one message for the batch; nothing of the batch is
stored. The same whether the batch is stored as produced (walked) or rebuilt for the
topic's codec, and a bad timestamp outranks a keyless record of a compacted topic."""

from __future__ import annotations

import time
from typing import Any

import pytest

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call
from tests.unit.broker.test_topic_configs import _create
from tests.unit.stream.conftest import make_batch

HOUR_MS = 3_600_000
BATCH_MESSAGE = "One or more records have been rejected due to invalid timestamp"


def batch(records: list[tuple[bytes | None, int]]) -> bytearray:
    """One batch of records with these (key, timestamp)."""
    return make_batch([b"v"] * len(records), keys=[k for k, _ in records],
                      timestamps=[ts for _, ts in records])


def produce(sock: Any, topic: str, records: bytearray) -> Any:
    q = APIS[0].request
    data = q.TopicProduceData
    resp = call(sock, q(version=8, transactional_id=None, acks=-1, timeout_ms=5000,
                        topic_data=[data(name=topic, partition_data=[
                            data.PartitionProduceData(index=0, records=records)])]))
    return resp.responses[0].partition_responses[0]


def end_offset(sock: Any, topic: str) -> int:
    q = APIS[2].request
    resp = call(sock, q(version=5, replica_id=-1, isolation_level=0, topics=[q.ListOffsetsTopic(
        name=topic, partitions=[q.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
    return int(resp.topics[0].partitions[0].offset)


@pytest.mark.parametrize("codec", ["producer", "gzip"])  # walked as produced / rebuilt
def test_every_record_out_of_range_is_named(loop_broker: LoopBroker, codec: str) -> None:
    now = int(time.time() * 1000)
    with loop_broker.connect() as sock:
        assert _create(sock, "t", {"message.timestamp.before.max.ms": str(HOUR_MS),
                                   "message.timestamp.after.max.ms": str(HOUR_MS),
                                   "compression.type": codec}) == (0, None)
        part = produce(sock, "t", batch([(b"k", now), (b"k", now - 2 * HOUR_MS), (b"k", -1),
                                         (b"k", now + 2 * HOUR_MS)]))
        assert (part.error_code, part.error_message) == (ErrorCode.INVALID_TIMESTAMP, BATCH_MESSAGE)
        errors = [(e.batch_index, e.batch_index_error_message) for e in part.record_errors]
        assert [i for i, _ in errors] == [1, 3]  # -1: no timestamp, not checked (as Kafka)
        assert errors[0][1].startswith(f"Timestamp {now - 2 * HOUR_MS} of message with offset 1 "
                                       "is out of range. The timestamp should be within [")
        assert end_offset(sock, "t") == 0
        ok = produce(sock, "t", batch([(b"k", now), (b"k", -1)]))
        assert (ok.error_code, ok.record_errors) == (0, [])
        assert end_offset(sock, "t") == 2


def test_a_bad_timestamp_outranks_a_keyless_record_of_a_compacted_topic(loop_broker: LoopBroker) -> None:
    now = int(time.time() * 1000)
    with loop_broker.connect() as sock:
        assert _create(sock, "c", {"cleanup.policy": "compact",
                                   "message.timestamp.before.max.ms": str(HOUR_MS)}) == (0, None)
        part = produce(sock, "c", batch([(None, now), (b"k", now - 2 * HOUR_MS)]))
        assert part.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in part.record_errors] == [1]
        keyless = produce(sock, "c", batch([(b"k", now), (None, now)]))
        assert (keyless.error_code, keyless.error_message) == (
            ErrorCode.INVALID_RECORD, "Compacted topic cannot accept message without key")
