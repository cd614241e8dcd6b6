"""The batch paths of the replication engine against two real gateways (no Spark, no broker):
`ReplicationProcessor.process_batch` and `StatusUpdater.apply_batch` over the internal
batchRead / batchReplica / batchUpdate routes, and those routes' answers to bad input."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import orjson
import pytest

from crossbeat.extensions.replication.messages import ReplicationEntry
from crossbeat.extensions.replication.processor import ReplicationProcessor
from crossbeat.extensions.replication.settings import (
    Endpoint,
    ReplicationSettings,
    RetrySettings,
    SiteSettings,
)
from crossbeat.extensions.replication.status_updater import APPLIED, UNCHANGED, StatusUpdater
from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client, signed
from tests.support.procs import Service
from tests.support.replication import replication_rule as rule

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    root: Path = tmp_path_factory.mktemp("batch")
    with running_gateway(root / "a") as a, running_gateway(root / "b") as b:
        yield a, b


def settings(a: Service, b: Service) -> ReplicationSettings:
    return ReplicationSettings(
        access_key=ROOT_AK, secret_key=ROOT_SK,  # type: ignore[arg-type]
        source=Endpoint(endpoint=a.url), sites={"b": SiteSettings(endpoint=b.url)},
    )


def make_buckets(a: Service, b: Service, name: str, *, at_b: bool = True) -> None:
    sa = s3_client(a.url)
    sa.create_bucket(Bucket=name)
    sa.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    sa.put_bucket_replication(Bucket=name, ReplicationConfiguration=rule(name))
    if at_b:
        sb = s3_client(b.url)
        sb.create_bucket(Bucket=name)
        sb.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def entries_of(client: Any, bucket: str, *, size_hints: bool = False) -> list[ReplicationEntry]:
    """Entries in journal order (oldest first), with the populator's size hints if asked."""
    listed = client.list_object_versions(Bucket=bucket)
    out = []
    for v in listed.get("Versions", []) + listed.get("DeleteMarkers", []):
        out.append(ReplicationEntry(seq=0, bucket=bucket, key=v["Key"], versionId=v["VersionId"],
                                    isDeleteMarker="ETag" not in v, sites=("b",), ts="",
                                    size=v.get("Size", 0) if size_hints else None))
    return sorted(out, key=lambda e: e.versionId)


def versions(client: Any, bucket: str) -> list[tuple[str, str, str, bool]]:
    listed = client.list_object_versions(Bucket=bucket)
    rows = [(v["Key"], v["VersionId"], v["ETag"], v["IsLatest"]) for v in listed.get("Versions", [])]
    rows += [(m["Key"], m["VersionId"], "DM", m["IsLatest"]) for m in listed.get("DeleteMarkers", [])]
    return sorted(rows)


def test_small_versions_markers_and_a_large_one_replicate_identically(
    sites: tuple[Service, Service],
) -> None:
    a, b = sites
    make_buckets(a, b, "mixed")
    sa, sb = s3_client(a.url), s3_client(b.url)
    for i in range(40):
        extra: dict[str, Any] = {"Metadata": {"i": str(i)}} if i % 3 == 0 else {}
        if i % 5 == 0:
            extra["Tagging"] = f"n={i}"
        sa.put_object(Bucket="mixed", Key=f"k/{i % 25}", Body=hashlib.sha256(str(i).encode()).digest() * (i + 1),
                      **extra)
    sa.put_object(Bucket="mixed", Key="empty", Body=b"")
    sa.put_object(Bucket="mixed", Key="large", Body=b"L" * (2 * 1024 * 1024 + 3))  # not inlined
    sa.delete_object(Bucket="mixed", Key="k/3")
    entries = entries_of(sa, "mixed")

    rs = settings(a, b)
    processor = ReplicationProcessor(rs, "b")
    outcomes = processor.process_batch(entries + entries[:10])  # redelivered duplicates too
    assert len(outcomes) == len(entries)
    assert {o.status for o in outcomes} == {"COMPLETED"}

    assert versions(sb, "mixed") == versions(sa, "mixed")
    for key, vid, etag, _ in versions(sa, "mixed"):
        if etag == "DM":
            continue
        ga = sa.get_object(Bucket="mixed", Key=key, VersionId=vid)
        gb = sb.get_object(Bucket="mixed", Key=key, VersionId=vid)
        assert gb["Body"].read() == ga["Body"].read(), key
        assert gb["Metadata"] == ga["Metadata"] and gb["LastModified"] == ga["LastModified"]
        assert gb["ReplicationStatus"] == "REPLICA"
        assert (sb.get_object_tagging(Bucket="mixed", Key=key, VersionId=vid)["TagSet"]
                == sa.get_object_tagging(Bucket="mixed", Key=key, VersionId=vid)["TagSet"])

    updater = StatusUpdater(rs)
    assert updater.apply_batch(outcomes) == [APPLIED] * len(outcomes)
    for e in entries:
        if not e.isDeleteMarker:
            head = sa.head_object(Bucket="mixed", Key=e.key, VersionId=e.versionId)
            assert head["ReplicationStatus"] == "COMPLETED", e.key
    # Redelivered outcomes change nothing; a redelivered batch finds every site COMPLETED.
    assert updater.apply_batch(outcomes) == [UNCHANGED] * len(outcomes)
    assert processor.process_batch(entries) == []


def test_large_versions_relay_in_parts_that_crc32c_checks(sites: tuple[Service, Service]) -> None:
    a, b = sites
    make_buckets(a, b, "parts")
    sa, sb = s3_client(a.url), s3_client(b.url)
    body = os.urandom(11 * MiB + 7)  # three parts of 5 MiB: the buffer path
    sa.put_object(Bucket="parts", Key="big", Body=body, Metadata={"m": "1"})
    rs = settings(a, b).model_copy(
        update={"multipart_threshold_bytes": 5 * MiB, "part_size_bytes": 5 * MiB})
    outcomes = ReplicationProcessor(rs, "b").process_batch(entries_of(sa, "parts", size_hints=True))
    assert [o.status for o in outcomes] == ["COMPLETED"]
    src = sa.head_object(Bucket="parts", Key="big")
    got = sb.get_object(Bucket="parts", Key="big")
    assert got["Body"].read() == body
    assert got["ETag"] == src["ETag"] and got["VersionId"] == src["VersionId"]
    assert got["Metadata"] == {"m": "1"} and got["ReplicationStatus"] == "REPLICA"


def test_the_data_route_checks_a_crc32c_and_can_skip_the_md5(
    sites: tuple[Service, Service], tmp_path_factory: pytest.TempPathFactory,
) -> None:
    _, b = sites
    sb = s3_client(b.url)
    sb.create_bucket(Bucket="data-route")
    # (a replica's bucket: the route refuses bytes for one whose versioning is not Enabled)
    sb.put_bucket_versioning(Bucket="data-route", VersioningConfiguration={"Status": "Enabled"})

    def stored() -> int:  # pytest also links the newest "batchN" as "batchcurrent"
        return len(list(tmp_path_factory.getbasetemp().glob("batch[0-9]*/b/**/manifest.json")))

    data = os.urandom(70_000)
    crc = base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()
    url = f"{b.url}/_/crossbeat/data/data-route/k"
    before = stored()
    wrong = base64.b64encode((crc32c.crc32c(data) ^ 1).to_bytes(4, "big")).decode()
    refused = signed("PUT", url + "?md5=0", data, {"x-amz-checksum-crc32c": wrong})
    assert refused.status_code == 400 and "<Code>BadDigest</Code>" in refused.text
    assert stored() == before  # nothing written
    ok = signed("PUT", url + "?md5=0", data, {"x-amz-checksum-crc32c": crc})
    assert ok.status_code == 200, ok.text
    assert ok.json()["md5"] == "" and ok.json()["location"][0]["size"] == len(data)
    assert stored() == before + 1
    # by default the md5 is computed and returned
    default = signed("PUT", url, data).json()
    assert default["md5"] == hashlib.md5(data).hexdigest()
    # a Content-MD5 is verified even when the md5 is not wanted
    bad_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    refused = signed("PUT", url + "?md5=0", data, {"content-md5": bad_md5})
    assert refused.status_code == 400 and "<Code>BadDigest</Code>" in refused.text


def test_try_batch_sets_what_it_can_and_leaves_the_rest_without_waiting(
    sites: tuple[Service, Service],
) -> None:
    """The replication pipeline's inline status update: one batch request settles the
    outcomes; against a source that does not answer it gives up at once (None), leaving
    the outcomes to the status pipeline, instead of waiting out the retry backoff."""
    a, b = sites
    make_buckets(a, b, "inline")
    sa = s3_client(a.url)
    for i in range(5):
        sa.put_object(Bucket="inline", Key=f"k{i}", Body=b"x" * i)
    entries = entries_of(sa, "inline")
    rs = settings(a, b)
    outcomes = ReplicationProcessor(rs, "b").process_batch(entries)
    assert len(outcomes) == 5

    slow = rs.model_copy(update={"source": Endpoint(endpoint="http://127.0.0.1:9", access_key=ROOT_AK),
                                 "retry": RetrySettings(backoff_min_s=30, max_seconds=120)})
    started = time.monotonic()
    assert StatusUpdater(slow).try_batch(outcomes) == [None] * 5
    assert time.monotonic() - started < 20  # not one 30 s backoff
    assert {sa.head_object(Bucket="inline", Key=e.key)["ReplicationStatus"] for e in entries} == {"PENDING"}

    assert StatusUpdater(rs).try_batch(outcomes + outcomes[:2]) == [APPLIED] * 5 + [UNCHANGED] * 2
    assert {sa.head_object(Bucket="inline", Key=e.key)["ReplicationStatus"] for e in entries} == {"COMPLETED"}


def test_large_versions_by_size_hint_stream_beside_the_batches_in_object_order(
    sites: tuple[Service, Service],
) -> None:
    """Entries whose size hint says large start on the streaming path at once; an object
    with a large version keeps all its versions on that path, in order."""
    a, b = sites
    make_buckets(a, b, "hinted")
    sa, sb = s3_client(a.url), s3_client(b.url)
    big = 2 * 1024 * 1024 + 7
    sa.put_object(Bucket="hinted", Key="mixed", Body=b"small first")
    sa.put_object(Bucket="hinted", Key="mixed", Body=b"B" * big)
    sa.put_object(Bucket="hinted", Key="mixed", Body=b"small again")
    sa.delete_object(Bucket="hinted", Key="mixed")
    for i in range(3):
        sa.put_object(Bucket="hinted", Key=f"big/{i}", Body=bytes([65 + i]) * big)
    for i in range(30):
        sa.put_object(Bucket="hinted", Key=f"small/{i}", Body=str(i).encode() * 50)
    entries = entries_of(sa, "hinted", size_hints=True)
    assert any(e.size and e.size > 1024 * 1024 for e in entries)

    outcomes = ReplicationProcessor(settings(a, b), "b").process_batch(entries)
    assert sorted((o.key, o.versionId) for o in outcomes) == sorted((e.key, e.versionId) for e in entries)
    assert {o.status for o in outcomes} == {"COMPLETED"}
    assert versions(sb, "hinted") == versions(sa, "hinted")
    for key, vid, etag, _ in versions(sa, "hinted"):
        if etag != "DM":
            assert (sb.get_object(Bucket="hinted", Key=key, VersionId=vid)["Body"].read()
                    == sa.get_object(Bucket="hinted", Key=key, VersionId=vid)["Body"].read()), key


def test_outcomes_for_one_version_apply_in_order_despite_stale_source(
    sites: tuple[Service, Service],
) -> None:
    a, b = sites
    make_buckets(a, b, "stale")
    sa = s3_client(a.url)
    sa.put_object(Bucket="stale", Key="k", Body=b"one")
    entries = entries_of(sa, "stale")
    rs = settings(a, b)
    outcome = ReplicationProcessor(rs, "b").process_batch(entries)[0]
    updater = StatusUpdater(rs)
    # The same outcome three times in one batch, all carrying the same (soon stale) revision.
    assert updater.apply_batch([outcome, outcome, outcome]) == [APPLIED, UNCHANGED, UNCHANGED]
    head = sa.head_object(Bucket="stale", Key="k", VersionId=outcome.versionId)
    assert head["ReplicationStatus"] == "COMPLETED"


def test_a_missing_destination_bucket_fails_each_version_once(sites: tuple[Service, Service]) -> None:
    a, b = sites
    make_buckets(a, b, "nobucket", at_b=False)
    sa = s3_client(a.url)
    for i in range(3):
        sa.put_object(Bucket="nobucket", Key=f"k{i}", Body=b"x" * i)
    outcomes = ReplicationProcessor(settings(a, b), "b").process_batch(entries_of(sa, "nobucket"))
    assert [(o.status, o.attempts) for o in outcomes] == [("FAILED", 1)] * 3
    assert all("NoSuchBucket" in (o.error or "") for o in outcomes)


def _post(url: str, route: str, doc: Any) -> Any:
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return signed("POST", f"{url}/_/crossbeat/{route}", body, {"content-type": "application/json"})


def _replica_item(bucket: str, key: str, vid: str, data: bytes, **meta: Any) -> dict[str, Any]:
    md = {"bucket": bucket, "key": key, "versionId": vid, "sortKey": vid, "size": len(data),
          "etag": hashlib.md5(data).hexdigest(), "isDeleteMarker": False,
          "lastModified": "2026-11-22T00:00:00.000Z", "replicationInfo": {"status": "REPLICA"},
          **meta}
    return {"metadata": md, "data": base64.b64encode(data).decode()}


def test_batch_routes_answer_bad_items_one_by_one_and_change_nothing_for_them(
    sites: tuple[Service, Service],
) -> None:
    a, b = sites
    make_buckets(a, b, "routes")
    sb = s3_client(b.url)
    good = _replica_item("routes", "good", "00000000000000000001vg", b"fine")
    bad_etag = _replica_item("routes", "bad-etag", "00000000000000000002vg", b"data", etag="0" * 32)
    short = _replica_item("routes", "short", "00000000000000000003vg", b"data", size=99)
    no_sort = _replica_item("routes", "nosort", "00000000000000000004vg", b"data", sortKey="")
    bad_b64 = dict(_replica_item("routes", "b64", "00000000000000000005vg", b"data"), data="!!")
    other = _replica_item("missing-bucket", "k", "00000000000000000006vg", b"data")
    resp = _post(b.url, "batchReplica", {"replicas": [good, bad_etag, short, no_sort, bad_b64, other]})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert results[0] == {"versionId": "00000000000000000001vg"}
    assert [r.get("error") for r in results[1:]] == [
        "BadDigest", "IncompleteBody", "InvalidArgument", "InvalidArgument", "NoSuchBucket"]
    assert [k for k, *_ in versions(sb, "routes")] == ["good"]
    assert sb.get_object(Bucket="routes", Key="good")["Body"].read() == b"fine"

    # Malformed documents are refused as a whole.
    docs: list[Any] = [b"{not json", {"replicas": "nope"}, {"other": []}, {"replicas": [1, 2]}]
    for doc in docs:
        assert _post(b.url, "batchReplica", doc).status_code == 400
    assert _post(b.url, "batchRead", {"versions": [{"bucket": "routes"}]}).status_code == 400
    assert _post(b.url, "batchUpdate", {"updates": [{"metadata": {}, "expectedRevision": "1"}]}).status_code == 400
    assert [k for k, *_ in versions(sb, "routes")] == ["good"]

    # batchRead: metadata, inlined bytes, null for a missing version.
    refs = [{"bucket": "routes", "key": "good", "versionId": "00000000000000000001vg"},
            {"bucket": "routes", "key": "good", "versionId": "nope"}]
    read = _post(b.url, "batchRead?inlineBelow=1024", {"versions": refs}).json()["versions"]
    assert base64.b64decode(read[0]["data"]) == b"fine" and read[0]["metadata"]["revision"] == 1
    assert read[1] == {"metadata": None}

    # batchUpdate: one applied, one stale revision (current returned), one missing version.
    md = read[0]["metadata"]
    updates = [{"metadata": {**md, "contentType": "text/x-new"}, "expectedRevision": 1},
               {"metadata": md, "expectedRevision": 1},
               {"metadata": {**md, "versionId": "nope"}, "expectedRevision": 1}]
    results = _post(b.url, "batchUpdate", {"updates": updates}).json()["results"]
    assert results[0]["metadata"]["revision"] == 2
    assert results[1]["error"] == "RevisionMismatch" and results[1]["current"]["revision"] == 2
    assert results[2] == {"error": "NoSuchVersion"}
    assert sb.head_object(Bucket="routes", Key="good")["ContentType"] == "text/x-new"


def test_batch_routes_need_admin_credentials(sites: tuple[Service, Service]) -> None:
    from tests.support.gateway import USER_AK, USER_SK

    _, b = sites
    resp = signed("POST", f"{b.url}/_/crossbeat/batchRead", orjson.dumps({"versions": []}),
                  {"content-type": "application/json"}, ak=USER_AK, sk=USER_SK)
    assert resp.status_code == 403
