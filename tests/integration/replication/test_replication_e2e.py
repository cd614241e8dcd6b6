"""End to end: site a → populator → broker → Spark pipelines → site b."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.replication.conftest import (
    Rig,
    make_destination_bucket,
    replicated_bucket,
    source_status,
    source_statuses,
    versions,
    wait_replicated,
)
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.timeout(600)]

N_OBJECTS = int(os.environ.get("CROSSBEAT_E2E_OBJECTS", "500"))


def put_workload(s3: Any, bucket: str, n: int) -> None:
    """n versions: overwrites, user metadata, tags, multipart objects, delete markers."""
    def put(i: int) -> None:
        key = f"obj/{i % (n // 2)}"  # every key written twice on average: overwrites
        body = hashlib.sha256(str(i).encode()).digest() * (1 + i % 40)
        extra: dict[str, Any] = {}
        if i % 3 == 0:
            extra["Metadata"] = {"who": f"writer-{i}", "n": str(i)}
        if i % 5 == 0:
            extra["Tagging"] = f"color=c{i % 7}&idx={i}"
        if i % 11 == 0:
            extra["ContentType"] = "text/plain"
        s3.put_object(Bucket=bucket, Key=key, Body=body, **extra)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(n - 15)))
    for j in range(2):  # multipart: 3 parts, the last short; above the 5 MiB part route
        key = f"big/{j}"
        up = s3.create_multipart_upload(Bucket=bucket, Key=key, Metadata={"kind": "mpu"})
        parts = []
        for p in range(1, 4):
            body = bytes([p + j]) * (5 * 1024 * 1024 if p < 3 else 1234)
            etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                  PartNumber=p, Body=body)["ETag"]
            parts.append({"PartNumber": p, "ETag": etag})
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
    for k in range(13):  # delete markers
        s3.delete_object(Bucket=bucket, Key=f"obj/{k}")


def assert_identical(rig: Rig, bucket: str) -> None:
    a, b = rig.s3("a"), rig.s3("b")
    listed = versions(a, bucket)
    assert versions(b, bucket) == listed  # same versionIds, ETags, sizes, order, latest

    def same(entry: tuple[str, str, str, bool, Any]) -> None:
        key, vid, etag, _, _ = entry
        if etag == "DM":
            return
        ga = a.get_object(Bucket=bucket, Key=key, VersionId=vid)
        gb = b.get_object(Bucket=bucket, Key=key, VersionId=vid)
        assert gb["Body"].read() == ga["Body"].read(), key
        for field in ("ETag", "Metadata", "ContentType", "ContentLength", "LastModified"):
            assert gb[field] == ga[field], (key, field)
        assert ga["ReplicationStatus"] == "COMPLETED"
        assert gb["ReplicationStatus"] == "REPLICA"
        ta = a.get_object_tagging(Bucket=bucket, Key=key, VersionId=vid)["TagSet"]
        tb = b.get_object_tagging(Bucket=bucket, Key=key, VersionId=vid)["TagSet"]
        assert sorted(map(str, tb)) == sorted(map(str, ta)), key

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(same, listed))


def test_objects_arrive_identical_at_site_b(rig: Rig) -> None:
    bucket = replicated_bucket(rig, "rep-main")
    put_workload(rig.s3("a"), bucket, N_OBJECTS)
    wait_replicated(rig, bucket, timeout=300)
    assert_identical(rig, bucket)
    # one long-poll a second when idle: a log line per request would be 86,400 a day
    chatter = [line for line in rig.workers["populator"].output if "HTTP Request:" in line]
    assert not chatter, chatter[:3]


def put_some(rig: Rig, bucket: str, n: int, prefix: str = "k") -> None:
    s3 = rig.s3("a")
    for i in range(n):
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{i}", Body=os.urandom(100 + i))


def test_destination_down_past_the_retry_window_is_held_then_completed(rig: Rig) -> None:
    """Site b down for longer than the retry window (3 s here): its versions wait PENDING,
    none FAILED, and replicate once b is back, with no operator's retry."""
    bucket = replicated_bucket(rig, "rep-down")
    pipeline = rig.workers["pipeline"]
    seen = len(pipeline.output)
    rig.services["b"].stop()
    put_some(rig, bucket, 20)
    wait_until(lambda: any("holding" in line for line in pipeline.output[seen:]), timeout=120,
               interval=0.5, what="the replication pipeline holding site b's versions")
    assert set(source_statuses(rig, bucket).values()) == {"PENDING"}
    rig.start_gateway("b")
    wait_replicated(rig, bucket, timeout=120)


def test_refusing_destination_fails_then_retry_completes(rig: Rig) -> None:
    bucket = replicated_bucket(rig, "rep-refuse", at_b=False)  # b answers NoSuchBucket
    put_some(rig, bucket, 6)
    wait_until(lambda: set(source_statuses(rig, bucket).values()) == {"FAILED"}, timeout=120,
               interval=0.5, what="versions FAILED")
    listed = rig.cli("failed")
    assert listed.returncode == 0, listed.stderr
    lines = [line.split("\t") for line in listed.stdout.splitlines() if line.startswith(bucket)]
    assert len(lines) == 6 and all(line[3] == "b" for line in lines)
    make_destination_bucket(rig, bucket)
    one = rig.cli("retry", *lines[0][:3])
    assert one.returncode == 0 and "requeued 1" in one.stdout, one.stderr
    rest = rig.cli("retry", "--all")
    assert rest.returncode == 0 and "requeued 5" in rest.stdout, rest.stdout + rest.stderr
    wait_replicated(rig, bucket, timeout=120)
    assert rig.cli("retry").returncode != 0  # neither --all nor a version: usage error


def test_pause_holds_a_site_and_resume_loses_nothing(rig: Rig) -> None:
    bucket = replicated_bucket(rig, "rep-pause")
    paused = rig.cli("pause", "b")
    assert paused.returncode == 0, paused.stderr
    # The query reads the control topic about once a second before planning a batch.
    time.sleep(3)
    put_some(rig, bucket, 10)
    time.sleep(5)
    assert versions(rig.s3("b"), bucket) == []
    assert set(source_statuses(rig, bucket).values()) == {"PENDING"}
    resumed = rig.cli("resume", "b")
    assert resumed.returncode == 0, resumed.stderr
    wait_replicated(rig, bucket, timeout=120)
    assert rig.cli("pause", "nowhere").returncode != 0


def test_kill9_of_populator_broker_and_spark_driver_converges(rig: Rig) -> None:
    bucket = replicated_bucket(rig, "rep-chaos")
    stop = threading.Event()
    written = [0]
    errors: list[Exception] = []

    def writer() -> None:
        s3 = rig.s3("a")
        while not stop.is_set() and written[0] < 400:
            i = written[0]
            try:
                s3.put_object(Bucket=bucket, Key=f"c/{i % 150}", Body=os.urandom(64 + i % 500))
            except Exception as exc:  # noqa: BLE001 - site a stays up; report at the end
                errors.append(exc)
            written[0] += 1
            time.sleep(0.02)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for victim in ("populator", "broker", "pipeline"):
            start = written[0]
            wait_until(lambda s=start: written[0] >= s + 40, timeout=60, what="writes")
            if victim == "broker":
                rig.services["broker"].kill()
                rig.start_broker()
            else:
                rig.workers[victim].kill()
                (rig.start_populator if victim == "populator" else rig.start_pipelines)()
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors[:3]
    wait_replicated(rig, bucket, timeout=240)  # also: no extra (duplicate) versions at b


def test_status_pipeline_applies_the_outcomes_left_to_it_in_order(rig: Rig) -> None:
    """The replication pipeline sets site b's status itself; an outcome published without
    `applied` (what it could not set) is the status pipeline's to apply, and one marked
    `applied` is skipped there. Site c has no pipeline here, so its outcomes come from us,
    on one key (one partition, in order): a COMPLETED marked applied, then a FAILED. Had
    the status pipeline applied the first, the second could not overwrite COMPLETED."""
    from crossbeat.extensions.replication.messages import ReplicationOutcome, content_fingerprint
    from crossbeat.populator.extension import Message, message_key
    from crossbeat.populator.publisher import Publisher
    from tests.support.gateway import signed

    bucket = replicated_bucket(rig, "rep-left")
    vid = rig.s3("a").put_object(Bucket=bucket, Key="k", Body=b"left to the status pipeline")["VersionId"]
    wait_until(lambda: source_status(rig, bucket, "k", vid) == "COMPLETED", timeout=120,
               interval=0.5, what="site b COMPLETED")
    # Site c pending beside b, set by hand: a rule naming a site the pipelines do not know
    # has them fail it at once, and a PROCESSING version is not published again.
    url = f"{rig.url('a')}/_/crossbeat/metadata/{bucket}/k?versionId={vid}"
    md = signed("GET", url).json()
    info = md["replicationInfo"]
    info = dict(info, status="PROCESSING", backends=[
        *info["backends"], {"site": "c", "status": "PENDING", "dataStoreVersionId": ""}])
    r = signed("PUT", url, json.dumps({"metadata": dict(md, replicationInfo=info),
                                       "expectedRevision": md["revision"]}).encode())
    assert r.status_code == 200, r.text
    md = signed("GET", url).json()
    common: dict[str, Any] = {"bucket": bucket, "key": "k", "versionId": vid, "site": "c",
                              "dataStoreVersionId": vid, "fingerprint": content_fingerprint(md),
                              "attempts": 1, "ts": time.time()}
    applied = ReplicationOutcome(status="COMPLETED", error=None, applied=True, **common)
    left = ReplicationOutcome(status="FAILED", error="refused", source=md, **common)
    Publisher(f"127.0.0.1:{rig.ports['broker']}").publish(
        Message("crossbeat-replication-status", message_key(bucket, "k"), o.to_json())
        for o in (applied, left)
    )
    wait_until(lambda: source_status(rig, bucket, "k", vid) != "PROCESSING", timeout=120,
               interval=0.5, what="the status pipeline applied the outcome left to it")
    assert source_status(rig, bucket, "k", vid) == "FAILED"
