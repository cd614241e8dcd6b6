"""What a replication rule says about the destination, end to end against two real gateways
(no Spark, no broker: `ReplicationProcessor` and `StatusUpdater` over the internal routes).

- Replicas go to the bucket the rule's Destination Bucket names (replicationInfo
  `destination`), through every writer: the batch path, one by one (small and large
  versions), delete markers, a tag change, and an S3 (foreign) destination; a version
  without `destination` (written before it was recorded) goes to the source bucket's name.
- A destination bucket whose versioning is not Enabled (never enabled, Suspended) gets no
  replica: the versions go FAILED (S3's reason DstBucketUnversioned), and replicate once
  versioning is enabled and `replication retry` requeues them.
  The same holds for a foreign S3 destination.
- A site a rule names that the pipeline does not know goes FAILED, with the reason logged,
  instead of staying PENDING.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from crossbeat.extensions.replication.messages import ReplicationEntry, ReplicationOutcome
from crossbeat.extensions.replication.processor import ReplicationProcessor
from crossbeat.extensions.replication.settings import (
    Endpoint,
    ReplicationSettings,
    RetrySettings,
    SiteSettings,
)
from crossbeat.extensions.replication.status_updater import StatusUpdater
from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client, signed
from tests.support.procs import Service
from tests.support.replication import replication_rule as rule

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
LARGE = 2 * 1024 * 1024 + 3  # above the batch path's inline limit: data route + metadata create


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    root: Path = tmp_path_factory.mktemp("destination-rules")
    with running_gateway(root / "a") as a, running_gateway(root / "b") as b:
        yield a, b


def settings(
    a: Service, b: Service, sites: dict[str, SiteSettings] | None = None
) -> ReplicationSettings:
    return ReplicationSettings(
        access_key=ROOT_AK, secret_key=ROOT_SK,  # type: ignore[arg-type]
        source=Endpoint(endpoint=a.url), sites=sites or {"b": SiteSettings(endpoint=b.url)},
        retry=RetrySettings(max_attempts=2, max_seconds=2, backoff_min_s=0.05),
        unavailable_hold_s=0,
    )


def versioned(client: Any, *names: str) -> None:
    for name in names:
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def metadata(url: str, bucket: str, key: str, vid: str) -> dict[str, Any]:
    doc: dict[str, Any] = signed(
        "GET", f"{url}/_/crossbeat/metadata/{bucket}/{quote(key)}?versionId={vid}").json()
    return doc


def entries(client: Any, bucket: str) -> list[ReplicationEntry]:
    """One entry per source version, oldest first, naming the sites still PENDING (as the
    populator does)."""
    listed = client.list_object_versions(Bucket=bucket)
    out = []
    for v in listed.get("Versions", []) + listed.get("DeleteMarkers", []):
        out.append(ReplicationEntry(seq=0, bucket=bucket, key=v["Key"], versionId=v["VersionId"],
                                    isDeleteMarker="ETag" not in v, sites=("b",), ts=""))
    return sorted(out, key=lambda e: e.versionId)


def listing(client: Any, bucket: str) -> list[tuple[str, str, str, bool]]:
    listed = client.list_object_versions(Bucket=bucket)
    rows = [(v["Key"], v["VersionId"], v["ETag"], v["IsLatest"]) for v in listed.get("Versions", [])]
    rows += [(m["Key"], m["VersionId"], "DM", m["IsLatest"]) for m in listed.get("DeleteMarkers", [])]
    return sorted(rows)


def settle(rs: ReplicationSettings, outcomes: list[ReplicationOutcome]) -> None:
    StatusUpdater(rs).apply_batch(outcomes)


def test_replicas_go_to_the_bucket_the_rule_names(sites: tuple[Service, Service]) -> None:
    a, b = sites
    sa, sb = s3_client(a.url), s3_client(b.url)
    versioned(sa, "named-src")
    versioned(sb, "named-src", "named-dst")  # a same-named bucket at b must get nothing
    sa.put_bucket_replication(Bucket="named-src", ReplicationConfiguration=rule("named-dst"))
    small = sa.put_object(Bucket="named-src", Key="small", Body=b"s" * 100, Tagging="t=1")["VersionId"]
    sa.put_object(Bucket="named-src", Key="large", Body=b"L" * LARGE)
    sa.put_object(Bucket="named-src", Key="gone", Body=b"g")
    sa.delete_object(Bucket="named-src", Key="gone")
    assert metadata(a.url, "named-src", "small", small)["replicationInfo"]["destination"] == \
        "arn:aws:s3:::named-dst"

    rs = settings(a, b)
    processor = ReplicationProcessor(rs, "b")
    outcomes = processor.process_batch(entries(sa, "named-src"))
    assert {o.status for o in outcomes} == {"COMPLETED"}, [o.error for o in outcomes]
    settle(rs, outcomes)
    assert listing(sb, "named-dst") == listing(sa, "named-src")
    assert listing(sb, "named-src") == []
    assert sb.get_object(Bucket="named-dst", Key="large")["Body"].read() == b"L" * LARGE

    # a tag change (metadata only) replicates again, one by one this time, to the same bucket
    sa.put_object_tagging(Bucket="named-src", Key="small", VersionId=small,
                          Tagging={"TagSet": [{"Key": "t", "Value": "2"}]})
    [again] = [e for e in entries(sa, "named-src") if e.versionId == small]
    outcome = processor.process(again)
    assert outcome is not None and outcome.status == "COMPLETED", outcome
    assert sb.get_object_tagging(Bucket="named-dst", Key="small", VersionId=small)["TagSet"] == \
        [{"Key": "t", "Value": "2"}]
    assert listing(sb, "named-src") == []

    # a version written before `destination` was recorded: its source bucket's name, as before
    old = sa.put_object(Bucket="named-src", Key="old", Body=b"o")["VersionId"]
    md = metadata(a.url, "named-src", "old", old)
    info = {k: v for k, v in md["replicationInfo"].items() if k != "destination"}
    r = signed("PUT", f"{a.url}/_/crossbeat/metadata/named-src/old?versionId={old}",
               orjson.dumps({"metadata": dict(md, replicationInfo=info),
                             "expectedRevision": md["revision"]}))
    assert r.status_code == 200, r.text
    [legacy] = [e for e in entries(sa, "named-src") if e.versionId == old]
    [done] = processor.process_batch([legacy])
    assert done.status == "COMPLETED", done.error
    assert [v[:2] for v in listing(sb, "named-src")] == [("old", old)]


def test_an_s3_destination_writes_to_the_bucket_the_rule_names(sites: tuple[Service, Service]) -> None:
    a, b = sites
    sa, sb = s3_client(a.url), s3_client(b.url)
    versioned(sa, "s3-src")
    versioned(sb, "s3-src", "s3-dst")
    sa.put_bucket_replication(Bucket="s3-src", ReplicationConfiguration=rule("s3-dst"))
    sa.put_object(Bucket="s3-src", Key="k", Body=b"data")
    sa.delete_object(Bucket="s3-src", Key="k")

    rs = settings(a, b, {"b": SiteSettings(endpoint=b.url, type="s3")})
    outcomes = ReplicationProcessor(rs, "b").process_batch(entries(sa, "s3-src"))
    assert [o.status for o in outcomes] == ["COMPLETED", "COMPLETED"], [o.error for o in outcomes]
    listed = sb.list_object_versions(Bucket="s3-dst")
    assert len(listed.get("Versions", [])) == 1 and len(listed.get("DeleteMarkers", [])) == 1
    assert listing(sb, "s3-src") == []


def test_an_s3_destination_without_versioning_fails_and_deletes_nothing(sites: tuple[Service, Service]) -> None:
    """A foreign S3 destination bucket must have versioning Enabled too: there, a replicated
    delete marker would have deleted the object itself."""
    a, b = sites
    sa, sb = s3_client(a.url), s3_client(b.url)
    versioned(sa, "s3-plain-src")
    sb.create_bucket(Bucket="s3-plain-dst")
    sb.put_object(Bucket="s3-plain-dst", Key="k", Body=b"theirs")
    sa.put_bucket_replication(Bucket="s3-plain-src", ReplicationConfiguration=rule("s3-plain-dst"))
    sa.put_object(Bucket="s3-plain-src", Key="k", Body=b"data")
    sa.delete_object(Bucket="s3-plain-src", Key="k")

    rs = settings(a, b, {"b": SiteSettings(endpoint=b.url, type="s3")})
    processor = ReplicationProcessor(rs, "b")
    outcomes = processor.process_batch(entries(sa, "s3-plain-src"))
    assert [o.status for o in outcomes] == ["FAILED", "FAILED"]
    assert all("DstBucketUnversioned" in (o.error or "") for o in outcomes), [o.error for o in outcomes]
    assert {o.attempts for o in outcomes} == {1}
    assert sb.get_object(Bucket="s3-plain-dst", Key="k")["Body"].read() == b"theirs"

    # versioning enabled since: the same processor (no restart) replicates them
    sb.put_bucket_versioning(Bucket="s3-plain-dst", VersioningConfiguration={"Status": "Enabled"})
    outcomes = processor.process_batch(entries(sa, "s3-plain-src"))
    assert [o.status for o in outcomes] == ["COMPLETED", "COMPLETED"], [o.error for o in outcomes]
    listed = sb.list_object_versions(Bucket="s3-plain-dst")
    assert len(listed.get("Versions", [])) == 2 and len(listed.get("DeleteMarkers", [])) == 1


@pytest.mark.parametrize("state", ["never", "Suspended"])
def test_a_destination_without_versioning_fails_until_enabled_and_retried(
    sites: tuple[Service, Service], state: str
) -> None:
    a, b = sites
    sa, sb = s3_client(a.url), s3_client(b.url)
    name = f"unversioned-{state.lower()}"
    versioned(sa, name)
    sa.put_bucket_replication(Bucket=name, ReplicationConfiguration=rule(name))
    sb.create_bucket(Bucket=name)
    if state == "Suspended":
        sb.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        sb.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Suspended"})
    sa.put_object(Bucket=name, Key="small", Body=b"one")
    sa.put_object(Bucket=name, Key="small", Body=b"two")
    sa.put_object(Bucket=name, Key="large", Body=b"L" * LARGE)
    sa.put_object(Bucket=name, Key="single", Body=b"alone")
    sa.delete_object(Bucket=name, Key="large")

    rs = settings(a, b)
    processor = ReplicationProcessor(rs, "b")
    todo = entries(sa, name)
    single = [e for e in todo if e.key == "single"]
    # the batch routes (batchReplica; data + metadata create), and `replica` one by one
    outcomes = processor.process_batch([e for e in todo if e.key != "single"])
    outcomes += [o for o in map(processor.process, single) if o is not None]
    assert len(outcomes) == len(todo)
    assert {o.status for o in outcomes} == {"FAILED"}
    assert all("DstBucketUnversioned" in (o.error or "") for o in outcomes), [o.error for o in outcomes]
    assert sb.list_object_versions(Bucket=name).get("Versions") is None
    # non-retryable: the first attempt is the last
    assert {o.attempts for o in outcomes} == {1}
    settle(rs, outcomes)
    for key, vid, *_ in listing(sa, name):
        assert metadata(a.url, name, key, vid)["replicationInfo"]["status"] == "FAILED"

    sb.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    r = signed("POST", f"{a.url}/_/crossbeat/replication/retry", b'{"all": true}')
    assert r.json() == {"requeued": len(todo)}
    outcomes = processor.process_batch([e for e in todo if e.key != "single"])
    outcomes += [o for o in map(processor.process, single) if o is not None]
    assert {o.status for o in outcomes} == {"COMPLETED"}, [o.error for o in outcomes]
    settle(rs, outcomes)
    assert listing(sb, name) == listing(sa, name)
    for key, vid, *_ in listing(sa, name):
        assert metadata(a.url, name, key, vid)["replicationInfo"]["status"] == "COMPLETED"


def test_a_site_the_pipeline_does_not_know_fails_with_the_reason_logged(
    sites: tuple[Service, Service], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = sites
    sa, sb = s3_client(a.url), s3_client(b.url)
    versioned(sa, "unknown-site")
    versioned(sb, "unknown-site")
    # this gateway is not told the configured sites: it takes any name
    sa.put_bucket_replication(Bucket="unknown-site",
                              ReplicationConfiguration=rule("unknown-site", "b,STANDARD"))
    vid = sa.put_object(Bucket="unknown-site", Key="k", Body=b"x")["VersionId"]
    entry = ReplicationEntry(seq=0, bucket="unknown-site", key="k", versionId=vid,
                             isDeleteMarker=False, sites=("b", "STANDARD"), ts="")

    # with two configured sites, only the first in name order settles unknown ones
    rs = settings(a, b, {"b": SiteSettings(endpoint=b.url), "c": SiteSettings(endpoint=b.url)})
    assert [o.site for o in ReplicationProcessor(rs, "c").process_batch([entry])] == []
    with caplog.at_level(logging.ERROR, logger="crossbeat.extensions.replication.processor"):
        outcomes = ReplicationProcessor(rs, "b").process_batch([entry, entry])  # redelivered too
    by_site = {o.site: o for o in outcomes}
    assert sorted(by_site) == ["STANDARD", "b"] and len(outcomes) == 2
    assert by_site["b"].status == "COMPLETED"
    assert by_site["STANDARD"].status == "FAILED"
    assert "'STANDARD' is not configured" in (by_site["STANDARD"].error or "")
    assert any("STANDARD" in r.getMessage() and "not configured" in r.getMessage()
               for r in caplog.records)
    settle(rs, outcomes)
    info = metadata(a.url, "unknown-site", "k", vid)["replicationInfo"]
    assert info["status"] == "FAILED"
    assert {x["site"]: x["status"] for x in info["backends"]} == {"b": "COMPLETED", "STANDARD": "FAILED"}
    failed = signed("GET", f"{a.url}/_/crossbeat/replication/failed").json()["failed"]
    assert ("unknown-site", "k", vid) in [(f["bucket"], f["key"], f["versionId"]) for f in failed]


def test_a_rule_cannot_write_into_another_owners_bucket(sites: tuple[Service, Service]) -> None:
    """The pipeline writes with admin credentials, and a rule names its destination bucket
    freely: a replica into a bucket of another owner than the source bucket's is refused
    (DstBucketAccessDenied: FAILED), by every writer. Alice's rule naming root's bucket
    overwrote root's object there (found by an adversarial review)."""
    from tests.support.gateway import USER_AK, USER_SK

    a, b = sites
    owner_b = s3_client(b.url)
    versioned(owner_b, "payroll")
    owner_b.put_object(Bucket="payroll", Key="salaries.csv", Body=b"real data")
    alice_a = s3_client(a.url, USER_AK, USER_SK)
    versioned(alice_a, "alice-src")
    alice_a.put_bucket_replication(Bucket="alice-src", ReplicationConfiguration=rule("payroll"))
    alice_a.put_object(Bucket="alice-src", Key="salaries.csv", Body=b"alice was here")
    alice_a.put_object(Bucket="alice-src", Key="large", Body=b"L" * LARGE)
    alice_a.delete_object(Bucket="alice-src", Key="gone")
    outcomes = ReplicationProcessor(settings(a, b), "b").process_batch(entries(alice_a, "alice-src"))
    assert [o.status for o in outcomes] == ["FAILED"] * 3, [(o.status, o.error) for o in outcomes]
    assert all("DstBucketAccessDenied" in (o.error or "") for o in outcomes), [o.error for o in outcomes]
    assert owner_b.get_object(Bucket="payroll", Key="salaries.csv")["Body"].read() == b"real data"
    assert [row[0] for row in listing(owner_b, "payroll")] == ["salaries.csv"]


def test_a_users_own_buckets_replicate_large_versions_too(sites: tuple[Service, Service]) -> None:
    """The pipeline reads a large version's bytes through the internal object route: a
    plain GET with admin credentials is AccessDenied in a user's bucket, so every version
    above the batch path's inline limit in a bucket the admin did not own went FAILED."""
    from tests.support.gateway import USER_AK, USER_SK

    a, b = sites
    alice_a, alice_b = s3_client(a.url, USER_AK, USER_SK), s3_client(b.url, USER_AK, USER_SK)
    versioned(alice_a, "alice-own")
    versioned(alice_b, "alice-own-dst")
    alice_a.put_bucket_replication(Bucket="alice-own", ReplicationConfiguration=rule("alice-own-dst"))
    alice_a.put_object(Bucket="alice-own", Key="small", Body=b"s" * 100)
    alice_a.put_object(Bucket="alice-own", Key="large", Body=b"L" * LARGE)
    rs = settings(a, b)
    outcomes = ReplicationProcessor(rs, "b").process_batch(entries(alice_a, "alice-own"))
    assert [o.status for o in outcomes] == ["COMPLETED"] * 2, [(o.status, o.error) for o in outcomes]
    assert alice_b.get_object(Bucket="alice-own-dst", Key="large")["Body"].read() == b"L" * LARGE


def test_the_data_route_refuses_the_bytes_of_a_replica_it_could_not_make(sites: tuple[Service, Service]) -> None:
    """A large version's bytes go first, a part at a time, through the data route: where its
    version would be refused (bucket missing, unversioned, another owner's), the bytes are
    refused too, before any is stored, rather than copied whole and then discarded."""
    _, b = sites
    sb = s3_client(b.url)
    sb.create_bucket(Bucket="data-unversioned")
    versioned(sb, "data-owned")
    vid = sb.put_object(Bucket="data-owned", Key="mine", Body=b"m")["VersionId"]
    owner = metadata(b.url, "data-owned", "mine", vid)["owner"]

    def put(bucket: str, query: str = "") -> tuple[int, str]:
        r = signed("PUT", f"{b.url}/_/crossbeat/data/{bucket}/k{query}", b"x" * 1000)
        return r.status_code, r.text

    status, text = put("data-unversioned")
    assert status == 409 and "DstBucketUnversioned" in text
    status, text = put("data-owned", "?owner=someone-else")
    assert status == 403 and "DstBucketAccessDenied" in text
    status, text = put("data-missing")
    assert status == 404 and "NoSuchBucket" in text
    status, text = put("data-owned", f"?owner={quote(owner, safe='')}")
    assert status == 200 and orjson.loads(text)["location"][0]["size"] == 1000
