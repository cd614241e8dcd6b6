"""On the wire, InitProducerId v3+ (KIP-360): the producer's current (id, epoch) gets a
bumped epoch, a retry with the epoch before that bump gets the current one again, and a
stale epoch is PRODUCER_FENCED (v4) or INVALID_PRODUCER_EPOCH (v3)."""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest

from tests.unit.broker.conftest import LoopBroker, call


def test_init_producer_id_with_expected_epoch(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        def init(version: int, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
            r = call(sock, InitProducerIdRequest[version](
                transactional_id="tx", transaction_timeout_ms=60000, producer_id=pid,
                producer_epoch=epoch))
            return r.error_code, r.producer_id, r.producer_epoch

        code, pid, epoch = init(4)
        assert (code, epoch) == (0, 0)
        assert init(4, pid, 0) == (0, pid, 1)  # bumped
        assert init(4, pid, 0) == (0, pid, 1)  # a retry of that bump: not bumped again
        assert init(4, pid, 1) == (0, pid, 2)
        assert init(4, pid, 0)[0] == 90  # PRODUCER_FENCED
        assert init(3, pid, 0)[0] == 47  # INVALID_PRODUCER_EPOCH
        assert init(4, pid + 1, 2)[0] == 90
        assert init(2) == (0, pid, 3)  # no expectation: a new producer, which fences
