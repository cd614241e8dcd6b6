"""The populator loop: journal → extensions' filter() → broker → durable checkpoint.

Order of one batch, which is what makes a crash lose nothing:
1. read up to `batch_max` entries after the checkpointed seq (long-poll);
2. hand each entry to every extension's `filter()`, in seq order;
3. produce the messages and wait until the broker acknowledged every one;
4. only then save the new seq (fsynced file, lease group, gateway checkpoint route).
A crash before 4 republishes the batch (allowed redelivery); nothing is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import httpx
from confluent_kafka import KafkaException

from crossbeat.populator.entry import JournalEntry
from crossbeat.populator.extension import Extension, Message
from crossbeat.populator.journal import JournalAhead, JournalError, JournalRefused, TruncatedJournal
from crossbeat.populator.publisher import BrokerUnreachable, PublishAbandoned, PublishError

log = logging.getLogger(__name__)


def wait_for_broker(
    stop: threading.Event, what: str, attempt: Callable[[], object], *,
    max_backoff_s: float = 30.0,
) -> bool:
    """Call `attempt()` until it returns (True) or `stop` is set (False).

    For start-up steps that need the broker (creating topics): a broker that is not up yet
    is waited for with exponential backoff, one log line per failed attempt, as `run`
    waits for one that goes away later; components may start in any order. Only
    BrokerUnreachable and librdkafka's own errors are retried: a broker that answers and
    refuses (PublishError) propagates. `attempt` is expected to give up within about half a
    second once `stop` is set (PublishAbandoned)."""
    delay = 0.5
    while not stop.is_set():
        try:
            attempt()
            return True
        except PublishAbandoned:
            break
        except (BrokerUnreachable, KafkaException) as exc:
            if stop.is_set():
                break
            log.warning("%s: %s; retrying in %.1fs", what, exc, delay)
            stop.wait(delay)
            delay = min(max_backoff_s, delay * 2)
    log.info("stopped while %s", what)
    return False


class JournalSource(Protocol):
    def read(self, after: int, limit: int, wait: float = 0.0) -> list[JournalEntry]: ...

    def checkpoint(self, consumer: str, seq: int) -> None: ...


class MessageSink(Protocol):
    def publish(self, messages: Iterable[Message], *, timeout: float = 90.0) -> int: ...

    def publish_checkpoint(
        self, topics: Iterable[str], seq: int, *, timeout: float = 60.0
    ) -> None: ...


class SeqStore(Protocol):
    def load(self) -> int: ...

    def save(self, seq: int) -> None: ...


class Lease(Protocol):
    def poll(self, timeout: float = 0.0) -> bool: ...

    def committed_seq(self) -> int: ...

    def commit_seq(self, seq: int) -> bool: ...


class Populator:
    """Runs batches until stopped; see the module docstring for the ordering guarantees."""

    def __init__(
        self,
        *,
        journal: JournalSource,
        extensions: Sequence[Extension],
        sink: MessageSink,
        store: SeqStore,
        consumer_name: str = "populator",
        batch_max: int = 2000,
        poll_wait_s: float = 1.0,
        checkpoint_record_interval_s: float = 180.0,
        lease: Lease | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self.extensions = list(extensions)
        self.sink = sink
        self.store = store
        self.consumer_name = consumer_name
        self.batch_max = batch_max
        self.poll_wait_s = poll_wait_s
        self.checkpoint_record_interval_s = checkpoint_record_interval_s
        self.lease = lease
        self.clock = clock
        self.topics = sorted({t for ext in self.extensions for t in ext.topics()})
        self.seq: int | None = None  # None until we (re)load the restart point
        self._last_record = clock()
        self.published = 0

    def messages_for(self, entries: Iterable[JournalEntry]) -> list[Message]:
        """Every extension's messages for `entries`, in seq order then extension order."""
        return [m for entry in entries for ext in self.extensions for m in ext.filter(entry)]

    def step(self) -> int:
        """One batch; returns how many journal entries it consumed (0 when idle)."""
        if self.lease is not None and not self.lease.poll(0):
            # Standby: forget our position, the active populator moves it on.
            self.seq = None
            time.sleep(min(self.poll_wait_s, 0.5) or 0.1)
            return 0
        if self.seq is None:
            self.seq = self.store.load()
            if self.lease is not None:
                self.seq = max(self.seq, self.lease.committed_seq())
            log.info("populator resuming after journal seq %d", self.seq)
        entries = self.journal.read(self.seq, self.batch_max, self.poll_wait_s)
        if entries:
            messages = self.messages_for(entries)
            self.published += self.sink.publish(messages)
            self._save(entries[-1].seq)
        if self.clock() - self._last_record >= self.checkpoint_record_interval_s:
            self.sink.publish_checkpoint(self.topics, self.seq)
            self._last_record = self.clock()
        return len(entries)

    def _save(self, seq: int) -> None:
        self.store.save(seq)
        self.seq = seq
        if self.lease is not None:
            self.lease.commit_seq(seq)
        try:
            # Lets the gateway's journal retention advance; our own restart point is the
            # file above, so a failure here only delays retention.
            self.journal.checkpoint(self.consumer_name, seq)
        except Exception as exc:  # noqa: BLE001 - retried with the next batch
            log.warning("gateway checkpoint at seq %d failed: %s", seq, exc)

    def run(self, stop: threading.Event, *, max_backoff_s: float = 30.0) -> None:
        """Batches until `stop` is set.

        A broker or gateway that is unreachable is waited for (exponential backoff): the
        failed batch was not checkpointed, so it is read and published again. A truncated
        journal is a gap no retry can fill, a journal behind our checkpoint is another one, and
        refused credentials stay refused: these propagate (the process exits non-zero).

        Setting `stop` ends a batch that waits for the broker within about a second when the
        sink and lease were given the same event (`Publisher(stop=…)`, `GroupLease(stop=…)`):
        that batch is abandoned unacknowledged and not checkpointed, so the next start
        publishes it again.
        """
        delay = 0.5
        while not stop.is_set():
            try:
                self.step()
                delay = 0.5
            except (TruncatedJournal, JournalAhead, JournalRefused):
                raise
            except (PublishError, JournalError, httpx.TransportError, KafkaException) as exc:
                if stop.is_set():
                    # Not a failure to retry: the batch was given up to stop.
                    log.info("stopping: batch after seq %s given up unfinished (%s); not "
                             "checkpointed, so the next start publishes it", self.seq, exc)
                    return
                # (KafkaException: the lease group's committed seq unreadable, the broker away)
                log.warning("batch after seq %s failed (%s); retrying in %.1fs", self.seq, exc, delay)
                stop.wait(delay)
                delay = min(max_backoff_s, delay * 2)
