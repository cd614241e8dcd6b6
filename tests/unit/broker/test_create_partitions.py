"""CreatePartitions: Kafka's checks (shrink, no increase, duplicates, assignments), growth,
and a growth interrupted by a crash finished on start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from crossbeat.stream.placement import PlacementDriver
from tests.unit.broker.conftest import LoopBroker, call
from tests.unit.broker.test_alter_configs import _create


def _grow(sock: Any, *topics: tuple[str, int, list[list[int]] | None],
          validate_only: bool = False) -> list[tuple[int, str | None]]:
    q = APIS[37].request
    t = q.CreatePartitionsTopic
    resp = call(sock, q(version=3, timeout_ms=1000, validate_only=validate_only, topics=[
        t(name=n, count=c, assignments=None if a is None else [
            t.CreatePartitionsAssignment(broker_ids=ids) for ids in a])
        for n, c, a in topics]))
    return [(r.error_code, r.error_message) for r in resp.results]


def _count(sock: Any, name: str) -> int:
    q = APIS[3].request
    resp = call(sock, q(version=1, topics=[q.MetadataRequestTopic(name=name)]))
    return len(resp.topics[0].partitions)


def test_checks(loop_broker: LoopBroker) -> None:
    bad_count, bad_assignment = ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICA_ASSIGNMENT
    with loop_broker.connect() as sock:
        _create(sock, "t", partitions=2)
        assert _grow(sock, ("t", 1, None)) == [
            (bad_count, "The topic t currently has 2 partition(s); 1 would not be an increase.")]
        assert _grow(sock, ("t", 2, None)) == [(bad_count, "Topic already has 2 partition(s).")]
        assert _grow(sock, ("t", 3, None), ("t", 4, None)) == [
            (ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")] * 2
        assert _grow(sock, ("nope", 3, None)) == [
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist.")]
        assert _grow(sock, ("t", 4, [[0]])) == [(bad_assignment, "Attempted to add 2 additional "
                                                 "partition(s), but only 1 assignment(s) were specified.")]
        assert _grow(sock, ("t", 3, [[5]])) == [(bad_assignment, "The manual partition assignment "
                                                 "includes broker 5, but no such broker is registered.")]
        assert _grow(sock, ("t", 3, [[]]))[0][0] == bad_assignment
        assert _grow(sock, ("t", 3, None), validate_only=True) == [(0, None)]
        assert _count(sock, "t") == 2
        assert _grow(sock, ("t", 3, [[0]])) == [(0, None)]
        assert _count(sock, "t") == 3


def test_interrupted_growth_is_finished_on_start(tmp_path: Path) -> None:
    broker = LoopBroker(tmp_path / "data").start()
    try:
        with broker.connect() as sock:
            _create(sock, "t", partitions=1)
            assert _grow(sock, ("t", 4, None)) == [(0, None)]
    finally:
        broker.close()
    # as if the broker died after creating the first new partition's stream
    placement = PlacementDriver(tmp_path / "data" / "streams" / "placement.json")
    placement.delete_stream("t-2")
    placement.delete_stream("t-3")
    broker = LoopBroker(tmp_path / "data").start()
    try:
        with broker.connect() as sock:
            assert _count(sock, "t") == 4
    finally:
        broker.close()
