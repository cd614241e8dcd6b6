"""The lifecycle pass in a real gateway (several worker processes) whose lifecycle day lasts
one second and whose pass runs every half second: each action removes what its rule
selects, and nothing else. Waits poll the listing with a bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import running_gateway
from tests.support.procs import Service, wait_until

CONFIG = """
[gateway]
workers = 2
lifecycle_interval_seconds = 0.5
lifecycle_day_seconds = 1
"""
BOUND_S = 30.0


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("gw")) / "data", config=CONFIG) as svc:
        yield svc


def keys(s3: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def versions(s3: Any, bucket: str) -> list[tuple[str, bool, str]]:
    """(key, is delete marker, version id), newest first per key."""
    listing = s3.list_object_versions(Bucket=bucket)
    entries = [(v["Key"], False, v["VersionId"], v["LastModified"]) for v in listing.get("Versions", [])]
    entries += [(m["Key"], True, m["VersionId"], m["LastModified"]) for m in listing.get("DeleteMarkers", [])]
    # newest first by version id (minted ids sort by time): LastModified is whole seconds,
    # as on S3, and a version and its delete marker often share one
    entries.sort(key=lambda e: e[2], reverse=True)
    entries.sort(key=lambda e: e[0])
    return [(k, marker, vid) for k, marker, vid, _ in entries]


def lifecycle(s3: Any, bucket: str, *rules: dict[str, Any]) -> None:
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={"Rules": [{"ID": f"r{i}", "Status": "Enabled", **r} for i, r in enumerate(rules)]},
    )


def test_current_versions_expire_in_an_unversioned_bucket_by_prefix(s3: Any, bucket: str) -> None:
    for key in ("logs/a", "logs/b", "keep/a", "log"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    lifecycle(s3, bucket, {"Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 1}})
    wait_until(lambda: keys(s3, bucket) == ["keep/a", "log"], timeout=BOUND_S, interval=0.1, what="logs/ expired")
    assert s3.get_object(Bucket=bucket, Key="keep/a")["Body"].read() == b"x"
    assert versions(s3, bucket) == [("keep/a", False, "null"), ("log", False, "null")]


def test_current_versions_expire_behind_a_delete_marker_in_a_versioned_bucket(s3: Any, vbucket: str) -> None:
    version = s3.put_object(Bucket=vbucket, Key="k", Body=b"x")["VersionId"]
    s3.put_object(Bucket=vbucket, Key="other", Body=b"y")
    lifecycle(s3, vbucket, {"Filter": {"Prefix": "k"}, "Expiration": {"Days": 1}})
    wait_until(lambda: keys(s3, vbucket) == ["other"], timeout=BOUND_S, interval=0.1, what="k expired")
    (marker, old), rest = versions(s3, vbucket)[:2], versions(s3, vbucket)[2:]
    assert marker[:2] == ("k", True) and old == ("k", False, version)
    assert [(k, m) for k, m, _ in rest] == [("other", False)]
    with pytest.raises(ClientError) as exc:
        s3.head_object(Bucket=vbucket, Key="k")
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
    assert s3.get_object(Bucket=vbucket, Key="k", VersionId=version)["Body"].read() == b"x"


def test_noncurrent_versions_expire_keeping_the_newer_noncurrent_ones(s3: Any, vbucket: str) -> None:
    ids = [s3.put_object(Bucket=vbucket, Key="k", Body=str(i).encode())["VersionId"] for i in range(5)]
    kept_elsewhere = [s3.put_object(Bucket=vbucket, Key="x/k", Body=b"v")["VersionId"] for _ in range(3)]
    lifecycle(s3, vbucket, {"Filter": {"Prefix": "k"},
                            "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 2}})
    wait_until(lambda: len([v for v in versions(s3, vbucket) if v[0] == "k"]) == 3, timeout=BOUND_S, interval=0.1, what="old noncurrent versions gone")
    assert versions(s3, vbucket) == [("k", False, v) for v in reversed(ids[2:])] + [
        ("x/k", False, v) for v in reversed(kept_elsewhere)]


def test_expired_object_delete_markers_are_removed(s3: Any, vbucket: str) -> None:
    for key in ("alone", "covered"):
        s3.put_object(Bucket=vbucket, Key=key, Body=b"x")
        s3.delete_object(Bucket=vbucket, Key=key)
    alone = [v for k, m, v in versions(s3, vbucket) if k == "alone" and not m]
    s3.delete_object(Bucket=vbucket, Key="alone", VersionId=alone[0])  # only the marker is left
    lifecycle(s3, vbucket, {"Filter": {}, "Expiration": {"ExpiredObjectDeleteMarker": True}})
    wait_until(lambda: all(k != "alone" for k, _, _ in versions(s3, vbucket)), timeout=BOUND_S, interval=0.1, what="lone marker removed")
    assert [(k, m) for k, m, _ in versions(s3, vbucket)] == [("covered", True), ("covered", False)]


def test_incomplete_multipart_uploads_are_aborted(s3: Any, bucket: str) -> None:
    uploads = {key: s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"] for key in ("tmp/a", "keep/a")}
    s3.upload_part(Bucket=bucket, Key="tmp/a", UploadId=uploads["tmp/a"], PartNumber=1, Body=b"p" * 1024)
    lifecycle(s3, bucket, {"Filter": {"Prefix": "tmp/"}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}})

    def open_uploads() -> list[str]:
        return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]

    wait_until(lambda: open_uploads() == ["keep/a"], timeout=BOUND_S, interval=0.1, what="tmp/a aborted")
    with pytest.raises(ClientError) as exc:
        s3.list_parts(Bucket=bucket, Key="tmp/a", UploadId=uploads["tmp/a"])
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"


def test_tag_and_size_filters_expire_exactly_what_they_select(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="hit", Body=b"x" * 20, Tagging="t=x&o=1")
    s3.put_object(Bucket=bucket, Key="too-small", Body=b"x" * 10, Tagging="t=x")
    s3.put_object(Bucket=bucket, Key="too-big", Body=b"x" * 30, Tagging="t=x")
    s3.put_object(Bucket=bucket, Key="untagged", Body=b"x" * 20)
    s3.put_object(Bucket=bucket, Key="other-value", Body=b"x" * 20, Tagging="t=y")
    lifecycle(s3, bucket, {"Filter": {"And": {"Tags": [{"Key": "t", "Value": "x"}],
                                              "ObjectSizeGreaterThan": 10, "ObjectSizeLessThan": 30}},
                           "Expiration": {"Days": 1}})
    wait_until(lambda: "hit" not in keys(s3, bucket), timeout=BOUND_S, interval=0.1, what="hit expired")
    assert keys(s3, bucket) == ["other-value", "too-big", "too-small", "untagged"]


def test_a_disabled_rule_expires_nothing(s3: Any, bucket: str) -> None:
    """The witness bucket's enabled rule (3 days, on an object written later) expiring shows
    that a pass has looked at `bucket` after its object was old enough for the disabled
    rule (1 day)."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "off", "Status": "Disabled", "Filter": {}, "Expiration": {"Days": 1}}]})
    witness = bucket + "-w"  # after `bucket` in name order, which passes follow
    s3.create_bucket(Bucket=witness)
    s3.put_object(Bucket=witness, Key="k", Body=b"x")
    lifecycle(s3, witness, {"Filter": {}, "Expiration": {"Days": 3}})
    wait_until(lambda: keys(s3, witness) == [], timeout=BOUND_S, interval=0.1, what="witness expired")
    assert keys(s3, bucket) == ["k"]
