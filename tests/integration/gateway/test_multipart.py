from __future__ import annotations

import hashlib
import io
import os
from typing import Any

import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

from tests.support.gateway import USER_AK

pytestmark = pytest.mark.integration
MiB = 1024 * 1024


def test_upload_fileobj_multipart_with_checksums(s3: Any, bucket: str) -> None:
    data = os.urandom(11 * MiB + 123)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_fileobj(io.BytesIO(data), bucket, "mpu", Config=cfg)
    h = s3.head_object(Bucket=bucket, Key="mpu", ChecksumMode="ENABLED")
    md5s = b"".join(hashlib.md5(data[i:i + 5 * MiB]).digest() for i in range(0, len(data), 5 * MiB))
    assert h["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"'
    assert h["ContentLength"] == len(data)
    assert s3.get_object(Bucket=bucket, Key="mpu")["Body"].read() == data
    part2 = s3.get_object(Bucket=bucket, Key="mpu", PartNumber=2)
    assert part2["Body"].read() == data[5 * MiB:10 * MiB]
    assert part2["PartsCount"] == 3


def test_manual_multipart_list_abort_and_errors(s3: Any, bucket: str) -> None:
    up = s3.create_multipart_upload(Bucket=bucket, Key="manual", Metadata={"x": "y"}, ContentType="a/b")
    uid = up["UploadId"]
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("manual", uid)]
    p1 = s3.upload_part(Bucket=bucket, Key="manual", UploadId=uid, PartNumber=1, Body=b"a" * (5 * MiB))
    p2 = s3.upload_part(Bucket=bucket, Key="manual", UploadId=uid, PartNumber=2, Body=b"b" * 10)
    parts = s3.list_parts(Bucket=bucket, Key="manual", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 * MiB), (2, 10)]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="manual", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": '"0000"'}]})
    assert exc.value.response["Error"]["Code"] == "InvalidPart"
    # which part, as S3's error document says it
    assert {k: exc.value.response["Error"].get(k) for k in ("UploadId", "PartNumber", "ETag")} == {
        "UploadId": uid, "PartNumber": "2", "ETag": '"0000"'}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="manual", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": p2["ETag"]}, {"PartNumber": 1, "ETag": p1["ETag"]}]})
    assert exc.value.response["Error"]["Code"] == "InvalidPartOrder"
    done = s3.complete_multipart_upload(Bucket=bucket, Key="manual", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    assert done["ETag"].endswith('-2"')
    assert done["Location"] == f"{s3.meta.endpoint_url}/{bucket}/manual"
    g = s3.get_object(Bucket=bucket, Key="manual")
    assert g["Metadata"] == {"x": "y"} and g["ContentType"] == "a/b"
    assert g["Body"].read() == b"a" * (5 * MiB) + b"b" * 10
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.list_parts(Bucket=bucket, Key="manual", UploadId=uid)
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"

    small = s3.create_multipart_upload(Bucket=bucket, Key="small")["UploadId"]
    a = s3.upload_part(Bucket=bucket, Key="small", UploadId=small, PartNumber=1, Body=b"tiny")
    b = s3.upload_part(Bucket=bucket, Key="small", UploadId=small, PartNumber=2, Body=b"tiny")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="small", UploadId=small, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": a["ETag"]}, {"PartNumber": 2, "ETag": b["ETag"]}]})
    assert exc.value.response["Error"]["Code"] == "EntityTooSmall"
    assert {k: exc.value.response["Error"].get(k) for k in ("ProposedSize", "MinSizeAllowed", "PartNumber", "ETag")} == {
        "ProposedSize": "4", "MinSizeAllowed": str(5 * MiB), "PartNumber": "1", "ETag": a["ETag"]}
    s3.abort_multipart_upload(Bucket=bucket, Key="small", UploadId=small)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)


def test_upload_part_copy(s3: Any, bucket: str) -> None:
    src = os.urandom(6 * MiB)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    uid = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    c1 = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=uid, PartNumber=1,
                             CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes=0-{5 * MiB - 1}")
    c2 = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=uid, PartNumber=2,
                             CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes={5 * MiB}-{6 * MiB - 1}")
    s3.complete_multipart_upload(Bucket=bucket, Key="assembled", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": c1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": c2["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() == src


def test_multipart_checksum_sha256_composite(s3: Any, bucket: str) -> None:
    parts = [os.urandom(5 * MiB), os.urandom(1000)]
    uid = s3.create_multipart_upload(Bucket=bucket, Key="cs", ChecksumAlgorithm="SHA256")["UploadId"]
    done = []
    for i, body in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key="cs", UploadId=uid, PartNumber=i, Body=body, ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
    r = s3.complete_multipart_upload(Bucket=bucket, Key="cs", UploadId=uid, MultipartUpload={"Parts": done})
    import base64
    expected = base64.b64encode(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()).decode()
    assert r["ChecksumSHA256"] == f"{expected}-2"


def test_part_number_reads_as_aws_answers(s3: Any, bucket: str) -> None:
    data = os.urandom(5 * MiB) + b"tail"
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid,
                                                      PartNumber=n, Body=body)["ETag"]}
             for n, body in ((1, data[:5 * MiB]), (2, data[5 * MiB:]))]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": parts})
    # the parts count only when a part is asked for
    assert "PartsCount" not in s3.head_object(Bucket=bucket, Key="mp")
    assert "PartsCount" not in s3.get_object(Bucket=bucket, Key="mp", Range="bytes=0-0")
    second = s3.head_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert second["PartsCount"] == 2 and second["ContentRange"] == f"bytes {5 * MiB}-{len(data) - 1}/{len(data)}"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=1, Range="bytes=0-1")
    assert exc.value.response["Error"]["Code"] == "InvalidRequest"
    # an object not uploaded in parts is one part
    s3.put_object(Bucket=bucket, Key="single", Body=b"0123456789")
    one = s3.get_object(Bucket=bucket, Key="single", PartNumber=1)
    assert one["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert one["ContentRange"] == "bytes 0-9/10" and one["Body"].read() == b"0123456789"
    assert "PartsCount" not in one
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="single", PartNumber=2)
    assert exc.value.response["Error"]["Code"] == "InvalidPartNumber"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


@pytest.mark.parametrize(
    ("copy_range", "message"),
    [
        ("bytes=5-", "must be of the form bytes=first-last"),
        ("bytes=-5", "must be of the form bytes=first-last"),
        ("5-6", "must be of the form bytes=first-last"),
        ("bytes=6-5", "not valid for source object of size: 10"),
        ("bytes=5-50", "not valid for source object of size: 10"),
        ("bytes=20-30", "not valid for source object of size: 10"),
    ],
)
def test_upload_part_copy_takes_only_a_range_inside_the_source(
    s3: Any, bucket: str, copy_range: str, message: str
) -> None:
    """A GET Range may be open or run past the end; a copy range may not, since the part
    copied would then not be the part asked for."""
    s3.put_object(Bucket=bucket, Key="src10", Body=b"0123456789")
    uid = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=uid, PartNumber=1,
                            CopySource={"Bucket": bucket, "Key": "src10"}, CopySourceRange=copy_range)
    assert exc.value.response["Error"]["Code"] == "InvalidArgument"
    assert message in exc.value.response["Error"]["Message"]
    if "not valid" in message:  # as AWS names it
        assert exc.value.response["Error"]["ArgumentName"] == "x-amz-copy-source-range"
        assert exc.value.response["Error"]["ArgumentValue"] == copy_range
    assert not s3.list_parts(Bucket=bucket, Key="dst", UploadId=uid).get("Parts")
    ok = s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=uid, PartNumber=1,
                             CopySource={"Bucket": bucket, "Key": "src10"}, CopySourceRange="bytes=9-9")
    assert [p["Size"] for p in s3.list_parts(Bucket=bucket, Key="dst", UploadId=uid)["Parts"]] == [1]
    assert ok["CopyPartResult"]["ETag"]


def test_uploads_and_parts_name_their_initiator(alice: Any, bucket: str) -> None:
    name = bucket + "-alice"
    alice.create_bucket(Bucket=name)
    uid = alice.create_multipart_upload(Bucket=name, Key="k")["UploadId"]
    alice_id = {"ID": USER_AK, "DisplayName": "alice"}
    listed = alice.list_multipart_uploads(Bucket=name)["Uploads"][0]
    assert (listed["Initiator"], listed["Owner"]) == (alice_id, alice_id)
    parts = alice.list_parts(Bucket=name, Key="k", UploadId=uid)
    assert (parts["Initiator"], parts["Owner"]) == (alice_id, alice_id)


def _three_parts(s3: Any, bucket: str, key: str, **create: Any) -> tuple[str, list[dict[str, Any]], bytes]:
    uid = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    bodies = [bytes([65 + n]) * (5 * MiB) for n in range(3)]
    extra = {"ChecksumAlgorithm": create["ChecksumAlgorithm"]} if "ChecksumAlgorithm" in create else {}
    parts = []
    for n, body in enumerate(bodies, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=body, **extra)
        parts.append({"PartNumber": n, "ETag": r["ETag"], **{k: v for k, v in r.items() if k.startswith("Checksum") and k != "ChecksumType"}})
    return uid, parts, b"".join(bodies)


@pytest.mark.parametrize("versioning", [None, "Enabled", "Suspended"])
def test_a_repeated_complete_answers_as_the_first(s3: Any, bucket: str, versioning: str | None) -> None:
    """As S3: a client that lost Complete's answer and sends it again gets the same answer,
    not NoSuchUpload (the object was made); another upload id, or other parts, still do."""
    if versioning:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": versioning})
    uid, parts, data = _three_parts(s3, bucket, "k")
    first = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    if versioning == "Enabled":
        s3.put_object(Bucket=bucket, Key="k", Body=b"newer")  # the upload's version is no longer the latest
    again = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    for field in ("ETag", "Location", "Bucket", "Key"):
        assert again[field] == first[field]
    assert again.get("VersionId") == first.get("VersionId")
    if versioning == "Enabled":
        assert first["VersionId"] != "null"
    else:
        assert "VersionId" not in first  # the null version: no x-amz-version-id, as PutObject
    versions = s3.list_object_versions(Bucket=bucket, Prefix="k").get("Versions", [])
    assert len(versions) == (2 if versioning == "Enabled" else 1)  # nothing made twice
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts[:2]})
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid + "x", MultipartUpload={"Parts": parts})
    assert exc.value.response["Error"]["Code"] == "NoSuchUpload"


@pytest.mark.parametrize(
    ("algorithm", "kind"),
    [("CRC32", "FULL_OBJECT"), ("CRC32C", "FULL_OBJECT"), ("CRC64NVME", "FULL_OBJECT"), ("SHA256", "COMPOSITE"), ("SHA1", "COMPOSITE")],
)
def test_complete_checks_the_object_checksum_it_is_sent(s3: Any, bucket: str, algorithm: str, kind: str) -> None:
    """CompleteMultipartUpload's x-amz-checksum-* header is the whole object's expected
    checksum (a composite one with or without its -N); a wrong one is BadDigest and makes
    nothing."""
    uid, parts, data = _three_parts(s3, bucket, "k", ChecksumAlgorithm=algorithm, ChecksumType=kind)
    param = f"Checksum{algorithm}"
    expected = _expected_object_checksum(algorithm, kind, data, parts)
    wrong = expected[:-4] + ("AAA=" if not expected[:-4].endswith("AAA=") else "BBB=")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts}, **{param: wrong})
    assert exc.value.response["Error"]["Code"] == "BadDigest"
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket=bucket, Key="k")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts}, **{param: expected})
    assert done[param] == expected
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == data


def _expected_object_checksum(algorithm: str, kind: str, data: bytes, parts: list[dict[str, Any]]) -> str:
    import base64
    import zlib

    from awscrt import checksums as crt

    if kind == "COMPOSITE":
        digests = b"".join(base64.b64decode(p[f"Checksum{algorithm}"]) for p in parts)
        h = hashlib.new(algorithm.lower(), digests).digest()
        return f"{base64.b64encode(h).decode()}-{len(parts)}"
    if algorithm == "CRC32":
        value, size = zlib.crc32(data), 4
    elif algorithm == "CRC32C":
        value, size = crt.crc32c(data), 4
    else:
        value, size = crt.crc64nvme(data), 8
    return base64.b64encode(value.to_bytes(size, "big")).decode()


def test_complete_refuses_a_checksum_the_upload_does_not_have(s3: Any, bucket: str) -> None:
    uid, parts, _ = _three_parts(s3, bucket, "k")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts}, ChecksumSHA256="x" * 43 + "=")
    assert exc.value.response["Error"]["Code"] == "InvalidRequest"
    s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})


def test_a_complete_racing_a_replacement_of_its_part_never_acknowledges_lost_data(
    s3: Any, gateway: Any, bucket: str,
) -> None:
    """UploadPart of part 1 again while a Complete naming the first part 1 runs: whichever
    commits first wins (the other gets InvalidPart or NoSuchUpload, as on AWS). The Complete
    used to commit the replaced part's location, whose data the replacer freed: 200 OK for
    an object that answered 500 to every GET."""
    import concurrent.futures
    import random
    import time

    from tests.support.gateway import s3_client

    second = s3_client(gateway.url)  # the racing requests on their own connections

    def outcome(call: Any, *, delay: float = 0.0, **kwargs: Any) -> str:
        time.sleep(delay)
        try:
            call(**kwargs)
            return "ok"
        except botocore.exceptions.ClientError as exc:
            return str(exc.response["Error"]["Code"])

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for n in range(60):
            key = f"race/{n}"
            uid = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            first, replacement = os.urandom(2000 + n), os.urandom(3000 + n)
            etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=1, Body=first)["ETag"]
            replace = pool.submit(outcome, second.upload_part, Bucket=bucket, Key=key,
                                  UploadId=uid, PartNumber=1, Body=replacement)
            complete = pool.submit(  # the race: either may commit first
                outcome, s3.complete_multipart_upload, delay=random.random() * 0.006,
                Bucket=bucket, Key=key, UploadId=uid,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
            done = (complete.result(), replace.result())
            assert done in {("ok", "NoSuchUpload"), ("InvalidPart", "ok")}, done
            if done[0] == "ok":
                assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == first, key
            else:
                s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)


def _checksum_of(algorithm: str, data: bytes) -> str:
    """The base64 `algorithm` checksum of `data`, from hashlib, zlib and awscrt."""
    import base64
    import zlib

    from awscrt import checksums as crt

    if algorithm == "CRC32":
        digest = zlib.crc32(data).to_bytes(4, "big")
    elif algorithm == "CRC32C":
        digest = crt.crc32c(data).to_bytes(4, "big")
    elif algorithm == "CRC64NVME":
        digest = crt.crc64nvme(data).to_bytes(8, "big")
    elif algorithm == "XXHASH64":
        h = crt.XXHash.new_xxhash64()
        h.update(data)
        digest = bytes(h.finalize())
    else:
        digest = hashlib.new(algorithm.lower(), data).digest()
    return base64.b64encode(digest).decode()


def _composite_of(algorithm: str, part_checksums: list[str]) -> str:
    """S3's COMPOSITE checksum: that of the parts' digests, then `-{parts}`."""
    import base64

    digests = b"".join(base64.b64decode(v) for v in part_checksums)
    return f"{_checksum_of(algorithm, digests)}-{len(part_checksums)}"


def test_a_part_of_another_algorithm_than_its_uploads_is_refused(s3: Any, bucket: str) -> None:
    """As S3: a part checked with SHA256 on a CRC32 upload could never give the object its
    CRC32 checksum; it was stored, and Complete then made an object with no checksum."""
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="CRC32")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=1, Body=b"x" * 10, ChecksumAlgorithm="SHA256")
    assert exc.value.response["Error"]["Code"] == "InvalidRequest"
    assert exc.value.response["Error"]["Message"] == (
        "Checksum Type mismatch occurred, expected checksum Type: crc32, actual checksum Type: sha256")
    assert not s3.list_parts(Bucket=bucket, Key="k", UploadId=uid).get("Parts")


@pytest.mark.parametrize("kind", ["COMPOSITE", "FULL_OBJECT"])
def test_parts_sent_without_a_checksum_get_their_uploads(s3: Any, gateway: Any, bucket: str, kind: str) -> None:
    """A part whose client sent no checksum gets the one of its upload's algorithm, computed
    as it arrives (S3 does for FULL_OBJECT uploads), so the object gets its checksum; a
    Complete whose parts carry none is still taken (the stored ones are checked)."""
    from tests.support.gateway import s3_client

    bare = s3_client(gateway.url, request_checksum_calculation="when_required")
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="CRC32", ChecksumType=kind)["UploadId"]
    bodies = [os.urandom(5 * MiB), os.urandom(100)]
    parts = []
    for n, body in enumerate(bodies, 1):
        r = bare.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=n, Body=body)
        assert r["ChecksumCRC32"] == _checksum_of("CRC32", body)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    part_checksums = [_checksum_of("CRC32", b) for b in bodies]
    listed = s3.list_parts(Bucket=bucket, Key="k", UploadId=uid)["Parts"]
    assert [p["ChecksumCRC32"] for p in listed] == part_checksums
    done = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    whole = _checksum_of("CRC32", b"".join(bodies))
    expected = _composite_of("CRC32", part_checksums) if kind == "COMPOSITE" else whole
    assert (done["ChecksumCRC32"], done["ChecksumType"]) == (expected, kind)
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (expected, kind)


@pytest.mark.parametrize(("algorithm", "kind"), [("CRC32C", "FULL_OBJECT"), ("SHA256", "COMPOSITE")])
def test_upload_part_copy_computes_its_uploads_checksum(s3: Any, bucket: str, algorithm: str, kind: str) -> None:
    """As S3: a copied part gets the checksum of its upload's algorithm, in CopyPartResult
    too; it had none, and so the object had none."""
    src = os.urandom(5 * MiB + 1000)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm=algorithm, ChecksumType=kind)["UploadId"]
    pieces = [src[:5 * MiB], src[5 * MiB:]]
    parts = []
    for n, (first, last) in enumerate(((0, 5 * MiB - 1), (5 * MiB, len(src) - 1)), 1):
        r = s3.upload_part_copy(Bucket=bucket, Key="k", UploadId=uid, PartNumber=n,
                                CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes={first}-{last}")
        assert r["CopyPartResult"][f"Checksum{algorithm}"] == _checksum_of(algorithm, pieces[n - 1])
        parts.append({"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]})
    listed = s3.list_parts(Bucket=bucket, Key="k", UploadId=uid)["Parts"]
    assert [p[f"Checksum{algorithm}"] for p in listed] == [_checksum_of(algorithm, p) for p in pieces]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    with_checksums = [{**p, f"Checksum{algorithm}": _checksum_of(algorithm, b)} for p, b in zip(parts, pieces, strict=True)]
    assert done[f"Checksum{algorithm}"] == _expected_object_checksum(algorithm, kind, src, with_checksums)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == src


@pytest.mark.parametrize(
    ("algorithm", "kind", "message"),
    [
        ("CRC64NVME", "COMPOSITE", "The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm."),
        ("SHA256", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the sha256 checksum algorithm."),
        ("SHA1", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the sha1 checksum algorithm."),
        ("XXHASH64", "FULL_OBJECT", "The FULL_OBJECT checksum type cannot be used with the xxhash64 checksum algorithm."),
        ("CRC32", "BOGUS", "Value for x-amz-checksum-type header is invalid."),
        (None, "FULL_OBJECT", "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."),
    ],
)
def test_create_refuses_a_checksum_type_its_algorithm_cannot_have(
    s3: Any, bucket: str, algorithm: str | None, kind: str, message: str
) -> None:
    """With S3's errors, at Create: these were taken, and the upload failed only at its
    Complete, after every part was sent (and every retry of it failed the same way)."""
    extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumType=kind, **extra)
    assert exc.value.response["Error"]["Code"] == "InvalidRequest"
    assert exc.value.response["Error"]["Message"] == message
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)


def test_uploads_name_their_checksum_type(s3: Any, bucket: str) -> None:
    """Create answers, and ListMultipartUploads lists, the type the object's checksum will
    have: the one asked for, else the algorithm's default (FULL_OBJECT for CRC64NVME)."""
    asked = {  # key: algorithm, type asked for, type it has
        "crc32-full": ("CRC32", "FULL_OBJECT", "FULL_OBJECT"),
        "crc32": ("CRC32", None, "COMPOSITE"),
        "crc64": ("CRC64NVME", None, "FULL_OBJECT"),
    }
    for key, (algorithm, kind, has) in asked.items():
        r = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm,
                                       **({"ChecksumType": kind} if kind else {}))
        assert (r["ChecksumAlgorithm"], r["ChecksumType"]) == (algorithm, has)
    s3.create_multipart_upload(Bucket=bucket, Key="none")
    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    listed = {u["Key"]: (u.get("ChecksumAlgorithm"), u.get("ChecksumType")) for u in uploads}
    assert listed == {key: (algorithm, has) for key, (algorithm, _, has) in asked.items()} | {"none": (None, None)}
    for u in uploads:  # and ListParts too
        got = s3.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        assert (got.get("ChecksumAlgorithm"), got.get("ChecksumType")) == listed[u["Key"]]


def test_a_part_read_in_checksum_mode_has_its_own_checksum(s3: Any, bucket: str) -> None:
    """GET/HEAD ?partNumber=N in checksum mode answers the part's checksum (the object's
    for an object in one part), as S3 does; it answered none."""
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="SHA256")["UploadId"]
    bodies = [os.urandom(5 * MiB), os.urandom(1000)]
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=n,
                                                      Body=b, ChecksumAlgorithm="SHA256")["ETag"]}
             for n, b in enumerate(bodies, 1)]  # fmt: skip
    s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    for n, body in enumerate(bodies, 1):
        head = s3.head_object(Bucket=bucket, Key="k", PartNumber=n, ChecksumMode="ENABLED")
        assert head["ChecksumSHA256"] == _checksum_of("SHA256", body)
        got = s3.get_object(Bucket=bucket, Key="k", PartNumber=n, ChecksumMode="ENABLED")
        assert got["ChecksumSHA256"] == _checksum_of("SHA256", body) and got["Body"].read() == body
    one = s3.put_object(Bucket=bucket, Key="one", Body=b"single", ChecksumAlgorithm="CRC32")["ChecksumCRC32"]
    assert s3.head_object(Bucket=bucket, Key="one", PartNumber=1, ChecksumMode="ENABLED")["ChecksumCRC32"] == one


@pytest.mark.parametrize("algorithm", ["SHA512", "MD5", "XXHASH64"])
def test_the_newer_algorithms_are_checked_and_shown_as_the_classic_ones(
    s3: Any, gateway: Any, bucket: str, algorithm: str
) -> None:
    """SHA512, MD5 and XXHASH* are taken as the classic five are: a wrong part checksum in
    Complete is InvalidPart (it was taken), and their values show in ListParts,
    CompleteMultipartUploadResult, GetObjectAttributes and CopyObjectResult (they were
    left out of every document)."""
    from tests.support.gateway import s3_client

    bare = s3_client(gateway.url, request_checksum_calculation="when_required")
    param = f"Checksum{algorithm}"
    uid = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm=algorithm)["UploadId"]
    bodies = [os.urandom(5 * MiB), os.urandom(10)]
    parts = []
    for n, body in enumerate(bodies, 1):
        r = bare.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=n, Body=body,
                             **{param: _checksum_of(algorithm, body)})
        parts.append({"PartNumber": n, "ETag": r["ETag"], param: r[param]})
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=uid)["Parts"]
    assert [p.get(param) for p in listed] == [_checksum_of(algorithm, b) for b in bodies]
    wrong = [parts[0], {**parts[1], param: _checksum_of(algorithm, b"WRONG")}]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": wrong})
    assert exc.value.response["Error"]["Code"] == "InvalidPart"
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": parts})
    composite = _composite_of(algorithm, [p[param] for p in parts])
    assert (done[param], done["ChecksumType"]) == (composite, "COMPOSITE")
    attrs = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["Checksum", "ObjectParts"])
    assert attrs["Checksum"][param] == composite.rpartition("-")[0]
    assert [p[param] for p in attrs["ObjectParts"]["Parts"]] == [p[param] for p in parts]
    bare.put_object(Bucket=bucket, Key="one", Body=b"data", **{param: _checksum_of(algorithm, b"data")})
    copied = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "one"})
    assert copied["CopyObjectResult"][param] == _checksum_of(algorithm, b"data")


def test_an_empty_last_part_reads_as_empty(s3: Any, gateway: Any, bucket: str) -> None:
    """GET/HEAD ?partNumber of a multipart object's empty last part: no bytes. It answered
    the whole object, so a download by parts (the SDKs' transfer managers) wrote it twice."""
    uid = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    first = os.urandom(5 * MiB)
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key="k", UploadId=uid, PartNumber=n,
                                                      Body=body)["ETag"]}
             for n, body in ((1, first), (2, b""))]  # fmt: skip
    s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=uid, MultipartUpload={"Parts": parts})
    got = s3.get_object(Bucket=bucket, Key="k", PartNumber=2)
    assert got["Body"].read() == b"" and got["ContentLength"] == 0 and got["PartsCount"] == 2
    assert s3.head_object(Bucket=bucket, Key="k", PartNumber=2)["ContentLength"] == 0
    assert s3.get_object(Bucket=bucket, Key="k", PartNumber=1)["Body"].read() == first


def test_a_part_over_5_gib_is_refused_before_its_body(s3: Any, gateway: Any, bucket: str) -> None:
    """As S3: a part is at most 5 GiB (EntityTooLarge, before 100-continue), a copied part
    too (InvalidRequest). Parts were held to the object's limit only (5 TiB by default)."""
    import socket
    from urllib.parse import urlsplit

    uid = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    url = urlsplit(s3.generate_presigned_url(
        "upload_part", Params={"Bucket": bucket, "Key": "k", "UploadId": uid, "PartNumber": 1}))
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                     f"Content-Length: {5 * 1024**3 + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        answer = b""
        while b"</Error>" not in answer:
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 400 ") and b"<Code>EntityTooLarge</Code>" in answer, answer[:300]
    assert b"100 Continue" not in answer
