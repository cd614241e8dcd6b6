"""On the wire, on a full disk: an InitProducerId whose epoch bump the transaction log
refuses fails retriably and fences nobody, as the bump never took effect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, InitProducerIdRequest

from crossbeat.broker.errors import ErrorCode
from tests.support.smallfs import fill, small_filesystem
from tests.unit.broker.conftest import LoopBroker, call

TID = "t" * 5000  # every transaction log line is longer than a page: a full disk takes none


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        yield mnt


def test_an_epoch_bump_the_disk_refuses_fences_nobody(small_fs: Path) -> None:
    broker = LoopBroker(small_fs / "data").start()
    filler = small_fs / "filler"
    try:
        with broker.connect() as sock:
            ct = CreateTopicsRequest[4]
            call(sock, ct(topics=[ct.CreatableTopic(name="t", num_partitions=1,
                                                    replication_factor=1, assignments=[],
                                                    configs=[])],
                          timeout_ms=10000, validate_only=False))
            init = InitProducerIdRequest[1](transactional_id=TID, transaction_timeout_ms=60000)
            first = call(sock, init)
            assert first.error_code == 0
            fill(filler)
            assert call(sock, init).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            filler.unlink()

            add = AddPartitionsToTxnRequest[3]
            r = call(sock, add(v3_and_below_transactional_id=TID,
                               v3_and_below_producer_id=first.producer_id,
                               v3_and_below_producer_epoch=first.producer_epoch,
                               v3_and_below_topics=[add.AddPartitionsToTxnTopic(
                                   name="t", partitions=[0])]))
            [topic] = r.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == 0  # not fenced
    finally:
        filler.unlink(missing_ok=True)
        broker.close()
