"""Produce order per partition: batches that await before their append (a rebuild in a
worker thread, a transaction index being built) keep their arrival order, and so do the
batches that come behind them — in isolation, and on the wire."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.broker.codec import APIS
from crossbeat.broker.handlers.produce import OFFLOAD_REBUILD_BYTES
from crossbeat.broker.produce_order import ProduceOrder
from tests.unit.broker.conftest import LoopBroker, call, recv_frame


def test_turns_pass_in_order_and_a_turn_given_up_waits_for_those_ahead() -> None:
    async def run() -> None:
        order = ProduceOrder()
        passed: list[int] = []
        assert not order.busy("p")
        turns = [order.join("p") for _ in range(4)]
        assert order.busy("p") and not order.busy("other")

        async def batch(n: int) -> None:
            await turns[n].wait()
            passed.append(n)
            turns[n].release()

        tasks = {n: asyncio.ensure_future(batch(n)) for n in (3, 2, 0)}  # 1 will give up
        for _ in range(5):
            await asyncio.sleep(0)
        assert passed == [0]  # 2 waits for 1, which has neither gone nor given up
        turns[1].release()  # given up (a refused batch), after 0 went: 2 goes on
        turns[1].release()  # idempotent
        await asyncio.gather(*tasks.values())
        assert passed == [0, 2, 3]
        assert not order.busy("p")

        # given up while the one ahead still holds its turn: the one behind still waits
        first, second, third = (order.join("q") for _ in range(3))
        second.release()
        later = asyncio.ensure_future(third.wait())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not later.done()
        first.release()
        await later
        third.release()
        assert not order.busy("q")

    asyncio.run(run())


def _batch(pid: int, seq: int, n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=pid, producer_epoch=0, base_sequence=seq,
                                  batch_size=1 << 30)
    for i in range(n):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=os.urandom(size),
                 headers=[])
    return bytes(b.build())


def test_a_small_batch_waits_behind_a_large_one_rebuilt_off_the_loop(tmp_path: Any) -> None:
    """compression.type=gzip: the large batch is rebuilt in a worker thread; the small one
    sent right behind it (same producer, next sequence, one pipelined write) must not be
    appended first (it would be OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    broker = LoopBroker(tmp_path / "data").start()
    try:
        with broker.connect() as sock:
            ct = CreateTopicsRequest[4]
            config = ct.CreatableTopic.CreatableTopicConfig
            r = call(sock, ct(topics=[ct.CreatableTopic(
                name="z", num_partitions=1, replication_factor=1, assignments=[],
                configs=[config(name="compression.type", value="gzip")])],
                timeout_ms=10000, validate_only=False))
            assert r.topics[0].error_code == 0
            init = call(sock, InitProducerIdRequest[1](transactional_id=None,
                                                       transaction_timeout_ms=60000))
            pid = init.producer_id
            large = _batch(pid, 0, 100, 2000)
            assert len(large) >= OFFLOAD_REBUILD_BYTES
            small = _batch(pid, 100, 1, 10)
            req = ProduceRequest[8]
            pt = req.TopicProduceData
            frames = b""
            for cid, records in ((11, large), (12, small)):
                body = req(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[pt(
                    name="z", partition_data=[pt.PartitionProduceData(index=0, records=records)])])
                body.with_header(correlation_id=cid, client_id="unit")
                frames += bytes(body.encode(header=True, framed=True))
            sock.sendall(frames)  # both at once: the second is read while the first rebuilds
            answers = [APIS[0].response.decode(recv_frame(sock), version=8, header=True)
                       for _ in range(2)]
            parts = [a.responses[0].partition_responses[0] for a in answers]
            assert [(p.error_code, p.base_offset) for p in parts] == [(0, 0), (0, 100)]
    finally:
        broker.close()
