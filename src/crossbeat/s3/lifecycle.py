"""The lifecycle pass: applies the buckets' lifecycle rules (s3/lifecycle_config.py).

Per bucket with an enabled rule, in one walk over its versions (key order, newest first):
- a current version a rule's Expiration (Days, Date) has reached is expired as a DELETE
  without a version id would: removed in an unversioned bucket, hidden behind a new delete
  marker in a versioned or suspended one (the null version is then replaced, as S3 does);
- a noncurrent version is removed once NoncurrentDays have passed since it became
  noncurrent (when its successor was written) and at least NewerNoncurrentVersions newer
  noncurrent versions are kept;
- a delete marker that is the only version left of its key is removed under
  ExpiredObjectDeleteMarker, or once it is Expiration Days old;
then multipart uploads initiated DaysAfterInitiation ago are aborted.

Contracts:
- Every change is one ordinary metadata-store call (its own small transaction, journaled
  like a client's DELETE) guarded by a precondition checked inside that transaction: the
  version acted on must still be the one the walk read (same version id and revision; for
  expiring a current version, still the latest). A version written meanwhile is left alone.
  The data a change frees is deleted afterwards, as a DELETE does (the cleanup pass finds
  any left by a crash).
- Lifecycle delete markers carry no replicationInfo: AWS does not replicate lifecycle
  actions.
- Idempotent and resumable: a pass selects only from what is stored now, so rerunning one
  (after a crash, say) changes only what the rules select; the runner remembers the bucket
  a pass was in and a later pass starts again there.
- Paged: at most three pages of versions (`page` each) are held at a time.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossbeat.metadata import Bucket, MetadataStore
from crossbeat.metadata.errors import NoSuchBucket, NoSuchUpload, StoreClosed
from crossbeat.s3.errors import resource_error
from crossbeat.s3.lifecycle_config import (
    Config,
    current_expiry,
    days_after,
    epoch,
    has_enabled_rule,
    rule_matches,
)
from crossbeat.s3.objectmeta import delete_marker

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

log = logging.getLogger("crossbeat.lifecycle")
Meta = dict[str, Any]
PAGE = 1000


class _Changed(Exception):
    """The version changed since the walk read it: the rule's decision no longer holds."""


@dataclass
class PassStats:
    expired: int = 0  # current versions expired (removed or hidden behind a delete marker)
    noncurrent: int = 0  # noncurrent versions removed
    markers: int = 0  # expired object delete markers removed
    aborted: int = 0  # multipart uploads aborted
    skipped: int = 0  # selected, but changed before the change committed

    def total(self) -> int:
        return self.expired + self.noncurrent + self.markers + self.aborted


def _unchanged(seen: Meta, *, latest: bool) -> Callable[[Meta | None], None]:
    """A store precondition: the version handed to it is still `seen`, and is (`latest`)
    or is not the key's latest version.

    The sort key tells one write from another: a version deleted and written again under
    the same id ('null', revision 1 again) is another object, which the rule's decision
    was not about (a pass removed objects deleted and re-created while it ran). Whether it
    is the latest is what makes it current or noncurrent: a delete marker deleted to
    restore a version made it current again (a pass removed it as noncurrent)."""

    def check(current: Meta | None) -> None:
        if current is None or any(current.get(f) != seen.get(f) for f in ("versionId", "revision", "sortKey")):
            raise _Changed
        if bool(current.get("isLatest")) != latest:
            raise _Changed

    return check


class LifecyclePass:
    """One pass over every bucket. `free(metas)` deletes the data of removed versions and
    parts; `now()` is epoch seconds; `stopping()` ends the pass early (between changes)."""

    def __init__(
        self,
        store: MetadataStore,
        free: Callable[[list[Meta]], None],
        *,
        day_seconds: float,
        now: Callable[[], float] = time.time,
        stopping: Callable[[], bool] = lambda: False,
        page: int = PAGE,
    ) -> None:
        self.store = store
        self.free = free
        self.day_seconds = day_seconds
        self.now = now
        self.stopping = stopping
        self.page = page
        self.stats = PassStats()

    def run(self, start_bucket: str = "", on_bucket: Callable[[str], None] | None = None) -> bool:
        """Apply the rules to every bucket whose name is >= `start_bucket`, in name order;
        `on_bucket(name)` is called as each bucket with an enabled rule begins. False if
        stopped early."""
        for name in [b.name for b in self.store.list_buckets() if b.name >= start_bucket]:
            if self.stopping():
                return False
            bucket = self.store.get_bucket(name)
            if bucket is None or not has_enabled_rule(bucket.lifecycle):
                continue
            if on_bucket is not None:
                on_bucket(name)
            if not self._versions(bucket) or not self._uploads(name):
                return False
        return True

    # -- versions -------------------------------------------------------------------------

    def _listing(self, bucket: str) -> Iterator[tuple[Meta, Meta | None]]:
        """Each version with the one after it in listing order (None at the end).

        A page is fetched, from the last item of the page before, before any item of that
        page is acted on: the store starts a page after its marker version only while that
        version exists, and the pass may remove it."""
        page = self.store.list_versions(bucket, limit=self.page)
        previous: Meta | None = None
        while page:
            following: list[Meta] = []
            if len(page) >= self.page:
                following = self.store.list_versions(
                    bucket, key_marker=page[-1]["key"], version_marker=page[-1]["versionId"],
                    limit=self.page,
                )
            for item in page:
                if previous is not None:
                    yield previous, item
                previous = item
            page = following
        if previous is not None:
            yield previous, None

    def _versions(self, bucket: Bucket) -> bool:
        newer: Meta | None = None  # the previous version in the walk, if of the same key
        kept = 0  # noncurrent versions of the current key kept so far
        generation = self.store.buckets_generation()
        for item, following in self._listing(bucket.name):
            if self.stopping():
                return False
            if (now := self.store.buckets_generation()) != generation:
                # a bucket changed (its rules, its versioning; deleted, made again by
                # someone else): read it again before acting on anything more of it
                generation = now
                fresh = self.store.get_bucket(bucket.name)
                if fresh is None or fresh.created != bucket.created or not has_enabled_rule(fresh.lifecycle):
                    return True
                bucket = fresh
            if newer is not None and newer["key"] != item["key"]:
                newer, kept = None, 0
            has_older = following is not None and following["key"] == item["key"]
            try:
                if newer is None:
                    self._current(bucket, item, has_older)
                elif not self._noncurrent(bucket, item, newer, kept):
                    kept += 1
            except NoSuchBucket:  # deleted while the pass walked it: on to the next bucket
                return True
            except _Changed:
                self.stats.skipped += 1
                if newer is not None:
                    kept += 1  # still there: it counts among the newer versions kept
            newer = item
        return True

    def _current(self, bucket: Bucket, item: Meta, has_older: bool) -> None:
        config = bucket.lifecycle
        now = self.now()
        if not item.get("isDeleteMarker"):
            expiry = current_expiry(
                config, item["key"], item.get("tags"), int(item.get("size") or 0),
                item["lastModified"], self.day_seconds,
            )
            if expiry is not None and now >= expiry[0]:
                self._expire(bucket, item)
            return
        if not has_older and self._marker_expired(config, item, now):
            # A version written since the walk read the key would make the marker
            # noncurrent; removing it then hides nothing (the new version is the latest).
            removed = self.store.delete_version(
                bucket.name, item["key"], item["versionId"], precondition=_unchanged(item, latest=True)
            )
            if removed is not None:
                self.stats.markers += 1

    def _marker_expired(self, config: Config | None, marker: Meta, now: float) -> bool:
        for rule in (config or {}).get("rules", []):
            expiration = rule.get("expiration") or {}
            if not rule_matches(rule, marker["key"], {}, 0):
                continue
            if expiration.get("eodm"):
                return True
            days = expiration.get("days")
            if days and now >= days_after(epoch(marker["lastModified"]), days, self.day_seconds):
                return True
        return False

    def _expire(self, bucket: Bucket, item: Meta) -> None:
        """What DELETE without a version id does, if `item` is still the latest version."""
        key = item["key"]
        if not bucket.versioning:
            removed = self.store.delete_version(
                bucket.name, key, "null", precondition=_unchanged(item, latest=True))
            if removed is not None:
                self.stats.expired += 1
                self.free([removed])
            return
        marker = delete_marker(bucket, key)  # no replication info: AWS does not replicate lifecycle actions
        displaced = self.store.put_version(marker, precondition=_unchanged(item, latest=True))
        self.stats.expired += 1
        self.free(displaced)

    def _noncurrent(self, bucket: Bucket, item: Meta, newer: Meta, kept: int) -> bool:
        """Remove noncurrent `item` if a rule selects it; `newer` is the version written
        after it (it became noncurrent then), `kept` how many newer noncurrent versions
        remain. True if removed."""
        since = epoch(newer["lastModified"])
        now = self.now()
        size = int(item.get("size") or 0)
        for rule in (bucket.lifecycle or {}).get("rules", []):
            noncurrent = rule.get("noncurrent")
            if noncurrent is None or kept < (noncurrent.get("newer") or 0):
                continue
            if now < days_after(since, noncurrent["days"], self.day_seconds):
                continue
            if not rule_matches(rule, item["key"], item.get("tags"), size):
                continue
            removed = self.store.delete_version(
                bucket.name, item["key"], item["versionId"], precondition=_unchanged(item, latest=False)
            )
            if removed is None:
                return False
            self.stats.noncurrent += 1
            self.free([removed])
            return True
        return False

    # -- multipart uploads ----------------------------------------------------------------

    def _uploads(self, bucket: str) -> bool:
        current = self.store.get_bucket(bucket)
        rules = [
            rule for rule in ((current.lifecycle or {}).get("rules", []) if current else [])
            if rule.get("abortDays") is not None and rule.get("status") == "Enabled"
        ]
        if not rules:
            return True
        key_marker, upload_marker = "", ""
        while True:
            # the store pages uploads by (key, uploadId) > the markers, so aborting the
            # marker upload does not move the next page
            uploads = self.store.list_uploads(
                bucket, key_marker=key_marker, upload_id_marker=upload_marker, limit=self.page
            )
            for upload in uploads:
                if self.stopping():
                    return False
                self._upload(rules, upload)
            if len(uploads) < self.page:
                return True
            key_marker, upload_marker = uploads[-1]["key"], uploads[-1]["uploadId"]

    def _upload(self, rules: list[dict[str, Any]], upload: Meta) -> None:
        initiated = epoch(upload["initiated"])
        now = self.now()
        for rule in rules:
            if not rule_matches(rule, upload["key"], None, None):
                continue
            if now < days_after(initiated, rule["abortDays"], self.day_seconds):
                continue
            try:
                parts = self.store.abort_upload(upload["uploadId"])
            except NoSuchUpload:  # completed or aborted meanwhile
                return
            self.stats.aborted += 1
            self.free(parts)
            return


class LifecycleRunner:
    """Runs a lifecycle pass every `lifecycle_interval_seconds`, in one gateway process at a
    time, on its own thread.

    Every gateway process has a runner; a runner that wants to run takes `flock` on
    `{data_dir}/.lifecycle.lock` without waiting (another process holding it is running the
    pass) and, holding it, reads `{data_dir}/lifecycle-state.json` ({"started", "finished",
    "bucket"}): a pass is due when the last one started at least an interval ago, or did not
    finish (then it resumes at the bucket it was in). The lock is taken per process (the file
    is opened after the fork), so forked workers exclude each other.
    """

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.interval = gw.settings.lifecycle_interval_seconds
        data_dir = Path(gw.settings.data_dir)
        self.lock_path = data_dir / ".lifecycle.lock"
        self.state_path = data_dir / "lifecycle-state.json"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (nothing when the interval is 0)."""
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="s3-lifecycle", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask a running pass to end (after its current change) and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _stopping(self) -> bool:
        return self._stop.is_set() or self.gw.closing

    def _loop(self) -> None:
        # a check costs a non-blocking flock and a small file read: once a second at most
        failed_at: float | None = None
        while not self._stop.wait(min(self.interval, 1.0)):
            if failed_at is not None and time.monotonic() - failed_at < self.interval:
                continue  # a failure that could not be recorded (a full disk) waits too
            failed_at = None
            try:
                self.run_if_due()
            except StoreClosed:
                return
            except Exception as exc:  # noqa: BLE001 - keep the thread; the next interval retries
                failed_at = time.monotonic()
                if resource_error(exc) is not None:  # the machine's state, not a bug
                    log.warning("lifecycle pass failed: %s; next try in %ss", exc, self.interval)
                else:
                    log.exception("lifecycle pass failed")

    def run_if_due(self) -> PassStats | None:
        """Run a pass if one is due and no other process is running one; its stats, or
        None if none ran."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            return self._run_locked()
        finally:
            os.close(fd)  # releases the lock

    def _run_locked(self) -> PassStats | None:
        state = self._read_state()
        now = time.time()
        if state.get("finished", True):
            if now - float(state.get("started", 0)) < self.interval:
                return None
            state = {"started": now, "finished": False, "bucket": ""}
            self._write_state(state)

        def on_bucket(name: str) -> None:
            state["bucket"] = name
            self._write_state(state)

        lifecycle = LifecyclePass(
            self.gw.store, self.gw.free_now, day_seconds=self.gw.settings.lifecycle_day_seconds,
            stopping=self._stopping,
        )
        try:
            finished = lifecycle.run(str(state.get("bucket", "")), on_bucket)
        except StoreClosed:
            raise  # the gateway is stopping: the next start resumes this pass
        except Exception:
            # retried at the next interval, not at once: an error that repeats would
            # otherwise spin
            state["finished"] = True
            self._write_state(state)
            raise
        if finished:
            state["finished"] = True
            self._write_state(state)
        if lifecycle.stats.total():
            log.info("lifecycle pass: %s", lifecycle.stats)
        return lifecycle.stats

    def _read_state(self) -> dict[str, Any]:
        """The saved state, or {} (a pass is due) if it is missing or not one this runner
        writes: a damaged file must not stop lifecycle for good. A start in the future (a
        clock that stepped back, a copy from another machine) counts as no start."""
        try:
            saved = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("lifecycle state %s unreadable (%s): starting afresh", self.state_path, exc)
            return {}
        state: dict[str, Any] = saved if isinstance(saved, dict) else {}
        started, finished, bucket = state.get("started"), state.get("finished"), state.get("bucket")
        if not (isinstance(started, (int, float)) and not isinstance(started, bool)
                and isinstance(finished, bool) and isinstance(bucket, str)):
            log.warning("lifecycle state %s is not valid (%r): starting afresh", self.state_path, saved)
            return {}
        if started > time.time():
            log.warning("lifecycle state %s starts in the future: a pass is due", self.state_path)
            return {}
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        # atomic replace: a crash leaves the old state or the new one, never half of one
        tmp = self.state_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.state_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
