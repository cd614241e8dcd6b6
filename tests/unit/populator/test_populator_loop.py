"""The populator's ordering guarantees, with in-memory journal and broker stand-ins."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest

from crossbeat.populator import Extension, ExtensionContext, JournalEntry, Message, message_key
from crossbeat.populator.journal import JournalAhead, JournalRefused, TruncatedJournal
from crossbeat.populator.publisher import PublishError
from crossbeat.populator.service import Populator


class Journal:
    def __init__(self, n: int) -> None:
        self.entries = [
            JournalEntry(i, "put", "bk", f"k{i}", f"v{i}", {"n": i}, "") for i in range(1, n + 1)
        ]
        self.checkpoints: list[int] = []

    def read(self, after: int, limit: int, wait: float = 0.0) -> list[JournalEntry]:
        return [e for e in self.entries if e.seq > after][:limit]

    def checkpoint(self, consumer: str, seq: int) -> None:
        self.checkpoints.append(seq)


class Sink:
    def __init__(self, fail_at_call: int | None = None) -> None:
        self.messages: list[Message] = []
        self.calls = 0
        self.fail_at_call = fail_at_call
        self.records: list[tuple[list[str], int]] = []

    def publish(self, messages: Iterable[Message], *, timeout: float = 90.0) -> int:
        self.calls += 1
        batch = list(messages)
        if self.calls == self.fail_at_call:
            raise RuntimeError("broker down")
        self.messages.extend(batch)
        return len(batch)

    def publish_checkpoint(self, topics: Iterable[str], seq: int, *, timeout: float = 60.0) -> None:
        self.records.append((list(topics), seq))


class Store:
    def __init__(self, seq: int = 0) -> None:
        self.seq = seq

    def load(self) -> int:
        return self.seq

    def save(self, seq: int) -> None:
        self.seq = seq


class Odd(Extension):
    name = "odd"

    def topics(self) -> list[str]:
        return ["t-odd"]

    def filter(self, entry: JournalEntry) -> list[Message]:
        if entry.seq % 2:
            return [Message("t-odd", message_key(entry.bucket, entry.key), {"seq": entry.seq})]
        return []


def make(journal: Journal, sink: Sink, store: Store, batch_max: int = 3) -> Populator:
    ext = Odd(Odd.settings_model(), ExtensionContext())
    return Populator(journal=journal, extensions=[ext], sink=sink, store=store,
                     batch_max=batch_max, poll_wait_s=0)


def test_publishes_filtered_messages_in_seq_order_then_checkpoints() -> None:
    journal, sink, store = Journal(7), Sink(), Store()
    pop = make(journal, sink, store)
    while pop.step():
        pass
    assert [m.value["seq"] for m in sink.messages] == [1, 3, 5, 7]
    assert store.seq == 7
    assert journal.checkpoints == [3, 6, 7]


def test_a_failed_publish_checkpoints_nothing_and_the_restart_republishes() -> None:
    journal, store = Journal(6), Store()
    sink = Sink(fail_at_call=2)
    pop = make(journal, sink, store)
    pop.step()
    with pytest.raises(RuntimeError):
        pop.step()
    assert store.seq == 3  # the failed batch 4..6 is not checkpointed
    restarted = make(journal, Sink(), store)
    while restarted.step():
        pass
    assert [m.value["seq"] for m in restarted.sink.messages] == [5]  # type: ignore[attr-defined]
    assert store.seq == 6


def test_resumes_after_the_stored_seq() -> None:
    journal, sink = Journal(5), Sink()
    pop = make(journal, sink, Store(seq=3))
    pop.step()
    assert [m.value["seq"] for m in sink.messages] == [5]


def test_message_key_is_url_encoded_bucket_slash_key() -> None:
    assert message_key("bk", "a b/c%") == b"bk%2Fa%20b%2Fc%25"


class StandbyLease:
    def __init__(self) -> None:
        self.active = False
        self.committed: list[int] = []

    def poll(self, timeout: float = 0.0) -> bool:
        return self.active

    def committed_seq(self) -> int:
        return 4

    def commit_seq(self, seq: int) -> None:
        self.committed.append(seq)


def test_standby_reads_nothing_and_takes_over_from_the_committed_seq() -> None:
    journal, sink, lease = Journal(7), Sink(), StandbyLease()
    ext = Odd(Odd.settings_model(), ExtensionContext())
    pop = Populator(journal=journal, extensions=[ext], sink=sink, store=Store(seq=2),
                    batch_max=10, poll_wait_s=0, lease=lease)
    assert pop.step() == 0 and not sink.messages
    lease.active = True
    assert pop.step() == 3
    assert [m.value["seq"] for m in sink.messages] == [5, 7]
    assert lease.committed == [7]


def test_periodic_checkpoint_record_goes_to_every_topic() -> None:
    now = [0.0]
    journal, sink = Journal(2), Sink()
    ext = Odd(Odd.settings_model(), ExtensionContext())
    pop = Populator(journal=journal, extensions=[ext], sink=sink, store=Store(),
                    poll_wait_s=0, checkpoint_record_interval_s=60, clock=lambda: now[0])
    pop.step()
    assert sink.records == []
    now[0] = 61.0
    pop.step()
    assert sink.records == [(["t-odd"], 2)]


class FlakySink(Sink):
    """Refuses the first publish (broker down), then accepts; stops the loop when done."""

    def __init__(self, stop: threading.Event, total: int) -> None:
        super().__init__()
        self.stop, self.total = stop, total

    def publish(self, messages: Iterable[Message], *, timeout: float = 90.0) -> int:
        self.calls += 1
        if self.calls == 1:
            raise PublishError("broker down")
        n = self._accept(messages)
        if self.messages and self.messages[-1].value["seq"] >= self.total:
            self.stop.set()
        return n

    def _accept(self, messages: Iterable[Message]) -> int:
        batch = list(messages)
        self.messages.extend(batch)
        return len(batch)


def test_run_waits_out_an_unreachable_broker_and_republishes_the_batch() -> None:
    stop = threading.Event()
    journal, store = Journal(5), Store()
    sink = FlakySink(stop, total=5)
    pop = make(journal, sink, store, batch_max=10)
    pop.run(stop, max_backoff_s=0.01)
    assert [m.value["seq"] for m in sink.messages] == [1, 3, 5]
    assert store.seq == 5


class Failing(Journal):
    """A journal whose every read raises `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__(1)
        self.error = error

    def read(self, after: int, limit: int, wait: float = 0.0) -> list[JournalEntry]:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [TruncatedJournal(1, 100), JournalAhead(1, 3), JournalRefused("refused")],
    ids=["truncated journal", "journal behind its checkpoint", "refused credentials"],
)
def test_run_stops_on_an_error_no_retry_can_fix(error: Exception) -> None:
    with pytest.raises(type(error)):
        make(Failing(error), Sink(), Store()).run(threading.Event())
