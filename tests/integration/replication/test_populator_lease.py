"""Several populators, one active: the consumer-group lease against the real broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.populator.lease import GroupLease
from crossbeat.populator.publisher import ensure_topics
from tests.support.procs import Service, start_service, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data: Path = tmp_path_factory.mktemp("lease-broker")
    svc = start_service(["broker", "--data-dir", str(data), "--listen", "127.0.0.1:0"])
    yield svc
    svc.stop()


def test_one_holder_at_a_time_and_the_successor_resumes_from_the_committed_seq(
    broker: Service,
) -> None:
    ensure_topics(broker.address, ["lease-t"], 1)
    first = GroupLease(broker.address, "lease-g", "lease-t", session_timeout_ms=6000)
    wait_until(lambda: first.poll(0.1), timeout=30, what="first holds the lease")
    second = GroupLease(broker.address, "lease-g", "lease-t", session_timeout_ms=6000)
    try:
        # The standby joins (a rebalance) and keeps polling: the holder keeps the lease.
        for _ in range(30):
            assert (second.poll(0.1), first.poll(0.0)) == (False, True)
        first.commit_seq(4242)
        first.close()
        wait_until(lambda: second.poll(0.2), timeout=60, what="second takes over")
        assert second.committed_seq() == 4242
    finally:
        second.close()


def test_the_holder_keeps_committing_while_a_standby_joins(broker: Service) -> None:
    """A commit during the rebalance a joining standby starts is refused
    (REBALANCE_IN_PROGRESS): it raised out of the active populator, which exited; restarted,
    it crashed the new holder in turn, every few seconds. The holder keeps the lease (the
    cooperative protocol) and its next commit goes through."""
    ensure_topics(broker.address, ["lease-j"], 1)
    first = GroupLease(broker.address, "lease-join", "lease-j", session_timeout_ms=6000)
    wait_until(lambda: first.poll(0.1), timeout=30, what="first holds the lease")
    second = GroupLease(broker.address, "lease-join", "lease-j", session_timeout_ms=6000)
    try:
        seq = 0
        deadline = time.monotonic() + 6  # commits across the join's rebalance (bounded)
        while time.monotonic() < deadline:
            seq += 1
            first.commit_seq(seq)  # False while the group rebalances: not an exception
            assert (second.poll(0.05), first.poll(0.0)) == (False, True)
        assert first.commit_seq(500)
        first.close()
        wait_until(lambda: second.poll(0.2), timeout=60, what="second takes over")
        assert second.committed_seq() == 500
    finally:
        second.close()
