"""The metadata journal through the gateway, and the internal routes of the replication engine."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.gateway import USER_AK, USER_SK, signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration


def read_journal(url: str, after: int, limit: int = 10_000, wait: float = 0) -> list[dict[str, Any]]:
    r = signed("GET", f"{url}/_/crossbeat/journal?after={after}&limit={limit}&wait={wait}")
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line]


def read_all(url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        page = read_journal(url, after, 500)
        if not page:
            return out
        out += page
        after = page[-1]["seq"]


def test_journal_requires_admin(gateway: Service) -> None:
    r = signed("GET", f"{gateway.url}/_/crossbeat/journal?after=0", ak=USER_AK, sk=USER_SK)
    assert r.status_code == 403


def test_every_change_is_journaled_once_dense_and_in_order(gateway: Service, s3: Any) -> None:
    s3.create_bucket(Bucket="journaled")
    s3.put_bucket_versioning(Bucket="journaled", VersioningConfiguration={"Status": "Enabled"})
    start = read_all(gateway.url)[-1]["seq"]
    n_threads, per_thread = 8, 25
    acked: list[tuple[str, str]] = []
    lock = threading.Lock()

    def writer(t: int) -> None:
        for i in range(per_thread):
            key = f"w{t}/{i % 5}"
            vid = s3.put_object(Bucket="journaled", Key=key, Body=f"{t}-{i}".encode())["VersionId"]
            with lock:
                acked.append((key, vid))

    with ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(writer, range(n_threads)))
    entries = [e for e in read_all(gateway.url) if e["seq"] > start]
    seqs = [e["seq"] for e in entries]
    assert seqs == list(range(start + 1, start + 1 + len(entries)))  # dense, ascending
    puts = [(e["key"], e["versionId"]) for e in entries if e["op"] == "put" and e["bucket"] == "journaled"]
    assert sorted(puts) == sorted(acked)  # exactly one entry per change
    for e in entries:
        assert set(e) == {"seq", "op", "bucket", "key", "versionId", "value", "ts"}
    # commit order: versions of a key appear in the journal in the order they were stored
    by_key: dict[str, list[str]] = {}
    for key, vid in puts:
        by_key.setdefault(key, []).append(vid)
    for key, vids in by_key.items():
        listed = [v["VersionId"] for v in s3.list_object_versions(Bucket="journaled", Prefix=key)["Versions"] if v["Key"] == key]
        assert list(reversed(listed)) == vids


def test_long_poll_wakes_on_new_entry(gateway: Service, s3: Any) -> None:
    s3.create_bucket(Bucket="longpoll")
    last = read_all(gateway.url)[-1]["seq"]
    result: list[list[dict[str, Any]]] = []
    t = threading.Thread(target=lambda: result.append(read_journal(gateway.url, last, wait=20)))
    started = time.monotonic()
    t.start()
    s3.put_object(Bucket="longpoll", Key="wake", Body=b"x")
    t.join(timeout=30)
    assert result and result[0][0]["key"] == "wake"
    assert time.monotonic() - started < 15


def test_internal_metadata_cas_and_replica_routes(gateway: Service, s3: Any) -> None:
    url = gateway.url
    s3.create_bucket(Bucket="int-src")
    s3.put_bucket_versioning(Bucket="int-src", VersioningConfiguration={"Status": "Enabled"})
    s3.create_bucket(Bucket="int-dst")
    s3.put_bucket_versioning(Bucket="int-dst", VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket="int-src", Key="obj", Body=b"payload", Metadata={"m": "1"})["VersionId"]
    r = signed("GET", f"{url}/_/crossbeat/metadata/int-src/obj?versionId={vid}")
    meta = r.json()
    assert meta["versionId"] == vid and meta["revision"] >= 1
    # compare-and-set: the right revision wins, a stale one is refused and changes nothing
    new = dict(meta, userMetadata={"m": "2"})
    ok = signed("PUT", f"{url}/_/crossbeat/metadata/int-src/obj?versionId={vid}",
                json.dumps({"metadata": new, "expectedRevision": meta["revision"]}).encode())
    assert ok.status_code == 200 and ok.json()["revision"] == meta["revision"] + 1
    stale = signed("PUT", f"{url}/_/crossbeat/metadata/int-src/obj?versionId={vid}",
                   json.dumps({"metadata": meta, "expectedRevision": meta["revision"]}).encode())
    assert stale.status_code == 409 and stale.json()["error"] == "RevisionMismatch"
    assert s3.head_object(Bucket="int-src", Key="obj")["Metadata"] == {"m": "2"}
    # a replica keeps versionId, ETag, metadata and last-modified, with status REPLICA
    data = signed("PUT", f"{url}/_/crossbeat/data/int-dst/obj", b"payload").json()
    replica = dict(meta, bucket="int-dst", location=data["location"],
                   replicationInfo={"status": "REPLICA", "role": "", "storageClass": "", "content": [],
                                    "backends": [], "preferredRead": ""})
    for _ in range(2):  # redelivery leaves one identical replica
        r = signed("PUT", f"{url}/_/crossbeat/metadata/int-dst/obj?versionId={vid}",
                   json.dumps({"metadata": replica, "create": True}).encode())
        assert r.status_code == 200, r.text
    src = s3.head_object(Bucket="int-src", Key="obj", VersionId=vid)
    dst = s3.get_object(Bucket="int-dst", Key="obj")
    assert dst["Body"].read() == b"payload"
    assert dst["VersionId"] == vid and dst["ETag"] == src["ETag"]
    assert dst["LastModified"] == src["LastModified"]
    assert dst["ReplicationStatus"] == "REPLICA"
    assert len(s3.list_object_versions(Bucket="int-dst")["Versions"]) == 1
    # batchDelete is idempotent
    for _ in range(2):
        r = signed("POST", f"{url}/_/crossbeat/batchDelete", json.dumps({"locations": []}).encode())
        assert r.status_code == 200


def test_failed_list_and_retry(gateway: Service, s3: Any) -> None:
    url = gateway.url
    s3.create_bucket(Bucket="retry-src")
    s3.put_bucket_versioning(Bucket="retry-src", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_replication(Bucket="retry-src", ReplicationConfiguration={"Role": "arn:aws:iam::000000000000:role/r", "Rules": [{
        "ID": "r1", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
        "DeleteMarkerReplication": {"Status": "Disabled"},
        "Destination": {"Bucket": "arn:aws:s3:::xdest", "StorageClass": "b"}}]})
    vid = s3.put_object(Bucket="retry-src", Key="f", Body=b"x")["VersionId"]
    meta = signed("GET", f"{url}/_/crossbeat/metadata/retry-src/f?versionId={vid}").json()
    assert meta["replicationInfo"]["backends"] == [{"site": "b", "status": "PENDING", "dataStoreVersionId": ""}]
    failed_meta = dict(meta, replicationInfo=dict(meta["replicationInfo"], status="FAILED",
                                                  backends=[{"site": "b", "status": "FAILED", "dataStoreVersionId": ""}]))
    r = signed("PUT", f"{url}/_/crossbeat/metadata/retry-src/f?versionId={vid}",
               json.dumps({"metadata": failed_meta, "expectedRevision": meta["revision"]}).encode())
    assert r.status_code == 200
    assert s3.head_object(Bucket="retry-src", Key="f")["ReplicationStatus"] == "FAILED"
    failed = signed("GET", f"{url}/_/crossbeat/replication/failed").json()["failed"]
    assert [(f["bucket"], f["key"], f["versionId"]) for f in failed] == [("retry-src", "f", vid)]
    r = signed("POST", f"{url}/_/crossbeat/replication/retry", json.dumps({"all": True}).encode())
    assert r.json() == {"requeued": 1}
    assert s3.head_object(Bucket="retry-src", Key="f")["ReplicationStatus"] == "PENDING"
    assert signed("GET", f"{url}/_/crossbeat/replication/failed").json()["failed"] == []


def test_replica_route_writes_data_and_metadata_in_one_request(gateway: Service, s3: Any) -> None:
    import base64

    url = gateway.url
    for b in ("one-src", "one-dst"):
        s3.create_bucket(Bucket=b)
        s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket="one-src", Key="k", Body=b"replicate me", Metadata={"a": "b"})["VersionId"]
    meta = signed("GET", f"{url}/_/crossbeat/metadata/one-src/k?versionId={vid}").json()
    replica = dict(meta, bucket="one-dst", replicationInfo={"status": "REPLICA", "role": "", "storageClass": "",
                                                             "content": [], "backends": [], "preferredRead": ""})
    header = base64.urlsafe_b64encode(json.dumps(replica).encode()).decode()
    bad = signed("PUT", f"{url}/_/crossbeat/replica/one-dst/k?versionId={vid}", b"other bytes!",
                 headers={"x-amz-crossbeat-metadata": header})
    assert bad.status_code == 400 and b"BadDigest" in bad.content
    assert "Versions" not in s3.list_object_versions(Bucket="one-dst")
    for _ in range(2):  # redelivery leaves one identical replica
        r = signed("PUT", f"{url}/_/crossbeat/replica/one-dst/k?versionId={vid}", b"replicate me",
                   headers={"x-amz-crossbeat-metadata": header})
        assert r.status_code == 200, r.text
    got = s3.get_object(Bucket="one-dst", Key="k")
    assert got["Body"].read() == b"replicate me"
    assert got["VersionId"] == vid and got["Metadata"] == {"a": "b"} and got["ReplicationStatus"] == "REPLICA"
    assert len(s3.list_object_versions(Bucket="one-dst")["Versions"]) == 1


def test_a_tag_change_on_a_replicated_version_replicates_again(gateway: Service, s3: Any) -> None:
    """As on AWS, new tags reach the destinations: the version goes back to PENDING (it
    stayed COMPLETED with the old tags, and the destination kept them for good). A
    replica's tags are the destination's own: its status stays REPLICA."""
    url = gateway.url
    s3.create_bucket(Bucket="tag-src")
    s3.put_bucket_versioning(Bucket="tag-src", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_replication(Bucket="tag-src", ReplicationConfiguration={
        "Role": "arn:aws:iam::000000000000:role/replication",
        "Rules": [{"ID": "all", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                   "DeleteMarkerReplication": {"Status": "Disabled"},
                   "Destination": {"Bucket": "arn:aws:s3:::tag-dst", "StorageClass": "b"}}],
    })
    vid = s3.put_object(Bucket="tag-src", Key="k", Body=b"x", Tagging="v=old")["VersionId"]
    # the replication engine's success, as it records it
    meta = signed("GET", f"{url}/_/crossbeat/metadata/tag-src/k?versionId={vid}").json()
    info = dict(meta["replicationInfo"], status="COMPLETED",
                backends=[dict(b, status="COMPLETED") for b in meta["replicationInfo"]["backends"]])
    done = signed("PUT", f"{url}/_/crossbeat/metadata/tag-src/k?versionId={vid}",
                  json.dumps({"metadata": dict(meta, replicationInfo=info),
                              "expectedRevision": meta["revision"]}).encode())
    assert done.status_code == 200, done.text
    assert s3.head_object(Bucket="tag-src", Key="k")["ReplicationStatus"] == "COMPLETED"
    last = read_all(url)[-1]["seq"]

    s3.put_object_tagging(Bucket="tag-src", Key="k", Tagging={"TagSet": [{"Key": "v", "Value": "new"}]})
    assert s3.head_object(Bucket="tag-src", Key="k")["ReplicationStatus"] == "PENDING"
    [entry] = [e for e in read_journal(url, last) if e["bucket"] == "tag-src"]
    assert entry["op"] == "put" and entry["versionId"] == vid
    value = json.loads(entry["value"]) if isinstance(entry["value"], str) else entry["value"]
    assert value["replicationInfo"]["status"] == "PENDING" and value["tags"] == {"v": "new"}
    s3.delete_object_tagging(Bucket="tag-src", Key="k")
    assert s3.head_object(Bucket="tag-src", Key="k")["ReplicationStatus"] == "PENDING"
