from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import botocore.exceptions
import pytest

from tests.support.gateway import signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration


def status(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> int:
    return int(exc.value.response["ResponseMetadata"]["HTTPStatusCode"])


def test_never_versioned_bucket(s3: Any, bucket: str) -> None:
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    r = s3.put_object(Bucket=bucket, Key="k", Body=b"1")
    assert "VersionId" not in r
    s3.put_object(Bucket=bucket, Key="k", Body=b"2")
    vs = s3.list_object_versions(Bucket=bucket)["Versions"]
    assert [(v["VersionId"], v["IsLatest"]) for v in vs] == [("null", True)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"2"
    s3.delete_object(Bucket=bucket, Key="k")
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)
    assert "DeleteMarkers" not in s3.list_object_versions(Bucket=bucket)


def test_enabled_versions_and_delete_markers(s3: Any, vbucket: str) -> None:
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="k", Body=b"two")["VersionId"]
    assert v1 != v2 and "null" not in (v1, v2)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    assert s3.get_object(Bucket=b, Key="k", VersionId=v1)["Body"].read() == b"one"
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=b, Key="k")
    assert status(exc) == 404
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_object(Bucket=b, Key="k", VersionId=marker)
    assert status(exc) == 405
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=b, Key="k", VersionId="00000000000000000000000000")
    assert exc.value.response["Error"]["Code"] == "NoSuchVersion"
    listing = s3.list_object_versions(Bucket=b)
    assert [v["VersionId"] for v in listing["Versions"]] == [v2, v1]
    assert [(m["VersionId"], m["IsLatest"]) for m in listing["DeleteMarkers"]] == [(marker, True)]
    # removing the marker restores the previous version
    r = s3.delete_object(Bucket=b, Key="k", VersionId=marker)
    assert r["DeleteMarker"] is True
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"two"
    s3.delete_object(Bucket=b, Key="k", VersionId=v2)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"one"
    assert "Contents" in s3.list_objects_v2(Bucket=b)


def test_suspended_bucket_overwrites_null_version(s3: Any, vbucket: str) -> None:
    b = vbucket
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"versioned")["VersionId"]
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Suspended"
    # the null version: no x-amz-version-id, as on S3 (a GET names it)
    assert "VersionId" not in s3.put_object(Bucket=b, Key="k", Body=b"null-1")
    assert s3.head_object(Bucket=b, Key="k")["VersionId"] == "null"
    s3.put_object(Bucket=b, Key="k", Body=b"null-2")
    ids = [v["VersionId"] for v in s3.list_object_versions(Bucket=b)["Versions"]]
    assert ids == ["null", v1]
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    listing = s3.list_object_versions(Bucket=b)
    assert [v["VersionId"] for v in listing["Versions"]] == [v1]
    assert [m["VersionId"] for m in listing["DeleteMarkers"]] == ["null"]


def test_versioning_cannot_go_back(s3: Any, vbucket: str) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Disabled"})
    assert status(exc) == 400


def test_list_versions_pagination(s3: Any, vbucket: str) -> None:
    expected = []
    for key in ("a", "b", "c"):
        ids = [s3.put_object(Bucket=vbucket, Key=key, Body=key.encode() * i)["VersionId"] for i in range(4)]
        expected += [(key, v) for v in reversed(ids)]
    seen = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=vbucket, PaginationConfig={"PageSize": 5}):
        seen += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
    assert seen == expected


def test_delete_objects_with_versions(s3: Any, vbucket: str) -> None:
    v = s3.put_object(Bucket=vbucket, Key="x", Body=b"1")["VersionId"]
    r = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [{"Key": "x", "VersionId": v}, {"Key": "y"}]})
    by_key = {d["Key"]: d for d in r["Deleted"]}
    assert by_key["x"]["VersionId"] == v
    assert by_key["y"]["DeleteMarker"] is True and by_key["y"]["DeleteMarkerVersionId"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "Version id cannot be the empty string"),
        ("%00", "Invalid version id specified"),
        ("a%0D%0AX-Injected%3A%201", "Invalid version id specified"),
        ("with%20space", "Invalid version id specified"),
        ("%C3%A9", "Invalid version id specified"),
        ("A" * 1025, "Invalid version id specified"),
    ],
)
def test_a_version_id_that_names_no_version_is_invalid_argument(
    gateway: Service, s3: Any, vbucket: str, query: str, message: str
) -> None:
    s3.put_object(Bucket=vbucket, Key="k", Body=b"kept")
    for method in ("GET", "PUT", "DELETE"):  # the tagging of a version
        r = signed(method, f"{gateway.url}/{vbucket}/k?tagging&versionId={query}",
                   b"<Tagging><TagSet/></Tagging>" if method == "PUT" else b"")  # fmt: skip
        assert r.status_code == 400, (method, r.text)
    for method in ("GET", "HEAD", "DELETE"):
        r = signed(method, f"{gateway.url}/{vbucket}/k?versionId={query}")
        assert r.status_code == 400, (method, r.text)
        if method != "HEAD":
            root = ET.fromstring(r.content)  # a well-formed document whatever the id held
            assert (root.findtext("Code"), root.findtext("Message")) == ("InvalidArgument", message)
            assert root.findtext("ArgumentName") == "versionId"
    # nothing changed: no delete marker, the object as it was
    listing = s3.list_object_versions(Bucket=vbucket)
    assert "DeleteMarkers" not in listing and len(listing["Versions"]) == 1
    assert s3.get_object(Bucket=vbucket, Key="k")["Body"].read() == b"kept"
    # a copy source and a listing marker are checked alike
    r = signed("PUT", f"{gateway.url}/{vbucket}/copy",
               headers={"x-amz-copy-source": f"/{vbucket}/k?versionId={query}"})  # fmt: skip
    assert r.status_code == 400 and b"InvalidArgument" in r.content, r.text
    assert "copy" not in {v["Key"] for v in s3.list_object_versions(Bucket=vbucket)["Versions"]}
    if query:
        r = signed("GET", f"{gateway.url}/{vbucket}?versions&key-marker=k&version-id-marker={query}")
        assert r.status_code == 400 and b"version-id-marker" in r.content, r.text


def test_a_well_formed_version_id_that_is_not_there(s3: Any, vbucket: str) -> None:
    s3.put_object(Bucket=vbucket, Key="k", Body=b"kept")
    for absent in ("garbage", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nrjfkd"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.get_object(Bucket=vbucket, Key="k", VersionId=absent)
        assert exc.value.response["Error"]["Code"] == "NoSuchVersion"
        # deleting a version that is not there is done already, as on AWS
        assert s3.delete_object(Bucket=vbucket, Key="k", VersionId=absent)["VersionId"] == absent
    assert s3.get_object(Bucket=vbucket, Key="k")["Body"].read() == b"kept"


def test_delete_objects_with_an_empty_version_id_deletes_nothing(s3: Any, vbucket: str) -> None:
    # as AWS: an empty <VersionId/> names no version; it does not mean "the current one"
    s3.put_object(Bucket=vbucket, Key="k", Body=b"kept")
    r = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [{"Key": "k", "VersionId": ""}]})
    assert [(e["Key"], e["Code"]) for e in r["Errors"]] == [("k", "NoSuchVersion")]
    assert "Deleted" not in r
    listing = s3.list_object_versions(Bucket=vbucket)
    assert "DeleteMarkers" not in listing and len(listing["Versions"]) == 1


def test_delete_objects_names_the_marker_it_deleted_and_refuses_a_malformed_id(
    gateway: Service, s3: Any, vbucket: str
) -> None:
    """A delete marker deleted by its versionId is DeleteMarker with DeleteMarkerVersionId,
    as S3's DeletedObject says (it was missing); an entry whose id is malformed is an error
    entry, as DeleteObject answers it (it was reported Deleted)."""
    s3.put_object(Bucket=vbucket, Key="k", Body=b"kept")
    marker = s3.delete_object(Bucket=vbucket, Key="k")["VersionId"]
    r = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [
        {"Key": "k", "VersionId": marker}, {"Key": "k", "VersionId": "bad id"}]})
    (deleted,) = r["Deleted"]
    assert deleted == {"Key": "k", "VersionId": marker, "DeleteMarker": True, "DeleteMarkerVersionId": marker}
    (error,) = r["Errors"]
    assert (error["Code"], error["Message"], error["VersionId"]) == (
        "InvalidArgument", "Invalid version id specified", "bad id")
    assert s3.get_object(Bucket=vbucket, Key="k")["Body"].read() == b"kept"


def test_a_delete_marker_answers_405_with_its_last_modified(gateway: Service, s3: Any, vbucket: str) -> None:
    """GET/HEAD of a delete marker by its versionId: 405 with Last-Modified, as S3's
    GetObject and HeadObject reference says (it had none). The tagging and ACL of a key
    whose current version is a delete marker are 405 too (they were 404)."""
    s3.put_object(Bucket=vbucket, Key="k", Body=b"x")
    marker = s3.delete_object(Bucket=vbucket, Key="k")["VersionId"]
    for method in ("GET", "HEAD"):
        r = signed(method, f"{gateway.url}/{vbucket}/k?versionId={marker}")
        assert r.status_code == 405 and r.headers["x-amz-delete-marker"] == "true"
        assert r.headers["last-modified"].endswith(" GMT") and r.headers["x-amz-version-id"] == marker
    assert signed("GET", f"{gateway.url}/{vbucket}/k").status_code == 404  # the object: gone
    tagging = b"<Tagging><TagSet/></Tagging>"
    for method, query, body in [("GET", "tagging", b""), ("PUT", "tagging", tagging),
                                ("DELETE", "tagging", b""), ("GET", "acl", b"")]:
        r = signed(method, f"{gateway.url}/{vbucket}/k?{query}", body)
        assert r.status_code == 405 and "<Code>MethodNotAllowed</Code>" in r.text, (method, query, r.text)
        assert r.headers["x-amz-delete-marker"] == "true"
