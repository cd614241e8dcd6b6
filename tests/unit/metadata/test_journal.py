"""The journal: completeness under concurrency, group commit, long-poll, retention."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import JournalTruncated, MetadataSettings, RevisionMismatch
from crossbeat.metadata.sqlite import SqliteMetadataStore

from .conftest import version

THREADS = 16
OPS_PER_THREAD = 40


def run_threads(target: Any, count: int) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # surfaced below: a thread's failure fails the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_journal_is_complete_dense_and_replays_to_the_final_state(
    store: SqliteMetadataStore, bucket: str
) -> None:
    changes = [0] * THREADS  # changes each thread saw succeed
    stop = threading.Event()
    reader_problems: list[str] = []

    def read_concurrently() -> None:
        after = 0
        while not stop.is_set() or after < store.last_seq():
            for entry in store.read_journal(after, 50):
                if entry.seq != after + 1:
                    reader_problems.append(f"gap: {after} then {entry.seq}")
                after = entry.seq

    reader = threading.Thread(target=read_concurrently)
    reader.start()

    def work(i: int) -> None:
        rnd = random.Random(i)
        mine: list[dict[str, Any]] = []
        for _ in range(OPS_PER_THREAD):
            key = f"k{rnd.randrange(6)}"  # keys shared between threads
            roll = rnd.random()
            if roll < 0.6 or not mine:
                v = version(bucket, key, "null" if roll < 0.1 else None, thread=i)
                store.put_version(v)
                mine.append(v)
                changes[i] += 1
            elif roll < 0.8:
                v = mine.pop(rnd.randrange(len(mine)))
                if store.delete_version(bucket, v["key"], v["versionId"]) is not None:
                    changes[i] += 1
            else:
                v = rnd.choice(mine)
                current = store.get_version(bucket, v["key"], v["versionId"])
                if current is None:
                    continue
                try:
                    store.update_version(
                        bucket,
                        v["key"],
                        v["versionId"],
                        dict(current, touched=i),
                        expected_revision=current["revision"],
                    )
                    changes[i] += 1
                except RevisionMismatch:
                    pass

    try:
        run_threads(work, THREADS)
    finally:
        stop.set()
        reader.join(timeout=60)
    assert not reader_problems

    entries = store.read_journal(0, 100_000)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert len(entries) == 1 + sum(changes)  # + the bucket creation
    assert store.last_seq() == len(entries)

    # Replaying the journal in seq order gives exactly the stored state.
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for e in entries[1:]:
        assert e.versionId is not None and e.value is not None
        if e.op == "put":
            state[(e.key, e.versionId)] = e.value
        else:
            assert state.pop((e.key, e.versionId))["revision"] == e.value["revision"]
    stored = {(m["key"], m["versionId"]): m for m in store.list_versions(bucket, limit=100_000)}
    assert state.keys() == stored.keys()
    for ident, meta in stored.items():
        replayed = dict(state[ident])
        replayed.pop("isLatest")
        assert replayed == {k: v for k, v in meta.items() if k != "isLatest"}


def test_concurrent_operations_share_commits(store: SqliteMetadataStore, bucket: str) -> None:
    entered, release = threading.Event(), threading.Event()
    commits_before = store.writer_stats.commits

    def hold(current: dict[str, Any] | None) -> None:
        # Runs inside the writer's transaction: that batch cannot commit until released.
        entered.set()
        assert release.wait(timeout=30)

    holder = threading.Thread(
        target=lambda: store.put_version(version(bucket, "h"), precondition=hold)
    )
    holder.start()
    assert entered.wait(timeout=30)
    waiting = [
        threading.Thread(target=store.put_version, args=(version(bucket, f"w{i}"),))
        for i in range(10)
    ]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 30
    while store.pending_writes() < 10:
        assert time.monotonic() < deadline, "writers never queued"
        time.sleep(0.001)
    release.set()
    holder.join(timeout=30)
    for t in waiting:
        t.join(timeout=30)
    # One commit for the held batch, one shared by the ten queued behind it.
    assert store.writer_stats.commits - commits_before == 2
    assert store.writer_stats.operations >= 11
    assert len(store.list_latest(bucket)) == 11


def test_free_running_threads_group_commit(store: SqliteMetadataStore, bucket: str) -> None:
    before = store.writer_stats.commits, store.writer_stats.operations

    def work(i: int) -> None:
        for j in range(25):
            store.put_version(version(bucket, f"t{i}/{j}"))

    run_threads(work, THREADS)
    commits = store.writer_stats.commits - before[0]
    operations = store.writer_stats.operations - before[1]
    assert operations == THREADS * 25
    assert commits < operations  # fsyncs were shared


def test_wait_journal_long_polls(store: SqliteMetadataStore, bucket: str) -> None:
    last = store.last_seq()
    started = time.monotonic()
    assert store.wait_journal(last, 0.2) is False
    assert time.monotonic() - started >= 0.2
    assert store.wait_journal(last - 1, 5) is True  # already there: immediate

    woke: list[tuple[bool, float]] = []

    def waiter() -> None:
        t0 = time.monotonic()
        woke.append((store.wait_journal(last, 30), time.monotonic() - t0))

    t = threading.Thread(target=waiter)
    t.start()
    store.put_version(version(bucket, "k"))
    t.join(timeout=30)
    assert woke and woke[0][0] is True and woke[0][1] < 5


def test_retention_by_checkpoints_and_truncated_reads(
    store: SqliteMetadataStore, bucket: str
) -> None:
    for i in range(9):
        store.put_version(version(bucket, f"k{i}"))
    assert store.last_seq() == 10
    assert store.trim_journal() == 0  # no consumer, no bound: everything is kept
    store.set_checkpoint("populator", 6)
    store.set_checkpoint("audit", 4)
    assert store.checkpoints() == {"audit": 4, "populator": 6}
    assert store.trim_journal() == 4
    with pytest.raises(JournalTruncated) as info:
        store.read_journal(0, 10)
    assert info.value.first_available == 5
    with pytest.raises(JournalTruncated):
        store.read_journal(3, 10)
    assert [e.seq for e in store.read_journal(4, 100)] == list(range(5, 11))
    store.set_checkpoint("audit", 10)
    store.set_checkpoint("populator", 10)
    assert store.trim_journal() == 6
    assert store.read_journal(10, 10) == [] and store.last_seq() == 10
    store.put_version(version(bucket, "after"))
    assert [e.seq for e in store.read_journal(10, 10)] == [11]


def test_retention_bounds_apply_to_unconsumed_entries(tmp_path: Path) -> None:
    settings = MetadataSettings(
        journal_retention_entries=5,
        journal_retention_seconds=3600,
        journal_trim_interval_seconds=None,
    )
    with SqliteMetadataStore(tmp_path / "m.db", settings) as store:
        store.set_checkpoint("slow", 0)
        from crossbeat.metadata import Bucket

        store.create_bucket(Bucket("b", "o", "l", "2024-01-01T00:00:00.000Z"))
        for i in range(11):
            store.put_version(version("b", f"k{i}"))
        assert store.trim_journal() == 7  # keeps the newest 5 of 12
        assert store.read_journal(7, 100)[0].seq == 8
        later = datetime.now(UTC) + timedelta(hours=2)
        assert store.trim_journal(now=later) == 5  # all older than an hour
        assert store.last_seq() == 12
        with pytest.raises(JournalTruncated):
            store.read_journal(11, 1)

    with SqliteMetadataStore(tmp_path / "m.db", settings) as reopened:
        assert reopened.last_seq() == 12  # seq never goes back, even with an empty journal
        reopened.put_version(version("b", "again"))
        assert [e.seq for e in reopened.read_journal(12, 10)] == [13]


def test_two_store_instances_on_one_file_keep_seqs_dense(
    db_path: Path, store: SqliteMetadataStore, bucket: str, settings: MetadataSettings
) -> None:
    """Another writer on the same file (e.g. a second process) cannot make seqs collide, and
    wait_journal notices its commits by polling. The two writers take turns on the writer
    lock, so SQLite never has to refuse one of them (no BEGIN polling)."""
    with SqliteMetadataStore(db_path, settings) as other:
        last = store.last_seq()
        noticed: list[bool] = []
        t = threading.Thread(target=lambda: noticed.append(store.wait_journal(last, 30)))
        t.start()

        def work(i: int) -> None:
            target = store if i % 2 else other
            for j in range(10):
                target.put_version(version(bucket, f"{i}/{j}"))

        run_threads(work, 6)
        t.join(timeout=30)
        assert noticed == [True]
        assert store._writer.stats.busy_retries == other._writer.stats.busy_retries == 0
    entries = store.read_journal(0, 1000)
    assert [e.seq for e in entries] == list(range(1, 62))


def test_trim_removes_in_chunks(
    store: SqliteMetadataStore, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import crossbeat.metadata.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "TRIM_CHUNK", 3)
    for i in range(9):
        store.put_version(version(bucket, f"k{i}"))
    store.set_checkpoint("c", 10)
    commits = store.writer_stats.commits
    assert store.trim_journal() == 10
    assert store.writer_stats.commits - commits == 4  # 3 + 3 + 3 + 1
    assert store.read_journal(10, 10) == [] and store.last_seq() == 10


def test_an_operation_failing_alone_in_its_batch_leaves_nothing(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """A batch of one operation runs without a savepoint: when that operation fails after
    writing, the whole transaction is rolled back, its journal seqs are not taken, and
    readers are not told of a commit."""
    before = store.last_seq()
    writer = store._writer
    commits = writer.stats.commits

    def half_done(txn: Any) -> None:
        txn.append_journal("put", bucket, "ghost", "null", b"{}")
        raise RuntimeError("failed after writing")

    with pytest.raises(RuntimeError, match="failed after writing"):
        writer.submit(half_done)
    assert store.last_seq() == before
    assert writer.stats.commits == commits
    assert store._committed == before
    assert not store.wait_journal(before, 0.2)  # nothing new to wake a long-poll
    store.put_version(version(bucket, "real"))
    entries = store.read_journal(before, 10)
    assert [(e.seq, e.key) for e in entries] == [(before + 1, "real")]


def test_a_failed_operation_in_a_batch_gives_back_its_seqs(
    store: SqliteMetadataStore, bucket: str
) -> None:
    """Entries are numbered by the statement that appends them; an operation rolled back to
    its savepoint gives its seqs back to the next operation of the same batch."""
    before = store.last_seq()

    def half_done(txn: Any) -> None:
        txn.append_journal_many([("put", bucket, "ghost", "null", b"{}")] * 3)
        raise RuntimeError("failed after writing")

    def real(txn: Any) -> int:
        return int(txn.append_journal("put", bucket, "real", "null", b"{}"))

    def then_more(txn: Any) -> int:
        return int(txn.append_journal_many([("put", bucket, "more", "null", b"{}")] * 2))

    results = store._writer.submit_many([half_done, real, then_more])
    assert isinstance(results[0], RuntimeError)
    assert results[1:] == [before + 1, before + 3]
    assert [e.key for e in store.read_journal(before, 10)] == ["real", "more", "more"]
    assert store.last_seq() == before + 3


def test_the_writer_keeps_the_wal_small(
    db_path: Path, store: SqliteMetadataStore, bucket: str
) -> None:
    """SQLite's automatic checkpoint is off on the writer (it would run inside COMMIT, while
    other processes wait for the writer turn); the writer checkpoints after its turn
    instead. 400 commits of ~40 KiB each would grow the WAL past 16 MiB without it."""
    for i in range(400):
        store.put_version(version(bucket, f"k{i}", pad="x" * 20_000))
    wal = Path(f"{db_path}-wal")
    assert wal.exists() and wal.stat().st_size < 4 * 1024 * 1024, wal.stat().st_size
    assert len(store.list_latest(bucket, limit=1000)) == 400
