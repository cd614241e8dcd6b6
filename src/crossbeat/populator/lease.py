"""Active/standby election between several populators, through a Kafka consumer group.

Every populator joins consumer group `lease_group` on a one-partition topic. The group
coordinator gives that partition to exactly one member: that member is active and
publishes; the others stand by, polling, and take over when its session expires or it
leaves. It works unchanged on the embedded broker and on any Kafka cluster.

The active populator also commits its journal checkpoint as the group's offset on the
lease partition, so a standby that takes over resumes where the active one stopped (the
local checkpoint file is per machine). Revocation callbacks run inside `poll()`, which the
populator calls only between batches, so a populator that loses the lease gracefully never
publishes again. One whose session expired without knowing it (a network partition) may
publish one more batch: a duplicate, which the contract allows; never a gap, because the
new owner starts from the last *committed* checkpoint.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from crossbeat.populator.client_settings import RECONNECT
from crossbeat.populator.publisher import in_slices

log = logging.getLogger(__name__)


class GroupLease:
    """Holds or waits for the single partition of the lease topic.

    With `stop`, a call that waits for the broker gives up within about half a second once
    it is set (raising the KafkaException it had), so a stopping populator need not wait
    out a broker that is away."""

    def __init__(
        self, brokers: str, group: str, topic: str, *, session_timeout_ms: int = 10_000,
        stop: threading.Event | None = None,
    ) -> None:
        self.topic = topic
        self._stop = stop
        self._held: set[int] = set()
        self._consumer = Consumer(
            {
                **RECONNECT,
                "bootstrap.servers": brokers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
                # The populator polls between batches; a batch may take long.
                "max.poll.interval.ms": 300_000,
                # Sticky and cooperative: a populator joining does not take the lease
                # away from the one holding it.
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self._consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    @property
    def _active(self) -> bool:
        return 0 in self._held

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        was = self._active
        self._held |= {p.partition for p in partitions}
        if partitions:
            # We never read the lease topic; pausing keeps the consumer from fetching it.
            consumer.pause(partitions)
        if self._active and not was:
            log.info("populator lease acquired")

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        was = self._active
        self._held -= {p.partition for p in partitions}
        if was and not self._active:
            log.info("populator lease lost")

    def poll(self, timeout: float = 0.0) -> bool:
        """Serve group callbacks; True while this populator holds the lease."""
        self._consumer.poll(timeout)
        return self._active

    def committed_seq(self, timeout: float = 30.0) -> int:
        """The journal seq the last active populator committed (0 when none).

        Raises KafkaException when the group does not answer within `timeout`, or sooner
        once the stop event is set."""
        partition = [TopicPartition(self.topic, 0)]
        [tp] = in_slices(lambda t: self._consumer.committed(partition, timeout=t), timeout, self._stop)
        return tp.offset if tp.offset >= 0 else 0

    def commit_seq(self, seq: int) -> bool:
        """Record `seq` as the shared restart point (synchronously); False when the group
        refused it for now, which the next batch's commit makes good.

        A commit during a rebalance (a standby joining: the cooperative protocol keeps the
        lease where it is) is refused with REBALANCE_IN_PROGRESS, and one while the broker
        is away fails too. That raised out of the populator, which exited; the joiner then
        took the lease and the one restarted crashed it again, every few seconds. The
        local checkpoint is saved before this, and a successor that resumes from an older
        committed seq only publishes again what this one did: the contract allows it."""
        try:
            self._consumer.commit(offsets=[TopicPartition(self.topic, 0, seq)], asynchronous=False)
        except KafkaException as exc:
            log.warning("lease checkpoint at seq %d not committed now: %s", seq, exc.args[0])
            return False
        return True

    def close(self) -> None:
        self._held.clear()
        self._consumer.close()
