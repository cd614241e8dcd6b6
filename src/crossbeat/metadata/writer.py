"""Group commit: one thread owns the SQLite write connection and commits batches.

Callers submit an operation (a function of the open transaction) and block until the batch
that carried it is durable. The writer takes everything queued (up to `max_batch`), runs each
operation inside its own SAVEPOINT, so a failing operation rolls back only itself and its
caller gets the exception, then COMMITs once: with `synchronous=FULL` that is one fsync of
the WAL shared by every operation of the batch. While it fsyncs, new operations queue up and
form the next batch, so batching grows with load without any artificial delay.

Journal seqs are assigned here, in the one thread that commits, so they are dense and in
commit order: see `WriteTxn.append_journal`.

Several processes (gateway workers) may write the same file. SQLite lets one write
transaction at a time in and refuses the others (SQLITE_BUSY) without telling them when to
try again; with `lock_path`, the writers of all processes take turns on a `flock` first,
which wakes the next one exactly when the current one has committed, and the next one takes
into its batch everything that queued while it waited.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from crossbeat.metadata.errors import StoreClosed, StoreUnavailable

T = TypeVar("T")
# Batches between WAL checkpoints: SQLite's automatic checkpoint comes every 1000 pages,
# and a group of PUTs writes some 20-40.
CHECKPOINT_EVERY = 32
# An SQL expression (and its parameters) giving the newest committed journal seq.
SeqBase = tuple[str, tuple[Any, ...]]
log = logging.getLogger(__name__)


class WriteTxn:
    """The open write transaction an operation runs in (valid only during the call)."""

    def __init__(self, conn: sqlite3.Connection, seq_base: SeqBase, ts: str) -> None:
        self.conn = conn
        self._seq_base = seq_base
        # seq of the newest journal entry in this transaction so far; None until an entry
        # is appended or `last_seq` is asked for (appends number their entries in SQL,
        # which saves the statement that would read it: each statement is a GIL hand-off
        # with the event loop)
        self._last_seq: int | None = None
        # One timestamp per batch: its entries become visible together, and reading the
        # clock once per batch instead of per entry keeps the writer thread lean.
        self.ts = ts

    @property
    def last_seq(self) -> int:
        """The newest seq in the store as this transaction sees it (its own entries too)."""
        if self._last_seq is None:
            sql, params = self._seq_base
            self._last_seq = int(self.conn.execute(f"SELECT {sql}", params).fetchone()[0])
        return self._last_seq

    @property
    def seq_known(self) -> bool:
        """Whether `last_seq` is known without a statement: entries were appended (and not
        rolled back), or it was read. Until then the transaction has appended nothing."""
        return self._last_seq is not None

    def append_journal(
        self, op: str, bucket: str, key: str, version_id: str | None, value: bytes | None
    ) -> int:
        """Append one journal entry (value is JSON bytes) and return its seq.

        Only the writer thread runs transactions and it runs them one after another, so
        the newest seq the transaction sees, + 1, is the next seq in commit order; entries
        a savepoint rolls back give their seqs back (and `savepoint` restores `last_seq`),
        keeping seqs dense.
        """
        return self.append_journal_many([(op, bucket, key, version_id, value)])

    def append_journal_many(
        self, entries: list[tuple[str, str, str, str | None, bytes | None]]
    ) -> int:
        """`append_journal` for each (op, bucket, key, versionId, value), in order, in one
        statement; returns the seq of the last."""
        if not entries:
            return self.last_seq
        # Numbered after the newest seq as this transaction sees it (its own entries too,
        # less any a savepoint rolled back), read by the same statement rather than by one
        # of its own. The scalar subquery is evaluated once, before
        # any row goes in (SQLite stages an INSERT … SELECT that reads its own table), and
        # `seq` is the rowid, so the cursor's lastrowid is the seq of the last entry.
        sql, base_params = self._seq_base
        params: list[object] = [*base_params, self.ts]
        for i, (op, bucket, key, version_id, value) in enumerate(entries, 1):
            params += (i, op, bucket, key, version_id, value)
        cursor = self.conn.execute(
            f"INSERT INTO journal(seq, op, bucket, key, version_id, value, ts) "
            f"SELECT ({sql}) + x.column1, x.column2, x.column3, x.column4, x.column5, "
            f"x.column6, ? FROM (VALUES "
            + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(entries))
            + ") AS x ORDER BY x.column1",
            params,
        )
        assert cursor.lastrowid is not None
        self._last_seq = cursor.lastrowid
        return self._last_seq

    @contextlib.contextmanager
    def savepoint(self, name: str) -> Iterator[None]:
        """Run the block in SAVEPOINT `name`: if it raises, everything it wrote is rolled
        back (its journal seqs too, keeping seqs dense) and the exception goes on."""
        self.conn.execute(f"SAVEPOINT {name}")
        seq = self._last_seq
        try:
            yield
        except BaseException:
            self.conn.execute(f"ROLLBACK TO {name}")
            self._last_seq = seq
            self.conn.execute(f"RELEASE {name}")
            raise
        self.conn.execute(f"RELEASE {name}")


@dataclass
class _Op:
    fn: Callable[[WriteTxn], Any]
    future: Future[Any] | None = None
    # instead of a future: called on the writer thread once the batch is durable (or
    # failed) with (True, result) or (False, exception); it must be quick and not raise
    done: Callable[[bool, Any], None] | None = None


@dataclass
class WriterStats:
    commits: int = 0  # transactions committed (fsyncs)
    operations: int = 0  # operations they carried (succeeded or rolled back)
    busy_retries: int = 0  # BEGINs refused because another connection was writing


class GroupCommitWriter:
    """Owns `conn` (opened for use by the writer thread) and commits queued operations.

    `seq_base` is evaluated inside each batch's transaction to number its journal entries
    (so another writer process on the same file cannot make seqs collide: BEGIN IMMEDIATE
    excludes it). `on_commit(last_seq)` runs after every commit that appended journal
    entries, before callers are released.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        seq_base: SeqBase,
        now: Callable[[], str],
        on_commit: Callable[[int], None],
        max_batch: int,
        busy_timeout_s: float = 10.0,
        lock_path: str | None = None,
        db_path: str | None = None,
    ) -> None:
        self._conn = conn
        # the file the connection writes: if the path comes to name another file (deleted,
        # or a backup restored over it), commits would go to an unlinked file and be lost
        self._db_path = db_path
        self._db_identity = None if db_path is None else _identity(db_path)
        self._lock_fd = (
            None if lock_path is None
            else os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        )
        # The write lock is taken by polling (below), not by SQLite's busy handler, whose
        # back-off sleeps grow to 100 ms: with several gateway processes on one file that
        # turns every collision into a long stall.
        self._busy_timeout_s = busy_timeout_s
        conn.execute("PRAGMA busy_timeout = 0")
        # The WAL is checkpointed by this thread after its turn (see `_loop`), not by
        # SQLite's automatic checkpoint inside COMMIT, which would copy pages and fsync the
        # database file while the other processes wait for the turn.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._batches_since_checkpoint = 0
        self._seq_base = seq_base
        self._now = now
        self._on_commit = on_commit
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._loop, name="metadata-writer", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run `fn` in a write transaction; return its result once the commit is durable."""
        if threading.current_thread() is self._thread:
            # An operation (or a precondition) calling back into the store would wait for a
            # batch that can only run after the current one: a deadlock. Refuse it loudly.
            raise RuntimeError("metadata store called from inside a write operation")
        future: Future[T] = Future()
        with self._close_lock:
            if self._closed:
                raise StoreClosed("metadata store is closed")
            self._queue.put(_Op(fn, future=future))
        return future.result()

    def submit_nowait(self, fn: Callable[[WriteTxn], T], done: Callable[[bool, Any], None]) -> None:
        """Queue `fn` like `submit`, without waiting: `done(ok, result_or_exception)` runs on
        the writer thread once its batch is durable (or has failed). `done` must be quick
        (every commit behind it waits) and must not raise. StoreClosed if closed."""
        with self._close_lock:
            if self._closed:
                raise StoreClosed("metadata store is closed")
            self._queue.put(_Op(fn, done=done))

    def submit_many(self, fns: Sequence[Callable[[WriteTxn], T]]) -> list[T | BaseException]:
        """Run each of `fns` as its own operation, all queued at once so they share as few
        transactions (fsyncs) as `max_batch` allows; return each one's result or exception,
        in order, once every commit is durable. One operation failing changes nothing of
        the others (each runs in its own savepoint)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("metadata store called from inside a write operation")
        futures: list[Future[T]] = [Future() for _ in fns]
        with self._close_lock:
            if self._closed:
                raise StoreClosed("metadata store is closed")
            for fn, future in zip(fns, futures, strict=True):
                self._queue.put(_Op(fn, future=future))
        out: list[T | BaseException] = []
        for future in futures:
            exc = future.exception()
            out.append(exc if exc is not None else future.result())
        return out

    def pending(self) -> int:
        """Operations queued and not yet taken into a batch (approximate, for tests/metrics)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Let queued operations finish, stop the thread, close the connection."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join()
        self._conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            with self._turn():
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        op = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if op is None:
                        stopping = True
                        break
                    batch.append(op)
                committed, outcomes = self._run_batch(batch)
            # Callers are told after the turn is given up: another process's batch, waiting
            # for it, need not also wait for this one's wake-ups and callbacks.
            if committed is not None:
                self._on_commit(committed)
            for op, ok, value in outcomes:
                _deliver(op, ok, value)
            self._batches_since_checkpoint += 1
            if self._batches_since_checkpoint >= CHECKPOINT_EVERY:
                self._checkpoint()

    def _checkpoint(self) -> None:
        """Copy the WAL back into the database (PASSIVE: readers and writers go on; what a
        reader still needs is left for a later checkpoint), keeping the WAL small."""
        self._batches_since_checkpoint = 0
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:  # e.g. busy: the next one copies what this one did not
            log.debug("metadata writer: WAL checkpoint failed", exc_info=True)

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This process's turn to write, among the processes sharing `lock_path`."""
        if self._lock_fd is None:
            yield
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # lets go of the GIL while it waits
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _check_file(self) -> None:
        """StoreUnavailable if the database path no longer names the file this writer has
        open: every later commit would be acknowledged and lost."""
        if self._db_path is None:
            return
        try:
            now = _identity(self._db_path)
        except FileNotFoundError:
            now = None
        if now != self._db_identity:
            raise StoreUnavailable(
                f"the metadata database {self._db_path} was deleted or replaced while in use: "
                "refusing writes that would be lost; restart the gateway"
            )

    def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, retrying briefly while another connection holds the write lock
        (one that does not take turns on `lock_path`: another tool, or a reader's checkpoint)."""
        deadline = time.monotonic() + self._busy_timeout_s
        delay = 0.0002
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
                self.stats.busy_retries += 1
                time.sleep(delay)
                delay = min(delay * 1.5, 0.002)

    def _run_batch(self, batch: list[_Op]) -> tuple[int | None, list[tuple[_Op, bool, Any]]]:
        """Run and commit `batch`; return the newest seq it committed (None: no entries) and
        what to deliver to each operation's caller, for `_loop` to hand out."""
        outcomes: list[tuple[bool, Any]] = []
        live: list[_Op] = []  # the operations that run (not cancelled)
        conn = self._conn
        try:
            self._check_file()
            self._begin(conn)
            txn = WriteTxn(conn, self._seq_base, self._now())
            for op in batch:
                if op.future is not None and not op.future.set_running_or_notify_cancel():
                    continue
                live.append(op)
                try:
                    # Alone in its batch, an operation needs no savepoint: if it fails, the
                    # whole transaction is rolled back below (two statements fewer, and
                    # under load most batches carry one group of PUTs).
                    with txn.savepoint("op") if len(batch) > 1 else contextlib.nullcontext():
                        result = op.fn(txn)
                except BaseException as exc:  # the caller gets it; the batch goes on
                    outcomes.append((False, exc))
                else:
                    outcomes.append((True, result))
            # the one operation failed: nothing to commit (its journal seqs are not used)
            rolled_back = len(batch) == 1 and bool(outcomes) and not outcomes[0][0]
            conn.execute("ROLLBACK" if rolled_back else "COMMIT")
        except BaseException as exc:
            # BEGIN or COMMIT failed (disk full, I/O error…): nothing of the batch is durable.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            return None, [
                (op, False, exc) for op in batch if op.future is None or op.future.running()
            ]
        committed = None
        if not rolled_back:
            self.stats.commits += 1
            self.stats.operations += len(batch)
            if txn.seq_known:  # else nothing was appended: no reader to wake
                committed = txn.last_seq
        return committed, [(op, ok, value) for op, (ok, value) in zip(live, outcomes, strict=True)]


def _deliver(op: _Op, ok: bool, value: Any) -> None:
    if op.done is not None:
        try:
            op.done(ok, value)
        except Exception:  # a broken callback must not stop the writer thread
            log.exception("metadata writer: a completion callback failed")
    elif op.future is not None and op.future.running():
        if ok:
            op.future.set_result(value)
        else:
            op.future.set_exception(value)


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
