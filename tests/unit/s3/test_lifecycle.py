"""The lifecycle pass over a real SQLite metadata store, with a clock the test sets: what
each action selects (and nothing else), paging, concurrent changes, and the runner's
once-per-interval, one-process-at-a-time coordination."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crossbeat.metadata import Bucket, MetadataSettings, new_upload_id, new_version_id
from crossbeat.metadata.sqlite import SqliteMetadataStore
from crossbeat.s3.lifecycle import LifecyclePass, LifecycleRunner
from crossbeat.s3.lifecycle_config import parse_lifecycle

DAY = 10.0  # a lifecycle day in these tests; timestamps are seconds since the epoch
T0 = 1_000_000_000.0  # a multiple of DAY: "midnight"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    s = SqliteMetadataStore(
        tmp_path / "metadata.sqlite",
        MetadataSettings(journal_retention_entries=None, journal_retention_seconds=None,
                         journal_trim_interval_seconds=None),
    )
    yield s
    s.close()


def make_bucket(store: SqliteMetadataStore, rules: str, versioning: str = "", name: str = "bkt") -> str:
    store.create_bucket(Bucket(name, "owner", "default", iso(T0), versioning=versioning))
    config = parse_lifecycle(f"<LifecycleConfiguration>{rules}</LifecycleConfiguration>")
    store.update_bucket(name, lifecycle=config)
    return name


def rule(actions: str, flt: str = "<Filter/>", rule_id: str = "r", status: str = "Enabled") -> str:
    return f"<Rule><ID>{rule_id}</ID>{flt}<Status>{status}</Status>{actions}</Rule>"


def put(store: SqliteMetadataStore, bucket: str, key: str, at: float, *, versioned: bool = True,
        marker: bool = False, size: int = 1, tags: dict[str, str] | None = None) -> dict[str, Any]:
    sort_key = new_version_id()
    meta = {
        "bucket": bucket, "key": key, "versionId": sort_key if versioned else "null", "sortKey": sort_key,
        "isDeleteMarker": marker, "size": 0 if marker else size, "etag": "e", "lastModified": iso(at),
        "tags": tags or {},
        "location": [] if marker else [{"location": "default", "dataKey": f"{key}/{sort_key}"}],
    }
    store.put_version(meta)
    return meta


class Pass:
    """Runs passes at a chosen time and records what they freed."""

    def __init__(self, store: SqliteMetadataStore, page: int = 1000) -> None:
        self.store = store
        self.page = page
        self.freed: list[str] = []

    def free(self, metas: list[dict[str, Any]]) -> None:
        self.freed += [loc["dataKey"] for m in metas for loc in m.get("location") or []]

    def run(self, at: float) -> LifecyclePass:
        lifecycle = LifecyclePass(self.store, self.free, day_seconds=DAY, now=lambda: at, page=self.page)
        assert lifecycle.run()
        return lifecycle


def versions(store: SqliteMetadataStore, bucket: str) -> list[tuple[str, bool, str]]:
    return [(m["key"], m["isDeleteMarker"], m["versionId"]) for m in store.list_versions(bucket)]


def test_unversioned_expiration_deletes_what_the_rule_selects_and_frees_its_data(
    store: SqliteMetadataStore,
) -> None:
    b = make_bucket(store, rule("<Expiration><Days>2</Days></Expiration>", "<Filter><Prefix>logs/</Prefix></Filter>"))
    old = put(store, b, "logs/old", T0 + 1, versioned=False)
    put(store, b, "logs/new", T0 + 15, versioned=False)
    put(store, b, "data/old", T0 + 1, versioned=False)
    runner = Pass(store)
    # logs/old: T0+1 + 2 days = T0+21 -> next midnight T0+30
    assert runner.run(T0 + 29.9).stats.total() == 0
    assert runner.run(T0 + 30).stats.expired == 1
    assert [k for k, _, _ in versions(store, b)] == ["data/old", "logs/new"]
    assert runner.freed == [old["location"][0]["dataKey"]]
    seq = store.last_seq()
    entry = store.read_journal(seq - 1, 1)[0]
    assert (entry.op, entry.key, entry.versionId) == ("del", "logs/old", "null")
    # idempotent: a second pass at the same moment changes nothing
    assert runner.run(T0 + 30).stats.total() == 0
    assert store.last_seq() == seq


@pytest.mark.parametrize(("versioning", "marker_id_is_null"), [("Enabled", False), ("Suspended", True)])
def test_versioned_expiration_adds_a_delete_marker(
    store: SqliteMetadataStore, versioning: str, marker_id_is_null: bool
) -> None:
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"), versioning)
    old = put(store, b, "k", T0 + 1, versioned=not marker_id_is_null)
    runner = Pass(store)
    assert runner.run(T0 + 20).stats.expired == 1
    latest = store.get_version(b, "k", None)
    assert latest is not None and latest["isDeleteMarker"] and latest["replicationInfo"] is None
    if marker_id_is_null:  # suspended: the null version is replaced by the null marker
        assert latest["versionId"] == "null"
        assert versions(store, b) == [("k", True, "null")]
        assert runner.freed == [old["location"][0]["dataKey"]]
    else:
        assert versions(store, b) == [("k", True, latest["versionId"]), ("k", False, old["versionId"])]
        assert runner.freed == []
    # nothing more to do: the marker (written now, by the wall clock) is young
    assert runner.run(T0 + 20).stats.total() == 0


def test_noncurrent_expiration_keeps_the_newer_noncurrent_versions_across_pages(
    store: SqliteMetadataStore,
) -> None:
    b = make_bucket(store, rule(
        "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
        "<NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
        "<Filter><Prefix>a</Prefix></Filter>"), "Enabled")
    a = [put(store, b, "a", T0 + i) for i in range(1, 7)]  # a[5] current, a[4..0] noncurrent
    z = [put(store, b, "z", T0 + i) for i in range(1, 4)]  # another prefix: untouched
    young = [put(store, b, "ab", T0 + 100 + i) for i in range(1, 4)]  # noncurrent too recently
    runner = Pass(store, page=2)  # pages end inside every key: the walk must not skip any
    stats = runner.run(T0 + 25).stats
    assert stats.noncurrent == 3
    left = versions(store, b)
    assert [v for k, _, v in left if k == "a"] == [m["versionId"] for m in reversed(a[3:])]
    assert [v for k, _, v in left if k == "z"] == [m["versionId"] for m in reversed(z)]
    assert [v for k, _, v in left if k == "ab"] == [m["versionId"] for m in reversed(young)]
    assert sorted(runner.freed) == sorted(m["location"][0]["dataKey"] for m in a[:3])


def test_noncurrent_days_count_from_when_the_version_became_noncurrent(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule(
        "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration>"), "Enabled")
    put(store, b, "k", T0 + 1)  # created long ago ...
    put(store, b, "k", T0 + 51)  # ... but noncurrent only since T0+51: expires at T0+70
    runner = Pass(store)
    assert runner.run(T0 + 69).stats.noncurrent == 0
    assert runner.run(T0 + 70).stats.noncurrent == 1


def test_only_a_delete_marker_left_alone_is_removed(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule("<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>"),
                    "Enabled")
    put(store, b, "alone", T0 + 1, marker=True)
    kept = put(store, b, "covered", T0 + 1)
    marker = put(store, b, "covered", T0 + 2, marker=True)
    put(store, b, "live", T0 + 1)
    assert Pass(store).run(T0 + 5).stats.markers == 1
    assert versions(store, b) == [
        ("covered", True, marker["versionId"]), ("covered", False, kept["versionId"]),
        ("live", False, store.get_version(b, "live", None)["versionId"]),  # type: ignore[index]
    ]


def test_expiration_days_also_remove_old_lone_delete_markers(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule("<Expiration><Days>3</Days></Expiration>"), "Enabled")
    put(store, b, "m", T0 + 1, marker=True)
    assert Pass(store).run(T0 + 39).stats.markers == 0
    assert Pass(store).run(T0 + 40).stats.markers == 1
    assert versions(store, b) == []


def test_tag_and_size_filters_select_exactly(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule(
        "<Expiration><Days>1</Days></Expiration>",
        "<Filter><And><Tag><Key>t</Key><Value>x</Value></Tag>"
        "<ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></And></Filter>"))
    put(store, b, "hit", T0 + 1, versioned=False, size=11, tags={"t": "x"})
    put(store, b, "small", T0 + 1, versioned=False, size=10, tags={"t": "x"})
    put(store, b, "untagged", T0 + 1, versioned=False, size=11)
    put(store, b, "other-tag", T0 + 1, versioned=False, size=11, tags={"t": "y"})
    assert Pass(store).run(T0 + 100).stats.expired == 1
    assert [k for k, _, _ in versions(store, b)] == ["other-tag", "small", "untagged"]


def test_disabled_rules_and_buckets_without_rules_are_left_alone(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>", status="Disabled"))
    put(store, b, "k", T0 + 1, versioned=False)
    store.create_bucket(Bucket("plain", "owner", "default", iso(T0)))
    put(store, "plain", "k", T0 + 1, versioned=False)
    assert Pass(store).run(T0 + 1000).stats.total() == 0
    assert versions(store, b) and versions(store, "plain")


def test_a_version_rewritten_during_the_pass_is_not_expired(store: SqliteMetadataStore) -> None:
    """The decision is checked again in the store's transaction: an object overwritten
    after the walk read it (same null version id, new revision) stays."""
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"))
    put(store, b, "k", T0 + 1, versioned=False)
    rewritten: list[dict[str, Any]] = []

    def now() -> float:
        if not rewritten:  # between the listing and the delete
            rewritten.append(put(store, b, "k", T0 + 1, versioned=False, size=7))
        return T0 + 100

    lifecycle = LifecyclePass(store, lambda metas: None, day_seconds=DAY, now=now)
    assert lifecycle.run()
    assert lifecycle.stats.expired == 0 and lifecycle.stats.skipped == 1
    assert store.get_version(b, "k", None)["size"] == 7  # type: ignore[index]


def between_listing_and_change(change: Any) -> Any:
    """A clock for the pass that runs `change()` once, the first time the pass asks the time
    (after its walk read a version, before it acts on it)."""
    done: list[bool] = []

    def now() -> float:
        if not done:
            done.append(True)
            change()
        return T0 + 100

    return now


def run_racing(store: SqliteMetadataStore, change: Any) -> tuple[LifecyclePass, list[str]]:
    freed: list[str] = []
    lifecycle = LifecyclePass(store, lambda metas: freed.extend(loc["dataKey"] for m in metas for loc in m["location"]),
                              day_seconds=DAY, now=between_listing_and_change(change))
    assert lifecycle.run()
    return lifecycle, freed


@pytest.mark.parametrize("versioning", ["", "Suspended"])
def test_an_object_deleted_and_written_again_during_the_pass_stays(store: SqliteMetadataStore, versioning: str) -> None:
    """Deleted and written again (untagged) between the walk and the change: the same
    'null' id at revision 1 again, but another object, which the rule does not select. The
    pass removed it (all 50 in the probe, 100 of 100 in a suspended bucket)."""
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>",
                                "<Filter><Tag><Key>exp</Key><Value>yes</Value></Tag></Filter>"), versioning)
    put(store, b, "k", T0 + 1, versioned=False, tags={"exp": "yes"})
    again: list[dict[str, Any]] = []

    def recreate() -> None:
        store.delete_version(b, "k", "null")
        again.append(put(store, b, "k", T0 + 99, versioned=False, size=7))

    lifecycle, freed = run_racing(store, recreate)
    assert lifecycle.stats.expired == 0 and freed == []
    current = store.get_version(b, "k", None)
    assert current is not None and current["sortKey"] == again[0]["sortKey"] and not current["isDeleteMarker"]


def test_a_version_restored_during_the_pass_is_not_removed_as_noncurrent(store: SqliteMetadataStore) -> None:
    """Its delete marker deleted (S3's way to undelete) between the walk and the change:
    the version is current again. The pass removed it as noncurrent (50 of 50)."""
    b = make_bucket(store, rule("<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
                                "</NoncurrentVersionExpiration>"), "Enabled")
    kept = put(store, b, "k", T0 + 1)
    marker = put(store, b, "k", T0 + 2, marker=True)
    lifecycle, freed = run_racing(store, lambda: store.delete_version(b, "k", marker["versionId"]))
    assert lifecycle.stats.noncurrent == 0 and freed == []
    assert store.get_version(b, "k", None)["versionId"] == kept["versionId"]  # type: ignore[index]


def test_versioning_enabled_during_the_pass_keeps_the_null_version(store: SqliteMetadataStore) -> None:
    """Versioning enabled and a version written between the walk and the change: the null
    version is noncurrent, which an Expiration rule does not remove (it was deleted for
    good, as in a bucket still unversioned)."""
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"))
    null = put(store, b, "k", T0 + 1, versioned=False)

    def enable() -> None:
        store.update_bucket(b, versioning="Enabled")
        put(store, b, "k", T0 + 99)

    lifecycle, freed = run_racing(store, enable)
    assert freed == [] and null["versionId"] in [v for _, _, v in versions(store, b)]


def test_a_bucket_made_again_during_the_pass_is_not_walked_with_the_old_rules(store: SqliteMetadataStore) -> None:
    """Deleted and created again (with no lifecycle configuration) while the pass walked it:
    the pass went on with the old bucket's rules and listing and removed the new one's
    object."""
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"))
    put(store, b, "k", T0 + 1, versioned=False)
    put(store, b, "l", T0 + 1, versioned=False)

    def remake() -> None:
        for key in ("k", "l"):
            store.delete_version(b, key, "null")
        store.delete_bucket(b)
        store.create_bucket(Bucket(b, "other", "default", iso(T0 + 50)))
        put(store, b, "k", T0 + 1, versioned=False)  # old enough for the old rule
        put(store, b, "l", T0 + 1, versioned=False)

    lifecycle, freed = run_racing(store, remake)
    assert freed == [] and [k for k, _, _ in versions(store, b)] == ["k", "l"]


def test_a_bucket_deleted_during_the_pass_ends_its_walk_not_the_pass(store: SqliteMetadataStore) -> None:
    """NoSuchBucket from the change ended the whole pass (with a traceback): buckets after
    it waited an interval (an hour by default)."""
    gone = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"), "Enabled", name="gone")
    put(store, gone, "k", T0 + 1)
    later = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"), name="later")
    put(store, later, "k", T0 + 1, versioned=False)

    def drop() -> None:
        store.delete_version(gone, "k", store.get_version(gone, "k", None)["versionId"])  # type: ignore[index]
        store.delete_bucket(gone)

    run_racing(store, drop)
    assert versions(store, later) == []


def test_incomplete_uploads_are_aborted_after_days_after_initiation(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule(
        "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
        "</AbortIncompleteMultipartUpload>", "<Filter><Prefix>tmp/</Prefix></Filter>"))
    ids = {}
    for key, at in (("tmp/a", T0 + 1), ("tmp/b", T0 + 1), ("tmp/young", T0 + 25), ("keep/a", T0 + 1)):
        ids[key] = new_upload_id()
        store.create_upload({"uploadId": ids[key], "bucket": b, "key": key, "initiated": iso(at), "meta": {}})
    store.put_part(ids["tmp/a"], {"partNumber": 1, "etag": "e", "size": 1,
                                  "location": [{"location": "default", "dataKey": "part-1"}]})
    runner = Pass(store, page=1)
    assert runner.run(T0 + 20).stats.aborted == 2
    assert [u["key"] for u in store.list_uploads(b)] == ["keep/a", "tmp/young"]
    assert runner.freed == ["part-1"]


# -- the runner -----------------------------------------------------------------------------


def _gateway(store: SqliteMetadataStore, data_dir: Path, interval: float) -> Any:
    settings = SimpleNamespace(data_dir=data_dir, lifecycle_interval_seconds=interval, lifecycle_day_seconds=DAY)
    return SimpleNamespace(settings=settings, store=store, free_now=lambda metas: None, closing=False)


def test_the_runner_runs_once_per_interval_and_not_while_another_process_holds_the_lock(
    store: SqliteMetadataStore, tmp_path: Path
) -> None:
    gw = _gateway(store, tmp_path, interval=3600)
    first, second = LifecycleRunner(gw), LifecycleRunner(gw)
    assert first.run_if_due() is not None
    assert second.run_if_due() is None  # the pass that just ran covers this interval
    state_started = first._read_state()["started"]
    first._write_state({"started": state_started - 3600, "finished": True, "bucket": ""})
    fd = os.open(first.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process running a pass
        assert second.run_if_due() is None
    finally:
        os.close(fd)
    assert second.run_if_due() is not None


def test_an_unfinished_pass_resumes_at_its_bucket(store: SqliteMetadataStore, tmp_path: Path) -> None:
    for name in ("a-bucket", "b-bucket"):
        make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"), name=name)
        put(store, name, "k", 0.0, versioned=False)
    runner = LifecycleRunner(_gateway(store, tmp_path, interval=3600))
    runner._write_state({"started": time.time(), "finished": False, "bucket": "b-bucket"})
    stats = runner.run_if_due()
    assert stats is not None and stats.expired == 1
    assert versions(store, "a-bucket") and not versions(store, "b-bucket")
    assert runner._read_state()["finished"] is True


def test_a_stopped_pass_says_so_and_the_next_one_finishes_the_work(store: SqliteMetadataStore) -> None:
    b = make_bucket(store, rule("<Expiration><Days>1</Days></Expiration>"))
    for key in ("a", "b", "c"):
        put(store, b, key, T0 + 1, versioned=False)
    calls: list[int] = []

    def stopping() -> bool:  # stop once the walk has reached its second version
        calls.append(1)
        return len(calls) > 2

    first = LifecyclePass(store, lambda metas: None, day_seconds=DAY, now=lambda: T0 + 100, stopping=stopping)
    assert first.run() is False
    assert 0 < first.stats.expired < 3
    assert Pass(store).run(T0 + 100).stats.expired == 3 - first.stats.expired
    assert versions(store, b) == []


@pytest.mark.parametrize("saved", [
    '{"started": "x", "finished": true, "bucket": ""}',
    '{"started": null, "finished": true, "bucket": ""}',
    '{"started": 1, "finished": "no", "bucket": ""}',
    '[1, 2]',
    'not json',
    '{"started": 99999999999, "finished": true, "bucket": ""}',  # in the future
])
def test_a_damaged_state_file_makes_a_pass_due(
    store: SqliteMetadataStore, tmp_path: Path, saved: str
) -> None:
    """A state of the wrong shape raised at every check (no pass ever ran again), and a start
    in the future put lifecycle off until then."""
    runner = LifecycleRunner(_gateway(store, tmp_path, interval=3600))
    runner.state_path.parent.mkdir(parents=True, exist_ok=True)
    runner.state_path.write_text(saved)
    assert runner.run_if_due() is not None
    assert runner._read_state()["finished"] is True
